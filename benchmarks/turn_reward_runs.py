"""Reference runs for notebook 07: outcome credit vs turn-level credit with an aligned and a misaligned turn
reward, where success is rare, repeated over seeds.

    python benchmarks/turn_reward_runs.py                       # the notebook's runs (size "notebook"),
                                                                # 5 seeds
    python benchmarks/turn_reward_runs.py --size long           # twice the steps, evaluated every 4
    python benchmarks/turn_reward_runs.py --seeds 0 1           # some seeds; run again later for more
    python benchmarks/turn_reward_runs.py --report              # only rewrite the results file
    COURSE_FAST=1 python benchmarks/turn_reward_runs.py --size tiny --seeds 0   # smoke size (seconds per run)

The first three arms are the runs of notebook 07: `outcome`; `turn_dense, evidence (aligned)` (credit
"turn_dense", `course_lib.rewards.evidence_turn_rewards`); `turn_dense, echo (misaligned)`
(`question_echo_turn_rewards`); a fourth, `turn_dense, answer evidence (aligned)`
(`answer_evidence_turn_rewards`), is the candidate to replace the first aligned one. They start from the
notebook's sparse warm start (28 one-hop + 4 two-hop demonstrations, the small recipe of
`WARM_START["fast"]`), train on two-hop search_qa and are evaluated greedily on the first held-out two-hop
questions. A seed gives every arm the same tasks at every step. The warm start's evaluation (step 0) is
computed once per size.

Each (arm, seed) is one run directory under runs/turn_rewards/<size>/; a run whose result.json exists is
skipped, and an interrupted one resumes from its checkpoint, so the script can be stopped and started again.
Writes benchmarks/results/turn_reward_runs[_<size>].json (no weights): every finished run's held-out curve,
per-question outcomes and per-step training statistics, the machine, and the comparisons of each turn arm
with outcome at every evaluation step: paired over seeds (t-test, with the smallest difference the seeds
could detect) and over (seed, question) pairs (exact McNemar; optimistic, as the questions repeat across
seeds).
Notebook 07 plots this file as its reference runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from scipy.stats import binomtest

from course_lib import Sizes, fast_mode, runs_dir
from course_lib.checkpoint import interruptible, read_metrics
from course_lib.evaluate import evaluate
from course_lib.models import course_threads
from course_lib.rewards import (
    answer_evidence_turn_rewards,
    evidence_turn_rewards,
    question_echo_turn_rewards,
)
from course_lib.sft import ensure_warm_start
from course_lib.train.config import RolloutConfig, TrainConfig
from course_lib.train.loop import train
from course_lib.warm_starts import WARM_START, mixed_hop_tasks, search_qa_warm_start_options

sys.path.insert(0, str(Path(__file__).resolve().parent))
from credit_shootout import machine, paired_comparison  # noqa: E402  (the shoot-out's statistics, one place)

RESULTS = Path(__file__).resolve().parent / "results"
ARMS: dict[str, tuple[str, Callable | None]] = {  # name -> (credit method, turn reward)
    "outcome": ("outcome", None),
    "turn_dense, evidence (aligned)": ("turn_dense", evidence_turn_rewards),
    "turn_dense, echo (misaligned)": ("turn_dense", question_echo_turn_rewards),
    "turn_dense, answer evidence (aligned)": ("turn_dense", answer_evidence_turn_rewards),
}
BASELINE = "outcome"


@dataclass(frozen=True)
class Preset(Sizes):
    """One budget, the same for every arm."""

    steps: int  # RL steps per run
    tasks_per_step: int
    group_size: int
    max_new_tokens: int
    eval_tasks: int  # the first held-out two-hop questions
    eval_steps: tuple[int, ...]  # evaluations after these steps (step 0 is shared)
    seeds: tuple[int, ...]  # seeds run by default
    sparse: bool = True  # the sparse warm start (else the small one-hop one of fast mode)
    lr: float = 2e-5
    turn_weight: float = 0.5
    max_turns: int = 4


PRESETS = {
    "tiny": Preset(steps=1, tasks_per_step=1, group_size=2, max_new_tokens=16, eval_tasks=2, eval_steps=(1,),
                   seeds=(0,), sparse=False),
    # the notebook's learning-mode runs (notebook 07, cell "three training runs")
    "notebook": Preset(steps=6, tasks_per_step=4, group_size=4, max_new_tokens=40, eval_tasks=40,
                       eval_steps=(3, 6), seeds=(0, 1, 2, 3, 4)),
    "long": Preset(steps=16, tasks_per_step=4, group_size=4, max_new_tokens=40, eval_tasks=40,
                   eval_steps=(4, 8, 12, 16), seeds=(0, 1, 2, 3, 4)),
}
SPARSE_WARM_START = {**WARM_START["fast"].options(), "seed": 0, "tasks": mixed_hop_tasks(28, 4, seed=0)}


def size_dir(size: str) -> Path:
    return runs_dir() / "turn_rewards" / size


def run_dir_of(size: str, arm: str, seed: int) -> Path:
    return size_dir(size) / arm.split(" (")[0].replace(", ", "_").replace(" ", "_") / f"seed{seed}"


def warm_start_of(preset: Preset) -> Path:
    """Notebook 07's sparse warm start (trained once, cached), or the small one-hop one for the smoke size."""
    if preset.sparse and fast_mode():
        raise SystemExit("this size starts from the learning-mode sparse warm start; unset COURSE_FAST")
    options = SPARSE_WARM_START if preset.sparse else search_qa_warm_start_options(fast=True)
    return ensure_warm_start("search_qa", **options, progress=False)


def config_of(size: str, arm: str, seed: int, warm: Path) -> TrainConfig:
    preset = PRESETS[size]
    return TrainConfig(env="search_qa", model=str(warm), run_dir=str(run_dir_of(size, arm, seed)),
                       credit=ARMS[arm][0],
                       steps=preset.steps, tasks_per_step=preset.tasks_per_step, group_size=preset.group_size,
                       rollout=dict(max_turns=preset.max_turns, max_new_tokens=preset.max_new_tokens),
                       task_filter={"hops": 2}, optim=dict(lr=preset.lr),
                       credit_options={"turn_weight": preset.turn_weight}, eval_every=0,
                       eval_tasks=preset.eval_tasks, checkpoint_every=0, seed=seed, progress=False)


def start_eval(size: str, warm: Path, folder: Path | None = None, preset=None) -> dict:
    """Held-out success of the warm start (step 0 of every run), computed once per size and kept in
    `folder`/start_eval.json (default: this size's folder; judge_runs.py passes its own folder and preset)."""
    folder = size_dir(size) if folder is None else folder
    preset = PRESETS[size] if preset is None else preset
    path = folder / "start_eval.json"
    if path.exists():
        start = json.loads(path.read_text())
        if start["warm_start"] != warm.name:
            raise SystemExit(f"{folder} holds runs from warm start {start['warm_start']}, "
                             f"not {warm.name}: move that folder away to start afresh")
        return start
    result = evaluate(str(warm), "search_qa", n_tasks=preset.eval_tasks, task_filter={"hops": 2},
                      max_turns=preset.max_turns, max_new_tokens=preset.max_new_tokens,
                      max_context=RolloutConfig.max_context)
    start = {**result, "warm_start": warm.name}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(start))
    return start


def run_one(size: str, arm: str, seed: int, warm: Path) -> dict:
    """One run (skipped when its result.json exists), evaluated after each of the preset's eval steps."""
    config = config_of(size, arm, seed, warm)
    result_path = Path(config.run_dir) / "result.json"
    if result_path.exists():
        return json.loads(result_path.read_text())
    t0 = time.perf_counter()
    for stop in PRESETS[size].eval_steps:  # train() evaluates at the end of each call; the next one resumes
        if train(dataclasses.replace(config, steps=stop), turn_reward_fn=ARMS[arm][1])["interrupted"]:
            raise KeyboardInterrupt  # its checkpoint is saved: the next invocation resumes this run
    rows = read_metrics(config.run_dir)
    evals = [r for r in rows if r["kind"] == "eval"]
    keys = ("success", "turns", "equal_reward_groups", "skipped_groups", "skipped_update")
    result = {"arm": arm, "seed": seed, "curve": [(r["step"], r["success"]) for r in evals],
              "outcomes": {str(r["step"]): r["outcomes"] for r in evals},
              "train": [{"step": r["step"], **{k: r.get(k) for k in keys}}
                        for r in rows if r["kind"] == "train"],
              "seconds": time.perf_counter() - t0, "threads": torch.get_num_threads()}
    result_path.write_text(json.dumps(result))
    shutil.rmtree(Path(config.run_dir) / "checkpoint", ignore_errors=True)  # ~1.6 GB with the optimizer state
    return result


def finished(size: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(size_dir(size).glob("*/seed*/result.json"))]


def mcnemar(a: list[int], b: list[int]) -> tuple[int, int, float]:
    """(pairs only a right, pairs only b right, exact two-sided p)."""
    only_a = sum(x and not y for x, y in zip(a, b))
    only_b = sum(y and not x for x, y in zip(a, b))
    return only_a, only_b, binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0


def comparisons(results: list[dict], start: dict, arms=ARMS, baseline: str = BASELINE) -> list[str]:
    """Each arm against the baseline arm at every evaluation step, paired by seed and by (seed, question).
    judge_runs.py calls it with its own arms."""
    by = {(r["arm"], r["seed"]): r for r in results}
    lines = []
    for arm in arms:
        if arm == baseline:
            continue
        seeds = sorted(s for a, s in by if a == arm and (baseline, s) in by)
        if not seeds:
            continue
        for step in by[(arm, seeds[0])]["outcomes"]:
            mine = [sum(by[(arm, s)]["outcomes"][step]) / len(start["outcomes"]) for s in seeds]
            base = [sum(by[(baseline, s)]["outcomes"][step]) / len(start["outcomes"]) for s in seeds]
            pooled = mcnemar(sum((by[(arm, s)]["outcomes"][step] for s in seeds), []),
                             sum((by[(baseline, s)]["outcomes"][step] for s in seeds), []))
            line = (f"{arm} vs {baseline}, step {step}, {len(seeds)} seed(s): mean success "
                    f"{sum(mine) / len(mine):.3f} vs {sum(base) / len(base):.3f}")
            if len(seeds) >= 2:
                c = paired_comparison(mine, base)
                line += (f"; paired by seed: difference {c['mean_diff']:+.3f} "
                         f"[{c['low']:+.3f}, {c['high']:+.3f}], "
                         f"p {c['p']:.2g}, smallest detectable {c['mde']:.3f}")
            line += (f"; per (seed, question): {pooled[0]} only {arm} right, {pooled[1]} only {baseline}, "
                     f"p {pooled[2]:.2g}")
            lines.append(line)
    return lines


def report(size: str) -> Path:
    """Write the results file from every finished run of this size."""
    results = finished(size)
    start = json.loads((size_dir(size) / "start_eval.json").read_text())
    for r in results:
        r["curve"] = [(0, start["success"])] + [tuple(p) for p in r["curve"]]
    # the seeds this file holds runs of (`--seeds` may have run others than the preset's default ones)
    out = {"size": size, "preset": {**asdict(PRESETS[size]), "seeds": sorted({r["seed"] for r in results})},
           "arms": [a for a in ARMS if any(r["arm"] == a for r in results)],
           "warm_start": start["warm_start"],
           "start_eval": {k: start[k] for k in ("success", "n", "outcomes")},
           "machine": machine(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M"),
           "comparisons": comparisons(results, start), "runs": results}
    path = RESULTS / f"turn_reward_runs{'' if size == 'notebook' else '_' + size}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=PRESETS, default="notebook")
    parser.add_argument("--seeds", type=int, nargs="+", help="default: the preset's")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--report", action="store_true",
                        help="only rewrite the results file from finished runs")
    args = parser.parse_args()
    torch.set_num_threads(course_threads())
    interruptible()  # started with & from a script, SIGINT would be ignored: Ctrl+C keeps the checkpoint
    preset = PRESETS[args.size]
    if not args.report:
        warm = warm_start_of(preset)
        start = start_eval(args.size, warm)
        print(f"warm start {warm.name}: held-out success {start['success']:.3f} on {start['n']} "
              f"two-hop questions")
        for seed in args.seeds or preset.seeds:
            for arm in args.arms:
                r = run_one(args.size, arm, seed, warm)
                print(f"{arm:>30} seed {seed}: curve {r['curve']}")
    path = report(args.size)
    print("\n".join(json.loads(path.read_text())["comparisons"]))
    print("wrote", path)


if __name__ == "__main__":
    main()
