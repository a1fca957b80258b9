"""The credit-assignment shoot-out: outcome vs GiGPO vs turn-level vs critic, on one budget.

    python benchmarks/credit_shootout.py --size cpu            # 2 CPU cores: a few hours
    python benchmarks/credit_shootout.py --size gpu            # one GPU
    python benchmarks/credit_shootout.py --size tiny --seeds 0 # smoke size (the test uses it)

For each environment, every credit method starts from the same warm-start checkpoint and gets the
same rollouts per step, steps, and hyperparameters; each (environment, method, seed) is one run
directory under runs/shootout/<size>/. A run whose result.json exists is skipped, so the script can
be stopped and started again, or run in pieces (--envs, --methods, --seeds).

Writes benchmarks/results/credit_shootout[_<size>].md (the table, step-group statistics and the
machine) and a PNG of held-out success vs step, one panel per environment, with shaded intervals.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from course_lib import Sizes, runs_dir, wilson_interval
from course_lib.checkpoint import read_metrics
from course_lib.credit import CREDIT_METHODS, step_group_sizes
from course_lib.envs import load_tasks
from course_lib.evaluate import evaluate
from course_lib.models import course_threads, load_policy
from course_lib.notebook import WarmStartSizes
from course_lib.rollout import rollout
from course_lib.sft import ensure_warm_start
from course_lib.tasks import filter_tasks
from course_lib.train import TrainConfig, train

METHODS = tuple(CREDIT_METHODS)  # every registered credit method
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Preset(Sizes):
    """One budget, identical for every method."""

    steps: int  # RL steps per run
    tasks_per_step: int  # tasks per step
    group_size: int  # rollouts per task
    max_new_tokens: int  # tokens per model turn
    eval_tasks: int  # held-out tasks per evaluation
    eval_every: int  # evaluation period in steps (0: at the end only; step 0 is the shared start_eval)
    warm: WarmStartSizes  # the warm start (shared by all methods)
    lr: float = 2e-5
    max_turns: int | None = None  # None: the environment's turn limit below; the tiny preset shortens it


PRESETS = {
    "tiny": Preset(steps=1, tasks_per_step=1, group_size=2, max_new_tokens=16, eval_tasks=2, eval_every=1,
                   warm=WarmStartSizes(n_demos=2, steps=1, batch_size=2), max_turns=2),
    # cpu: sized so that 2 environments x 4 methods x 3 seeds run in about an hour and a half on one core of a
    # 2-core machine (measured there: ~200 trained tokens/s and ~10 s per greedy gridworld episode per core).
    # A short budget: its table says what 32 rollouts of RL per run can and cannot show, not what the
    # methods reach. The warm start is three times the notebooks' fast one, so that groups have mixed rewards.
    "cpu": Preset(steps=4, tasks_per_step=2, group_size=4, max_new_tokens=32, eval_tasks=16, eval_every=0,
                  warm=WarmStartSizes(n_demos=96, steps=24, batch_size=4, lr=1e-4), lr=4e-5),
    "gpu": Preset(steps=60, tasks_per_step=16, group_size=8, max_new_tokens=64, eval_tasks=200, eval_every=10,
                  warm=WarmStartSizes(n_demos=512, steps=96, batch_size=16)),
}
# Per environment: turn limit, and the task filter that leaves RL room above the warm start.
ENV_OPTIONS = {
    "gridworld": {"max_turns": 6, "warm_filter": {"size": 4}, "rl_filter": {"size": 4}},
    "search_qa": {"max_turns": 4, "warm_filter": {"hops": 1}, "rl_filter": None},  # RL: one- and two-hop
}


def pooled_ci(rates: list[float], n_tasks: int) -> tuple[float, float, float]:
    """Mean success over seeds and a 95% Wilson interval over all their episodes pooled.

    Each seed's rate is k_s / n_tasks (greedy, one episode per test task), so the pool is sum(k_s) successes in
    seeds x n_tasks episodes. Unlike a t-interval over 3 seeds it stays inside [0, 1], is not zero-wide when
    the seeds agree, and counts the test tasks' sampling error; it is approximate, because every seed is
    evaluated on the same tasks (their episodes are not independent).
    """
    wins = sum(round(r * n_tasks) for r in rates)
    low, high = wilson_interval(wins, len(rates) * n_tasks)
    return float(np.mean(rates)), low, high


def env_dir(size: str, env: str) -> Path:
    """runs/shootout/<size>/<env>: the cached per-environment results and every run of that environment."""
    return runs_dir() / "shootout" / size / env


def run_dir_of(size: str, env: str, method: str, seed: int) -> Path:
    return env_dir(size, env) / method / f"seed{seed}"


def cached_json(path: Path, compute) -> dict:
    """json.load(path) when it exists; else compute(), written to path (so reruns and other workers reuse it)."""
    if path.exists():
        return json.loads(path.read_text())
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return result


def start_eval(size: str, env: str, warm_path: Path) -> dict:
    """Held-out success of the warm start, i.e. step 0 of every run of this environment: greedy decoding
    from one checkpoint gives the same result for every method and seed, so it is computed once."""
    preset, opts = PRESETS[size], ENV_OPTIONS[env]

    def compute() -> dict:
        t0 = time.perf_counter()
        result = evaluate(str(warm_path), env, n_tasks=preset.eval_tasks, task_filter=opts["rl_filter"],
                          max_turns=preset.max_turns or opts["max_turns"], max_new_tokens=preset.max_new_tokens)
        return {**result, "seconds": time.perf_counter() - t0}

    return cached_json(env_dir(size, env) / "start_eval.json", compute)


def claim(run_dir: Path) -> bool:
    """Take a run for this process (several workers can share the job list): False when another live
    process holds it. A claim left by a dead process is taken over."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "claimed_by"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(path.read_text() or 0)
                os.kill(pid, 0)  # raises when no such process
                return pid == os.getpid()
            except (ValueError, ProcessLookupError):
                path.unlink(missing_ok=True)  # stale: its process is gone
                continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True
    return False


def run_one(size: str, env: str, method: str, seed: int, warm_path: Path, start: dict) -> dict | None:
    """One training run (skipped when its result.json exists); returns its result, or None when
    another worker is running it."""
    preset, opts = PRESETS[size], ENV_OPTIONS[env]
    run_dir = run_dir_of(size, env, method, seed)
    result_path = run_dir / "result.json"
    if result_path.exists():
        return json.loads(result_path.read_text())
    if not claim(run_dir):
        return None
    config = TrainConfig(env=env, model=str(warm_path), run_dir=str(run_dir), credit=method, steps=preset.steps,
                         tasks_per_step=preset.tasks_per_step, group_size=preset.group_size,
                         max_turns=preset.max_turns or opts["max_turns"], max_new_tokens=preset.max_new_tokens, lr=preset.lr,
                         eval_every=preset.eval_every, eval_tasks=preset.eval_tasks,
                         checkpoint_every=preset.eval_every or 2, seed=seed, task_filter=opts["rl_filter"],
                         progress=False)
    t0 = time.perf_counter()
    train(config)
    rows = read_metrics(run_dir)
    evals = [r for r in rows if r["kind"] == "eval"]
    train_rows = [r for r in rows if r["kind"] == "train"]
    sizes: Counter = Counter()
    for r in train_rows:
        sizes.update({int(k): v for k, v in (r.get("step_group_sizes") or {}).items()})
    result = {"env": env, "method": method, "seed": seed, "size": size,
              "curve": [(0, start["success"])] + [(r["step"], r["success"]) for r in evals if r["step"] > 0],
              "final": evals[-1]["success"],
              "seconds": time.perf_counter() - t0, "train_tokens": sum(r.get("train_tokens", 0) for r in train_rows),
              "step_group_sizes": dict(sizes)}
    result_path.write_text(json.dumps(result))
    shutil.rmtree(run_dir / "checkpoint", ignore_errors=True)  # ~0.5-1.5 GB each; the result and metrics stay
    return result


def step_group_stats(env: str, warm_path: Path, preset: Preset, size: str, seed: int = 0) -> dict:
    """GiGPO's step groups on rollouts of the warm-start model on the RL tasks (the runs' task filter):
    how often states recur. Cached per environment."""

    def compute() -> dict:
        model, tokenizer = load_policy(str(warm_path))
        tasks = filter_tasks(load_tasks(env, "train"), ENV_OPTIONS[env]["rl_filter"])[: preset.tasks_per_step]
        groups = rollout(model, tokenizer, env, tasks, group_size=preset.group_size,
                         max_turns=preset.max_turns or ENV_OPTIONS[env]["max_turns"],
                         max_new_tokens=preset.max_new_tokens, temperature=1.0, seed=seed, progress=False)
        anchors = [s.anchor for g in groups for t in g for s in t.steps]
        group_ids = [t.group_id for g in groups for t in g for _ in t.steps]
        sizes = step_group_sizes(anchors, group_ids)
        return {"rows": len(anchors), "fraction_in_groups_ge2": sum(s for s in sizes if s >= 2) / max(1, len(anchors)),
                "histogram": {str(k): v for k, v in sorted(Counter(sizes).items())}}

    return cached_json(env_dir(size, env) / "group_stats.json", compute)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores, {gpu}, torch {torch.__version__}"


def train_rows(size: str, result: dict) -> list[dict]:
    """The training-step metrics of one finished run."""
    run_dir = run_dir_of(size, result["env"], result["method"], result["seed"])
    return [r for r in read_metrics(run_dir) if r["kind"] == "train"]


def write_report(size: str, results: list[dict], group_stats: dict, out_md: Path, out_png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.viz import method_color

    envs = sorted({r["env"] for r in results})
    methods = [m for m in METHODS if any(r["method"] == m for r in results)]
    preset = PRESETS[size]
    lines = [f"# Credit-assignment shoot-out ({size} preset)", "",
             f"Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}.",
             f"Budget per run: {preset.steps} RL steps x {preset.tasks_per_step} tasks x group {preset.group_size}, "
             f"{preset.max_new_tokens} tokens per turn; held-out success on {preset.eval_tasks} test tasks "
             "(greedy). Every run starts from the same warm start of its environment.", "",
             "Final held-out success: mean over seeds (seeds in brackets, each seed's success after them) with a "
             "95% Wilson interval over all seeds' episodes pooled (seeds x test tasks; approximate, since every "
             "seed is evaluated on the same tasks); wall time and training tokens are means per run.", "",
             "Equal-reward groups: the share of sampled groups whose rollouts all got the same reward (outcome "
             "and turn credit skip them; GiGPO keeps those whose step advantages are not all zero; the critic "
             "trains on all); updates: optimizer steps taken out of the steps run, summed over seeds.", "",
             "| environment | method | success | 95% interval | seeds: success of each | equal-reward groups | updates | "
             "wall time (s) | train tokens |",
             "|---|---|---|---|---|---|---|---|---|"]
    for env in envs:
        start_path = env_dir(size, env) / "start_eval.json"
        if start_path.exists():
            st = json.loads(start_path.read_text())
            lines.append(f"| {env} | *warm start (step 0)* | {st['success']:.3f} | [{st['ci_low']:.3f}, {st['ci_high']:.3f}] "
                         f"(Wilson, {st['n']} tasks) | - | - | - | - | - |")
        for m in methods:
            rs = [r for r in results if r["env"] == env and r["method"] == m]
            if not rs:
                continue
            mean, lo, hi = pooled_ci([r["final"] for r in rs], preset.eval_tasks)
            rows = [row for r in rs for row in train_rows(size, r)]
            no_signal = sum(row.get("equal_reward_groups", 0) for row in rows) / max(1, len(rows) * preset.tasks_per_step)
            updates = sum(not row.get("skipped_update") for row in rows)
            per_seed = ", ".join(f"{r['final']:.3f}" for r in rs)
            lines.append(f"| {env} | {m} | {mean:.3f} | [{lo:.3f}, {hi:.3f}] | {len(rs)} "
                         f"({', '.join(str(r['seed']) for r in rs)}): {per_seed} | {no_signal:.2f} | {updates}/{len(rows)} | "
                         f"{np.mean([r['seconds'] for r in rs]):.0f} | {np.mean([r['train_tokens'] for r in rs]):.0f} |")
    lines += ["", "## GiGPO step groups", "",
              "Rollouts of the warm-start model (one step's batch): how many step rows share their anchor state "
              "with another row of the same group. GiGPO's step-level advantage is zero for singleton groups.", "",
              "| environment | step rows | fraction in groups of size >= 2 | group-size histogram (size: count) |",
              "|---|---|---|---|"]
    for env in envs:  # cached by every invocation that ran this environment
        path = env_dir(size, env) / "group_stats.json"
        if env not in group_stats and path.exists():
            group_stats[env] = json.loads(path.read_text())
    for env, s in sorted(group_stats.items()):
        lines.append(f"| {env} | {s['rows']} | {s['fraction_in_groups_ge2']:.2f} | "
                     f"{', '.join(f'{k}: {v}' for k, v in s['histogram'].items())} |")
    out_md.write_text("\n".join(lines) + "\n")

    fig, axes = plt.subplots(1, len(envs), figsize=(5.5 * len(envs), 4), dpi=90, squeeze=False)
    for ax, env in zip(axes[0], envs):
        for m in methods:
            rs = [r for r in results if r["env"] == env and r["method"] == m]
            if not rs:
                continue
            steps = [s for s, _ in rs[0]["curve"]]
            by_step = np.array([[v for _, v in r["curve"]] for r in rs if len(r["curve"]) == len(steps)])
            cis = [pooled_ci(list(col), preset.eval_tasks) for col in by_step.T]
            ax.plot(steps, [c[0] for c in cis], marker="o", label=m, color=method_color(m))
            ax.fill_between(steps, [c[1] for c in cis], [c[2] for c in cis], alpha=0.2, color=method_color(m))
        ax.set_title(f"{env}: held-out success ({size} preset)")
        ax.set_xlabel("RL step")
        ax.set_ylabel("held-out success rate")
        ax.set_ylim(0, 1)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out_png)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--envs", nargs="+", default=list(ENV_OPTIONS), choices=list(ENV_OPTIONS))
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    # COURSE_THREADS=1 for workers side by side: two 2-thread workers on 2 cores ran one step 4-10x slower
    # (measured: rollout 244 s vs 67 s, update 181 s vs 19 s).
    torch.set_num_threads(course_threads())
    preset = PRESETS[args.size]
    results, group_stats = [], {}
    for env in args.envs:
        warm = ensure_warm_start(env, task_filter=ENV_OPTIONS[env]["warm_filter"], progress=False, **preset.warm.options())
        group_stats[env] = step_group_stats(env, warm, preset, args.size)
        start = start_eval(args.size, env, warm)
        print(f"{env:<10} warm start: held-out success {start['success']:.3f} on {start['n']} tasks", flush=True)
        for method in args.methods:
            for seed in args.seeds:
                r = run_one(args.size, env, method, seed, warm, start)
                if r is None:
                    print(f"{env:<10} {method:<8} seed {seed}: another worker is running it", flush=True)
                    continue
                print(f"{env:<10} {method:<8} seed {seed}: final success {r['final']:.3f} ({r['seconds']:.0f} s)",
                      flush=True)
                results.append(r)
    # The report covers every finished run of this size, including ones from earlier invocations.
    done = sorted(runs_dir().glob(f"shootout/{args.size}/*/*/seed*/result.json"))
    all_results = [json.loads(p.read_text()) for p in done]
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "" if args.size == "cpu" else f"_{args.size}"
    out_md, out_png = args.out / f"credit_shootout{suffix}.md", args.out / f"credit_shootout{suffix}.png"
    write_report(args.size, all_results, group_stats, out_md, out_png)
    print(out_md.read_text())
    return {"results": all_results, "group_stats": group_stats, "markdown": out_md, "plot": out_png,
            "preset": asdict(preset)}


if __name__ == "__main__":
    main()
