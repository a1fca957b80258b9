"""Sampling from a bf16 copy of the policy against sampling from its fp32 weights, on notebook 05's recipe:
the time of an RL step (rollout and update) and held-out success after RL, side by side over seeds.

    python benchmarks/sampler_dtype.py                      # 3 seeds x {float32, bfloat16}, learning-mode
                                                            # recipe
    python benchmarks/sampler_dtype.py --report             # only the table, from the finished runs
    python benchmarks/sampler_dtype.py --seeds 0 --steps 2 --eval-tasks 4   # smoke size

The recipe is notebook 05's learning mode: search_qa two-hop questions from the course's search_qa warm
start, outcome credit, 20 steps of 4 tasks x 4 rollouts, 4 turns of at most 40 new tokens, lr 2e-5, held-out
greedy success on 40 test questions at steps 0, 10 and 20 (evaluation always runs the fp32 weights). Only
`RolloutConfig.sample_dtype` differs between the two arms; a seed gives both arms the same training tasks and
sampling seed. Each (dtype, seed) is a run directory under runs/sampler_dtype/; a finished one (result.json)
is skipped, so the script can be stopped and started again. Checkpoints are deleted once a run is finished
(1.6 GB each). The runs alternate between the arms, so a stopped run still has paired seeds, and the step
times of the two arms come from the same stretch of the machine's time. Run it on idle cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import torch

from course_lib import runs_dir
from course_lib.checkpoint import read_metrics
from course_lib.models import course_threads
from course_lib.train.config import TrainConfig
from course_lib.train.loop import train
from course_lib.warm_starts import course_warm_start

DTYPES = ("float32", "bfloat16")


def run_one(dtype: str, seed: int, args, root: Path, checkpoint: Path) -> dict:
    """Train one arm for one seed (or read its finished result)."""
    run_dir = root / f"{dtype}-seed{seed}"
    done = run_dir / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    config = TrainConfig(env="search_qa", model=str(checkpoint), run_dir=str(run_dir), credit="outcome",
                         task_filter={"hops": 2}, steps=args.steps, tasks_per_step=4, group_size=4,
                         eval_every=args.steps // 2, eval_tasks=args.eval_tasks,
                         checkpoint_every=args.steps // 2, seed=seed, progress=False, optim=dict(lr=2e-5),
                         rollout=dict(max_turns=4, max_new_tokens=40, sample_dtype=dtype))
    t0 = time.perf_counter()
    out = train(config)
    rows = read_metrics(run_dir)
    steps = [r for r in rows if r["kind"] == "train"]
    evals = {r["step"]: r for r in rows if r["kind"] == "eval"}
    result = {"dtype": dtype, "seed": seed, "steps": len(steps), "seconds": time.perf_counter() - t0,
              "rollout_s": statistics.mean(r["seconds_rollout"] for r in steps),
              "update_s": statistics.mean(r.get("seconds_update", 0.0) for r in steps),  # 0: update skipped
              "generate_tokens_per_s": statistics.mean(r["generate_tokens_per_s"] for r in steps),
              "train_success": [r["success"] for r in steps],
              "eval": {step: [e["success"], e["ci_low"], e["ci_high"], e["n"]]
                       for step, e in sorted(evals.items())},
              "final_success": out["eval"]["success"]}
    if "sampler_logprob_gap" in steps[-1]:
        result["sampler_logprob_gap"] = statistics.mean(r.get("sampler_logprob_gap", 0.0) for r in steps)
    done.write_text(json.dumps(result, indent=1))
    shutil.rmtree(run_dir / "checkpoint", ignore_errors=True)
    return result


def report(results: list[dict]) -> str:
    """Per arm: step time (rollout + update) and held-out success per seed; bf16 against fp32, paired by
    seed."""
    lines = ["| sampler | seeds | rollout s / step | update s / step | step s | generated tokens/s | "
             "held-out success at the last step, per seed | mean |",
             "|---|---:|---:|---:|---:|---:|---|---:|"]
    by = {d: sorted((r for r in results if r["dtype"] == d), key=lambda r: r["seed"]) for d in DTYPES}
    for dtype, rs in by.items():
        if not rs:
            continue
        step = statistics.mean(r["rollout_s"] + r["update_s"] for r in rs)
        per_seed = ", ".join(f"{r['final_success']:.3f} (seed {r['seed']})" for r in rs)
        lines.append(f"| {dtype} | {len(rs)} | {statistics.mean(r['rollout_s'] for r in rs):.1f} | "
                     f"{statistics.mean(r['update_s'] for r in rs):.1f} | {step:.1f} | "
                     f"{statistics.mean(r['generate_tokens_per_s'] for r in rs):.1f} | "
                     f"{per_seed} | "
                     f"{statistics.mean(r['final_success'] for r in rs):.3f} |")
    paired = [(a, b) for a in by["float32"] for b in by["bfloat16"] if a["seed"] == b["seed"]]
    if paired:
        ratio = statistics.mean((b["rollout_s"] + b["update_s"]) / (a["rollout_s"] + a["update_s"])
                                for a, b in paired)
        rollout = statistics.mean(b["rollout_s"] / a["rollout_s"] for a, b in paired)
        diffs = [b["final_success"] - a["final_success"] for a, b in paired]
        lines += ["", f"bf16 / fp32, paired by seed ({len(paired)}): RL step time {ratio:.2f}x, rollout time "
                      f"{rollout:.2f}x; held-out success bf16 - fp32 per seed: "
                      f"{', '.join(f'{d:+.3f}' for d in diffs)} (mean {statistics.mean(diffs):+.3f})"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--eval-tasks", type=int, default=40)
    ap.add_argument("--report", action="store_true", help="only print the table from the finished runs")
    ap.add_argument("--md", help="also write the table to this file")
    args = ap.parse_args()
    torch.set_num_threads(course_threads())
    root = runs_dir() / "sampler_dtype" / f"steps{args.steps}-eval{args.eval_tasks}"
    results = []
    if args.report:
        results = [json.loads(p.read_text()) for p in sorted(root.glob("*/result.json"))]
    else:
        checkpoint = course_warm_start("search_qa")
        for seed in args.seeds:
            for dtype in DTYPES:
                print(f"{dtype}, seed {seed} ...", flush=True)
                results.append(r := run_one(dtype, seed, args, root, checkpoint))
                print(f"  rollout {r['rollout_s']:.1f} s + update {r['update_s']:.1f} s per step; "
                      f"held-out success {r['final_success']:.3f}", flush=True)
    table = report(results)
    print(f"\n{torch.get_num_threads()} threads, torch {torch.__version__}\n{table}")
    if args.md:
        Path(args.md).write_text(table)


if __name__ == "__main__":
    main()
