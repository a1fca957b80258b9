"""Rollout throughput: the batched engine vs one episode at a time, same tasks, same seed.

    python benchmarks/rollout_throughput.py [--episodes 16] [--env lookup] [--max-new-tokens 64]
                                            [--dtypes float32 bf16-autocast bfloat16] [--compare-recompute]

Prints new tokens/s for both engines and their ratio, for each weight/compute dtype, side by side.
Greedy decoding, one episode per task (16 different tasks): greedy rollouts of one task would be
identical, which would flatter the batched engine. The batched run advances every live episode in one
decoding loop per turn (a row leaves the batch when its turn ends); both engines keep each episode's KV
cache between turns, and `prefill tokens` counts the context tokens each actually ran through the model
(the batched engine runs the system prompt shared by all episodes once). --compare-recompute adds both
engines without the cache kept between turns.
"""

from __future__ import annotations

import argparse
import os
import platform

import torch

from course_lib.envs import load_tasks
from course_lib.models import load_policy
from course_lib.rollout import RolloutStats, rollout


def cpu_name() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def run(model, tok, env: str, tasks: list[dict], common: dict, batched: bool, reuse_cache: bool) -> RolloutStats:
    """All episodes in one batched rollout, or one rollout per episode; returns what generation cost."""
    stats = RolloutStats()
    if batched:
        rollout(model, tok, env, tasks, stats=stats, reuse_cache=reuse_cache, **common)
    else:
        for task in tasks:
            for _ in range(common["group_size"]):
                rollout(model, tok, env, [task], stats=stats, reuse_cache=reuse_cache, **{**common, "group_size": 1})
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=16, help="concurrent episodes (tasks x group size)")
    ap.add_argument("--group-size", type=int, default=1, help="episodes per task (greedy: copies of one episode)")
    ap.add_argument("--env", default="lookup")
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bf16-autocast", "bfloat16"],
                    help="float32 weights; fp32 weights with bf16 autocast; bf16 weights")
    ap.add_argument("--compare-recompute", action="store_true",
                    help="also run both engines without keeping the KV cache between turns")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tasks = load_tasks(args.env, "test")[: args.episodes // args.group_size]
    common = dict(group_size=args.group_size, max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                  temperature=0.0, seed=0, progress=False)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"machine: {cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}, device {device}")
    print(f"env {args.env}: {len(tasks)} tasks x {args.group_size} = {len(tasks) * args.group_size} episodes, "
          f"max_turns {args.max_turns}, max_new_tokens {args.max_new_tokens}, greedy")
    print(f"{'dtype':<15}{'engine':<28}{'new tokens':>11}{'prefill tokens':>16}{'generate s':>12}{'tokens/s':>10}"
          f"{'calls':>7}")
    summary = []
    for dtype in args.dtypes:
        model, tok = load_policy(device=device, dtype=None if dtype == "float32" and device == "cpu" else dtype)
        rollout(model, tok, args.env, tasks[:1], **{**common, "group_size": 1, "max_new_tokens": 4})  # warm-up

        tps = {}
        for name, batched, reuse in (("batched, cache kept", True, True), ("batched, recomputed", True, False),
                                     ("one at a time, cache kept", False, True),
                                     ("one at a time, recomputed", False, False)):
            if not (reuse or args.compare_recompute):
                continue
            stats = run(model, tok, args.env, tasks, common, batched, reuse)
            tps[name] = stats.new_tokens / stats.generate_seconds
            print(f"{dtype:<15}{name:<28}{stats.new_tokens:>11}{stats.prefill_tokens:>16}"
                  f"{stats.generate_seconds:>12.1f}{tps[name]:>10.1f}{stats.generate_calls:>7}", flush=True)
        line = f"{dtype:<15}batched / one at a time: {tps['batched, cache kept'] / tps['one at a time, cache kept']:.2f}x"
        if args.compare_recompute:
            line += (f"; cache kept / recomputed: batched {tps['batched, cache kept'] / tps['batched, recomputed']:.2f}x,"
                     f" one at a time {tps['one at a time, cache kept'] / tps['one at a time, recomputed']:.2f}x")
        summary.append(line)
    print("speed-up in new tokens/s (target: >= 4x at 16 concurrent episodes):")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
