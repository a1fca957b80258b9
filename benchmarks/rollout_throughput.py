"""Rollout throughput: the batched engine vs one episode at a time, same tasks, same seed.

    python benchmarks/rollout_throughput.py [--episodes 16] [--env lookup] [--max-new-tokens 64]

Prints new tokens/s for both and their ratio. Both runs use greedy decoding so that they generate
the same tokens (the batched engine is checked to act like the sequential one in the tests); the
batched run advances every live episode in one `generate` call per turn.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from course_lib.envs import load_tasks
from course_lib.models import load_policy
from course_lib.rollout import RolloutStats, rollout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=16, help="concurrent episodes (tasks x group size)")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--env", default="lookup")
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dtype", default=None, help="e.g. bf16-autocast")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_policy(dtype=args.dtype)
    tasks = load_tasks(args.env, "test")[: args.episodes // args.group_size]
    common = dict(group_size=args.group_size, max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                  temperature=0.0, seed=0, progress=False)
    rollout(model, tok, args.env, tasks[:1], **{**common, "group_size": 1, "max_new_tokens": 4})  # warm-up

    batched = RolloutStats()
    t0 = time.perf_counter()
    rollout(model, tok, args.env, tasks, stats=batched, **common)
    batched_wall = time.perf_counter() - t0

    single = RolloutStats()
    t0 = time.perf_counter()
    for task in tasks:
        for _ in range(args.group_size):
            rollout(model, tok, args.env, [task], stats=single, **{**common, "group_size": 1})
    single_wall = time.perf_counter() - t0

    b_tps = batched.new_tokens / batched.generate_seconds
    s_tps = single.new_tokens / single.generate_seconds
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, device {model.device}, dtype {args.dtype or model.dtype}")
    print(f"env {args.env}: {len(tasks)} tasks x {args.group_size} = {len(tasks) * args.group_size} episodes, "
          f"max_turns {args.max_turns}, max_new_tokens {args.max_new_tokens}, greedy")
    print(f"{'engine':<22}{'new tokens':>12}{'generate s':>12}{'wall s':>10}{'tokens/s':>11}{'gen calls':>11}")
    print(f"{'batched (one call/turn)':<22}{batched.new_tokens:>12}{batched.generate_seconds:>12.1f}"
          f"{batched_wall:>10.1f}{b_tps:>11.1f}{batched.generate_calls:>11}")
    print(f"{'one episode at a time':<22}{single.new_tokens:>12}{single.generate_seconds:>12.1f}"
          f"{single_wall:>10.1f}{s_tps:>11.1f}{single.generate_calls:>11}")
    print(f"speed-up (tokens/s): {b_tps / s_tps:.2f}x   (target: >= 4x at 16 concurrent episodes)")


if __name__ == "__main__":
    main()
