"""How much a warm start leaves for GRPO to learn from: groups whose rewards all agree carry no gradient.

For each number of warm-start steps, trains (or loads from the cache) the course's warm start with that many
steps, samples `--group-size` episodes per training task at temperature 1, and prints the mean reward and how
many groups have all rewards equal. Notebook 11 chose its full-mode warm start (4 steps) from this table.

    python benchmarks/warm_start_signal.py [--env lookup] [--steps 4 8 48] [--tasks 40] [--group-size 4]

Warm starts use the course's full-mode recipe (`course_lib.warm_starts.WARM_START["full"]`, a frozen
`WarmStartSizes`) with `steps` replaced; they are cached under runs/warm_start/, so a second run only samples.
"""

from __future__ import annotations

import argparse
import time

import torch

from course_lib.envs import load_tasks
from course_lib.models import load_policy
from course_lib.rollout import rollout
from course_lib.sft import ensure_warm_start
from course_lib.warm_starts import WARM_START


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="lookup")
    parser.add_argument("--steps", type=int, nargs="+", default=[4, 8, 48],
                        help="warm-start steps to compare")
    parser.add_argument("--tasks", type=int, default=40, help="training tasks sampled")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tasks = load_tasks(args.env, "train")[: args.tasks]
    print(f"env {args.env}: {len(tasks)} training tasks x {args.group_size} samples at temperature 1, "
          f"{args.max_turns} turns, {args.max_new_tokens} new tokens per turn; {args.threads} threads")
    print(f"{'warm-start steps':>16}{'train s':>9}{'mean reward':>13}{'groups all equal':>18}"
          f"{'sample s':>10}")
    for steps in args.steps:
        t0 = time.perf_counter()
        path = ensure_warm_start(args.env, **WARM_START["full"].replace(steps=steps).options(),
                                 progress=False)
        trained = time.perf_counter() - t0  # ~0 when the warm start was cached
        model, tokenizer = load_policy(str(path))
        t0 = time.perf_counter()
        groups = rollout(model, tokenizer, args.env, tasks, group_size=args.group_size,
                         max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, temperature=1.0,
                         seed=0, progress=False)
        rewards = [[t.reward for t in g.trajectories] for g in groups]
        equal = sum(len(set(r)) == 1 for r in rewards)
        mean = sum(map(sum, rewards)) / sum(map(len, rewards))
        print(f"{steps:>16}{trained:>9.0f}{mean:>13.3f}{f'{equal}/{len(groups)}':>18}"
              f"{time.perf_counter() - t0:>10.0f}", flush=True)


if __name__ == "__main__":
    main()
