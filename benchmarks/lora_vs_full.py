"""LoRA adapters against full fine-tuning on notebook 05's recipe, at equal steps and at equal wall time:
the time of an RL step, the checkpoint's size and held-out success, side by side over seeds.

    python benchmarks/lora_vs_full.py                  # 3 seeds x {full, lora}, about 50 min on 2 cores
    python benchmarks/lora_vs_full.py --report         # only the table, from the finished runs
    python benchmarks/lora_vs_full.py --seeds 0 --steps 2 --eval-tasks 4   # smoke size

The recipe is notebook 05's learning mode: search_qa two-hop questions from the course's search_qa warm
start, outcome credit, 4 tasks x 4 rollouts a step, 4 turns of at most 40 new tokens, the bf16 sampler for
both arms. Full fine-tuning trains every weight at lr 2e-5 (notebook 05's) for `--steps` steps. LoRA trains
rank-16 adapters on every projection (α 32) at 10x that rate, 2e-4 ("LoRA without regret", Thinking
Machines 2025, found LoRA's best rate about 10x full fine-tuning's across their settings). A seed gives both
arms the same training tasks and sampling seeds.

Equal wall time: the LoRA run first trains the same number of steps; then, if its steps took less time than
the full run's, it trains on (resuming its checkpoint) until its summed step time reaches the full run's,
and is evaluated there too. Step time is the sum of the metrics' per-step seconds (rollout, reward,
advantages, update): evaluation, checkpoints and model loading are left out of both arms.

Held-out greedy success on 40 two-hop test questions (always from fp32 weights). Each (arm, seed) is a run
directory under runs/lora_vs_full/; a finished one (result.json) is skipped, so the script can be stopped and
started again. The arms alternate (full seed 0, lora seed 0, full seed 1, ...), so a stopped run still has
paired seeds and the two arms' times come from the same stretch of the machine's time. Run it on idle cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import time
from pathlib import Path

import torch

from course_lib import batching, decode_attention, kv_cache, runs_dir
from course_lib.checkpoint import interruptible, read_metrics
from course_lib.models import course_threads
from course_lib.train.config import TrainConfig
from course_lib.train.loop import train
from course_lib.warm_starts import course_warm_start

# An arm: its OptimConfig and RolloutConfig fields over notebook 05's recipe, and the engine's switches
# (`engine`: kv_cache.PREALLOCATE, whether load_policy installs decode_attention, batching.SHARE_PREFIX;
# all on by default).
ARMS = {"full": {"optim": dict(lr=2e-5)},
        "lora": {"optim": dict(lr=2e-4, lora_rank=16, lora_alpha=32.0)}}
ROLLOUT = dict(max_turns=4, max_new_tokens=40, sample_dtype="bfloat16")  # both LoRA arms sample in bf16


def _config(arm: dict, seed: int, steps: int, args, run_dir: Path, checkpoint: Path) -> TrainConfig:
    return TrainConfig(env="search_qa", model=str(checkpoint), run_dir=str(run_dir), credit="outcome",
                       task_filter={"hops": 2}, steps=steps, tasks_per_step=4, group_size=4,
                       eval_every=args.steps // 2, eval_tasks=args.eval_tasks,
                       checkpoint_every=args.steps // 2, seed=seed, progress=False,
                       optim=arm.get("optim", {}), rollout={**ROLLOUT, **arm.get("rollout", {})})


@contextlib.contextmanager
def engine(preallocate: bool = True, decode_attention_on: bool = True, share_prefix: bool = True):
    """The engine's switches for one arm, put back afterwards: the preallocated cache, the grouped decode
    attention that `load_policy` installs (off: transformers' SDPA for decode steps too), and the update's
    shared start (`batching.SHARE_PREFIX`; off: every row runs whole)."""
    saved = kv_cache.PREALLOCATE, decode_attention.ENABLED, batching.SHARE_PREFIX
    kv_cache.PREALLOCATE, decode_attention.ENABLED, batching.SHARE_PREFIX = (preallocate, decode_attention_on,
                                                                             share_prefix)
    try:
        yield
    finally:
        kv_cache.PREALLOCATE, decode_attention.ENABLED, batching.SHARE_PREFIX = saved


def _step_seconds(row: dict) -> float:
    return sum(row.get(k, 0.0) for k in ("seconds_rollout", "seconds_reward", "seconds_advantage",
                                         "seconds_update"))


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def run_one(arm: str, seed: int, args, root: Path, checkpoint: Path, budget_s: float | None,
            arms: dict | None = None) -> dict:
    """Train one arm (a key of `arms`, default ARMS) for one seed, or read its finished result. `budget_s`:
    the paired first arm's summed step time, which this arm trains on to after its first `args.steps`
    steps."""
    spec = (arms or ARMS)[arm]
    run_dir = root / f"{arm}-seed{seed}"
    done = run_dir / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    with engine(**spec.get("engine", {})):
        out = train(_config(spec, seed, args.steps, args, run_dir, checkpoint))
    steps = [r for r in read_metrics(run_dir) if r["kind"] == "train"]
    result = {"arm": arm, "seed": seed, "steps": len(steps),
              "rollout_s": statistics.mean(r["seconds_rollout"] for r in steps),
              "update_s": statistics.mean(r.get("seconds_update", 0.0) for r in steps),  # 0: update skipped
              "step_s": statistics.mean(map(_step_seconds, steps)),
              "train_seconds": sum(map(_step_seconds, steps)),
              "checkpoint_mb": _folder_bytes(run_dir / "checkpoint") / 1e6,
              "final_success": out["eval"]["success"],
              "final_ci": [out["eval"]["ci_low"], out["eval"]["ci_high"]]}
    if budget_s is not None and result["train_seconds"] < budget_s:
        more = int((budget_s - result["train_seconds"]) / result["step_s"])  # whole steps within the budget
        if more > 0:
            with engine(**spec.get("engine", {})):
                out = train(_config(spec, seed, args.steps + more, args, run_dir, checkpoint))
            steps = [r for r in read_metrics(run_dir) if r["kind"] == "train"]
        result.update({"equal_time_steps": len(steps), "equal_time_seconds": sum(map(_step_seconds, steps)),
                       "equal_time_success": out["eval"]["success"]})
    result["eval"] = {r["step"]: [r["success"], r["ci_low"], r["ci_high"], r["n"]]
                      for r in read_metrics(run_dir) if r["kind"] == "eval"}
    done.write_text(json.dumps(result, indent=1))
    shutil.rmtree(run_dir / "checkpoint", ignore_errors=True)
    return result


def report(results: list[dict], arms: dict | None = None) -> str:
    """Per arm: step time, checkpoint size, held-out success per seed at equal steps and at equal time; then
    the second arm against the first, paired by seed."""
    arms = arms or ARMS
    first, second = list(arms)[:2]
    lines = ["| arm | seeds | rollout s / step | update s / step | step s | checkpoint MB | held-out success "
             "after the same steps, per seed | mean | at the first arm's wall time (steps), per seed "
             "| mean |",
             "|---|---:|---:|---:|---:|---:|---|---:|---|---:|"]
    by = {a: sorted((r for r in results if r["arm"] == a), key=lambda r: r["seed"]) for a in arms}
    for arm, rs in by.items():
        if not rs:
            continue

        def at_time(r: dict) -> float:
            return r.get("equal_time_success", r["final_success"])

        per_seed = ", ".join(f"{r['final_success']:.3f}" for r in rs)
        timed = ", ".join(f"{at_time(r):.3f} ({r.get('equal_time_steps', r['steps'])})" for r in rs)
        lines.append(f"| {arm} | {len(rs)} | {statistics.mean(r['rollout_s'] for r in rs):.1f} | "
                     f"{statistics.mean(r['update_s'] for r in rs):.1f} | "
                     f"{statistics.mean(r['step_s'] for r in rs):.1f} | "
                     f"{statistics.mean(r['checkpoint_mb'] for r in rs):,.0f} | {per_seed} | "
                     f"{statistics.mean(r['final_success'] for r in rs):.3f} | {timed} | "
                     f"{statistics.mean(map(at_time, rs)):.3f} |")
    paired = [(a, b) for a in by[first] for b in by[second] if a["seed"] == b["seed"]]
    if paired:
        def mean(xs) -> float:
            return statistics.mean(list(xs))

        steps = ", ".join(f"{b['final_success'] - a['final_success']:+.3f}" for a, b in paired)
        timed = ", ".join(f"{b.get('equal_time_success', b['final_success']) - a['final_success']:+.3f}"
                          for a, b in paired)
        lines += ["", f"{second} / {first}, paired by seed ({len(paired)}): step time "
                      f"{mean(b['step_s'] / a['step_s'] for a, b in paired):.2f}x, update time "
                      f"{mean(b['update_s'] / a['update_s'] for a, b in paired):.2f}x, rollout time "
                      f"{mean(b['rollout_s'] / a['rollout_s'] for a, b in paired):.2f}x; held-out success "
                      f"{second} - {first} at equal steps {steps}, at equal wall time {timed}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, arms: dict | None = None, name: str = "lora_vs_full",
         doc: str = __doc__) -> None:
    """Run (or report) two arms over seeds, alternating: the first arm, then the second for the same seed,
    which trains on to the first's wall time when its steps were faster. engine_then_now.py calls this with
    its own arms."""
    arms = arms or ARMS
    first, second = list(arms)
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--eval-tasks", type=int, default=40)
    ap.add_argument("--report", action="store_true", help="only print the table from the finished runs")
    ap.add_argument("--md", help="also write the table to this file")
    args = ap.parse_args(argv)
    torch.set_num_threads(course_threads())
    interruptible()  # started with & from a script, SIGINT would be ignored: Ctrl+C keeps the checkpoint
    root = runs_dir() / name / f"steps{args.steps}-eval{args.eval_tasks}"
    results = []
    if args.report:
        results = [json.loads(p.read_text()) for p in sorted(root.glob("*/result.json"))]
    else:
        checkpoint = course_warm_start("search_qa")
        for seed in args.seeds:
            t0 = time.perf_counter()
            a = run_one(first, seed, args, root, checkpoint, None, arms)
            b = run_one(second, seed, args, root, checkpoint, a["train_seconds"], arms)
            results += [a, b]
            for r in (a, b):
                print(f"{r['arm']}, seed {seed}: rollout {r['rollout_s']:.1f} s + update "
                      f"{r['update_s']:.1f} s per step; held-out success {r['final_success']:.3f} after "
                      f"{r['steps']} steps"
                      + (f", {r['equal_time_success']:.3f} after {r['equal_time_steps']} (equal time)"
                         if "equal_time_success" in r else ""), flush=True)
            print(f"  seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    table = report(results, arms)
    print(f"\n{torch.get_num_threads()} threads, torch {torch.__version__}\n{table}")
    if args.md:
        Path(args.md).write_text(table)


if __name__ == "__main__":
    main()
