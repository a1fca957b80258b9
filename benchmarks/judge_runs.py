"""Reference runs for notebook 09: RL with the trained judge as the only reward, with and without the rule
that an episode which never answers gets 0, repeated over seeds.

    python benchmarks/judge_runs.py                       # the notebook's runs (size "notebook"), 5 seeds
    python benchmarks/judge_runs.py --seeds 0 1           # some seeds; run again later for more
    python benchmarks/judge_runs.py --report              # only rewrite the results file
    COURSE_FAST=1 python benchmarks/judge_runs.py --size tiny --seeds 0   # smoke size (a minute or two)

Both arms start from the course's search_qa warm start, train on two-hop questions with outcome credit and
the frozen judge of notebook 09 (`ensure_judge_warm_start`, trained once and cached) scoring every group
with the question's reference answer, and are evaluated greedily by the verifier on the first held-out
two-hop questions; the verifier never reaches the gradient. `judge`: the judge's score is the reward.
`judge, 0 if unfinished`: the same, and an episode cut at the turn limit gets 0 whatever the judge said
(`RewardConfig.unfinished_reward`). A seed gives both arms the same tasks at every step. LoRA adapters of
rank 16 at lr 2e-4 and rollouts from a bf16 copy (benchmarks/README.md, lora_vs_full and sampler_dtype).

Each (arm, seed) is one run directory under runs/judge_runs/<size>/; a finished run (result.json) is
skipped and an interrupted one resumes from its checkpoint. Writes benchmarks/results/judge_runs.json
(judge_runs_<size>.json for other sizes): every finished run's held-out curve, per-question outcomes,
per-step training rows (judge reward, verifier success, turns, episodes cut at the limit, judge calls), the
machine, and the rule arm against the judge arm paired by seed and by (seed, question).
Notebook 09 plots this file as its reference runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from course_lib import Sizes, fast_mode, runs_dir
from course_lib.checkpoint import interruptible, read_metrics
from course_lib.judge.backends import LocalJudge
from course_lib.judge.warm_start import JUDGE_WARM_START, ensure_judge_warm_start
from course_lib.models import course_threads
from course_lib.train.config import TrainConfig
from course_lib.train.loop import train
from course_lib.warm_starts import course_warm_start

sys.path.insert(0, str(Path(__file__).resolve().parent))
import turn_reward_runs  # noqa: E402  (the step-0 evaluation, one place)
from credit_shootout import machine  # noqa: E402
from turn_reward_runs import comparisons  # noqa: E402  (the paired statistics, one place)

RESULTS = Path(__file__).resolve().parent / "results"
JUDGE = dict(source="judge", judge_method="group", judge_reference=True)
ARMS = {"judge": JUDGE, "judge, 0 if unfinished": {**JUDGE, "unfinished_reward": 0.0}}
BASELINE = "judge"
TRAIN_KEYS = ("reward", "success", "turns", "unfinished", "equal_reward_groups", "skipped_groups",
              "judge_calls", "judge_cache_hits", "judge_failed_groups", "seconds_rollout", "seconds_reward",
              "seconds_update")


@dataclass(frozen=True)
class Preset(Sizes):
    """One budget, the same for both arms."""

    steps: int  # RL steps per run
    tasks_per_step: int
    group_size: int
    max_new_tokens: int
    eval_tasks: int  # the first held-out two-hop questions
    eval_steps: tuple[int, ...]  # evaluations after these steps (step 0 is shared)
    seeds: tuple[int, ...]  # seeds run by default
    max_turns: int = 4
    lr: float = 2e-4
    lora_rank: int = 16
    sample_dtype: str = "bfloat16"


PRESETS = {
    "tiny": Preset(steps=1, tasks_per_step=1, group_size=2, max_new_tokens=16, eval_tasks=2, eval_steps=(1,),
                   seeds=(0,)),
    # notebook 09's learning-mode runs (cell "the judge as the reward"): the notebook trains seed 0
    "notebook": Preset(steps=8, tasks_per_step=4, group_size=4, max_new_tokens=40, eval_tasks=40,
                       eval_steps=(4, 8), seeds=(0, 1, 2, 3, 4)),
}


def size_dir(size: str) -> Path:
    return runs_dir() / "judge_runs" / size


def run_dir_of(size: str, arm: str, seed: int) -> Path:
    return size_dir(size) / arm.replace(", ", "_").replace(" ", "_") / f"seed{seed}"


def starting_points(size: str) -> tuple[Path, LocalJudge]:
    """The policy's warm start and the trained judge (each trained once, then cached)."""
    tiny = size == "tiny"
    if not tiny and fast_mode():
        raise SystemExit("this size starts from the learning-mode warm starts; unset COURSE_FAST")
    judge_path = ensure_judge_warm_start(envs=("search_qa",),
                                         sizes=JUDGE_WARM_START["fast" if tiny else "notebook"])
    return course_warm_start("search_qa"), LocalJudge(str(judge_path))


def config_of(size: str, arm: str, seed: int, warm: Path) -> TrainConfig:
    """The run of `arm` at `seed`: notebook 09 builds its own from this function."""
    p = PRESETS[size]
    return TrainConfig(env="search_qa", model=str(warm), run_dir=str(run_dir_of(size, arm, seed)),
                       credit="outcome", reward=dict(ARMS[arm]), task_filter={"hops": 2},
                       steps=p.steps, tasks_per_step=p.tasks_per_step, group_size=p.group_size,
                       rollout=dict(max_turns=p.max_turns, max_new_tokens=p.max_new_tokens,
                                    sample_dtype=p.sample_dtype),
                       optim=dict(lr=p.lr, lora_rank=p.lora_rank), eval_every=0, eval_tasks=p.eval_tasks,
                       checkpoint_every=0, seed=seed, progress=False)


def start_eval(size: str, warm: Path) -> dict:
    """Held-out success of the warm start (step 0 of every run), computed once per size."""
    return turn_reward_runs.start_eval(size, warm, size_dir(size), PRESETS[size])


def run_one(size: str, arm: str, seed: int, warm: Path, judge: LocalJudge) -> dict:
    """One run (skipped when its result.json exists), evaluated after each of the preset's eval steps."""
    config = config_of(size, arm, seed, warm)
    result_path = Path(config.run_dir) / "result.json"
    if result_path.exists():
        return json.loads(result_path.read_text())
    t0 = time.perf_counter()
    for stop in PRESETS[size].eval_steps:  # train() evaluates at the end of each call; the next one resumes
        if train(dataclasses.replace(config, steps=stop), judge=judge)["interrupted"]:
            raise KeyboardInterrupt  # its checkpoint is saved: the next invocation resumes this run
    rows = read_metrics(config.run_dir)
    evals = [r for r in rows if r["kind"] == "eval" and r["step"] > 0]
    result = {"arm": arm, "seed": seed, "curve": [(r["step"], r["success"]) for r in evals],
              "eval_turns": {str(r["step"]): r["mean_turns"] for r in evals},
              "outcomes": {str(r["step"]): r["outcomes"] for r in evals},
              "train": [{"step": r["step"], **{k: r.get(k) for k in TRAIN_KEYS}}
                        for r in rows if r["kind"] == "train"],
              "seconds": time.perf_counter() - t0, "threads": torch.get_num_threads()}
    result_path.write_text(json.dumps(result))
    shutil.rmtree(Path(config.run_dir) / "checkpoint", ignore_errors=True)
    return result


def report(size: str) -> Path:
    """Write the results file from every finished run of this size."""
    results = [json.loads(p.read_text()) for p in sorted(size_dir(size).glob("*/seed*/result.json"))]
    start = json.loads((size_dir(size) / "start_eval.json").read_text())
    for r in results:
        r["curve"] = [(0, start["success"])] + [tuple(p) for p in r["curve"]]
    out = {"size": size, "preset": {**asdict(PRESETS[size]), "seeds": sorted({r["seed"] for r in results})},
           "arms": [a for a in ARMS if any(r["arm"] == a for r in results)],
           "warm_start": start["warm_start"],
           "start_eval": {k: start[k] for k in ("success", "n", "outcomes", "mean_turns")},
           "machine": machine(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M"),
           "comparisons": comparisons(results, start, ARMS, BASELINE), "runs": results}
    path = RESULTS / f"judge_runs{'' if size == 'notebook' else '_' + size}.json"
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
    if not args.report:
        warm, judge = starting_points(args.size)
        start = start_eval(args.size, warm)
        print(f"warm start {warm.name}: held-out success {start['success']:.3f} "
              f"on {start['n']} two-hop questions")
        for seed in args.seeds or PRESETS[args.size].seeds:
            for arm in args.arms:
                r = run_one(args.size, arm, seed, warm, judge)
                print(f"{arm:>24} seed {seed}: curve {r['curve']} ({r['seconds']:.0f} s)", flush=True)
    path = report(args.size)
    print("\n".join(json.loads(path.read_text())["comparisons"]))
    print("wrote", path)


if __name__ == "__main__":
    main()
