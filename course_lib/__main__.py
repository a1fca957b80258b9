"""Command line: `python -m course_lib {train,eval,sft,demo} ...`.

    python -m course_lib train --env search_qa --credit gigpo --steps 40 --run-dir runs/x
    python -m course_lib eval --model runs/x/checkpoint/model --env search_qa --n-tasks 40
    python -m course_lib sft --env search_qa --steps 32 --run-dir runs/sft
    python -m course_lib demo            # warm start + RL on the embedded model (COURSE_FAST=1: tiny)

Every `TrainConfig` field is a `train` option (`--tasks-per-step 4`, `--task-filter '{"hops": 2}'`), and so
is every field of its parts under its own name (`--max-turns 2`, `--lr 1e-5`), except the reward source
(`--reward judge`) and the critic's (`--critic-lr 1e-4`); the options of `eval` and `sft` are the arguments
of `evaluate` and `warm_start`, with their defaults.
A judge backend is a Python object: pass it to `train(config, judge=...)` from Python.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import sys
import time
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from course_lib import Sizes, fast_mode, runs_dir
from course_lib.checkpoint import interruptible, read_metrics
from course_lib.envs import load_tasks
from course_lib.evaluate import evaluate
from course_lib.models import course_threads, load_policy
from course_lib.rollout import rollout
from course_lib.sft import ensure_warm_start, warm_start
from course_lib.tasks import filter_tasks
from course_lib.train.config import PARTS, TrainConfig, check
from course_lib.train.loop import config_tasks, train
from course_lib.viz import mask_text
from course_lib.warm_starts import mixed_hop_tasks


def _parse_value(text: str) -> Any:
    """A command-line value: JSON when it parses (numbers, null, dicts, true/false), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _config_options() -> list[tuple[str, str | None, dataclasses.Field]]:
    """(option name, part or None, field) of every TrainConfig field and every field of its parts."""
    top = [(f.name, None, f) for f in dataclasses.fields(TrainConfig) if f.name not in PARTS]
    prefix = {"critic": "critic_"}  # the critic's lr, coef...: --critic-lr beside the policy's --lr
    parts = [("reward" if (part, f.name) == ("reward", "source") else prefix.get(part, "") + f.name, part, f)
             for part, cls in PARTS.items() for f in dataclasses.fields(cls)]
    return top + parts


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    for name, _, f in _config_options():
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=_parse_value, default=None,
                            help=f"default: {default!r}")


# Arguments of `evaluate` and `warm_start` that the command line sets: the others are Python objects (a
# tokenizer, a task list) or fixed here (progress bars on). Only the arguments without a default get one.
_FROM_SIGNATURE = {
    "eval": (evaluate, {"model_or_path": "model"}, {"model_or_path": "smollm2-135m", "env": "search_qa"},
             {"split": ("train", "test")}, {"tokenizer", "tasks", "progress"}),
    "sft": (warm_start, {}, {}, {"mask": ("assistant", "none")}, {"tasks", "progress"}),
}


def _add_signature_options(parser: argparse.ArgumentParser, command: str) -> None:
    """One option per argument of the command's function, its default taken from the function's signature."""
    fn, renamed, fallback, choices, skipped = _FROM_SIGNATURE[command]
    for name, param in inspect.signature(fn).parameters.items():
        if name in skipped:
            continue
        default = fallback[name] if param.default is inspect.Parameter.empty else param.default
        parser.add_argument("--" + renamed.get(name, name).replace("_", "-"), dest=name, type=_parse_value,
                            default=default, choices=choices.get(name), help=f"default: {default!r}")


def _signature_values(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """The command's arguments from the parsed options, each as its annotated type."""
    fn, _, _, _, skipped = _FROM_SIGNATURE[command]
    hints = typing.get_type_hints(fn)
    return {name: _typed(name, getattr(args, name), hints.get(name, Any))
            for name in inspect.signature(fn).parameters if name not in skipped}


def _typed(name: str, value: Any, hint: Any) -> Any:
    """`value` as the type of TrainConfig's field `name`, or a clear error: `--steps 40`, `--steps 4e1`,
    `--progress false` and `--progress False` work; `--steps 2.5` or `--progress maybe` do not."""
    allowed = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    allowed = tuple(typing.get_origin(a) or a for a in allowed)  # dict[str, Any] -> dict
    if hint is Any:
        return value
    if value is None and type(None) in allowed:
        return None
    if bool in allowed:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if int in allowed and numeric and float(value).is_integer():
        return int(value)
    if float in allowed and numeric:
        return float(value)
    for kind in (str, dict):
        if kind in allowed and isinstance(value, kind):
            return value
    if isinstance(value, (list, tuple)) and (tuple in allowed or list in allowed):  # --formats '["ours"]'
        return tuple(value) if tuple in allowed else list(value)
    names = " or ".join("null" if a is type(None) else a.__name__ for a in allowed)
    raise SystemExit(f"--{name.replace('_', '-')}: expected {names}, got {value!r}")


def _config_from(args: argparse.Namespace) -> TrainConfig:
    given: dict[str, Any] = {}
    for name, part, f in _config_options():
        if getattr(args, name) is not None:
            hints = typing.get_type_hints(PARTS[part] if part else TrainConfig)
            value = _typed(name, getattr(args, name), hints[f.name])
            (given.setdefault(part, {}) if part else given)[f.name] = value
    return TrainConfig(**given)


def _format(result: dict) -> str:
    return (f"{100 * result['success']:.1f}% [{100 * result['ci_low']:.1f}, {100 * result['ci_high']:.1f}] "
            f"(n={result['n']})")


# ------------------------------------------------------------------------------------------------------
# the demo: base -> warm start -> RL, with held-out success and 95% intervals
# ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoSizes(Sizes):
    """Sizes of the demo."""

    one_hop_demos: int  # warm-start demonstrations on one-hop questions
    two_hop_demos: int  # ... and on two-hop ones
    sft_steps: int
    sft_batch: int
    eval_tasks: int  # held-out two-hop test questions
    rl_steps: int
    tasks_per_step: int
    group_size: int
    max_turns: int
    max_new_tokens: int
    eval_every: int
    # LoRA r 16 at ten times full fine-tuning's lr, rollouts from a bf16 copy: lora_vs_full and
    # sampler_dtype in benchmarks/README.md measured both on this recipe (as well, 26x smaller checkpoints,
    # rollouts 2-2.7x faster).
    rl_lr: float = 2e-4
    lora_rank: int = 16
    sample_dtype: str = "bfloat16"


DEMO_SIZES = {  # full: about 14 minutes on 2 CPU cores (README); fast (COURSE_FAST=1): a couple of minutes
    "fast": DemoSizes(one_hop_demos=16, two_hop_demos=4, sft_steps=2, sft_batch=4, eval_tasks=4, rl_steps=1,
                      tasks_per_step=2, group_size=2, max_turns=3, max_new_tokens=32, eval_every=1),
    "full": DemoSizes(one_hop_demos=224, two_hop_demos=32, sft_steps=32, sft_batch=8, eval_tasks=40,
                      rl_steps=20, tasks_per_step=4, group_size=4, max_turns=4, max_new_tokens=40,
                      eval_every=10),
}


def demo_sizes(fast: bool) -> DemoSizes:
    """Sizes of the demo: DEMO_SIZES["fast"] or DEMO_SIZES["full"]."""
    return DEMO_SIZES["fast" if fast else "full"]


def plot_learning_curve(run_dir: Path, base: dict, warm: dict, path: Path) -> None:
    """Held-out success (95% Wilson intervals) against RL step, with the base and warm-start levels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    evals = [r for r in rows if r["kind"] == "eval"]
    trains = [r for r in rows if r["kind"] == "train"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if evals:
        x = [r["step"] for r in evals]
        y = [100 * r["success"] for r in evals]
        err = [[100 * (r["success"] - r["ci_low"]) for r in evals],
               [100 * (r["ci_high"] - r["success"]) for r in evals]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=4, color="C0",
                    label="held-out success (greedy, 95% CI)")
    if trains:
        ax.plot([r["step"] for r in trains], [100 * r["success"] for r in trains], color="C1", alpha=0.7,
                label="training rollouts success (sampled)")
    ax.axhline(100 * base["success"], color="grey", ls=":", label="base model")
    ax.axhline(100 * warm["success"], color="C2", ls="--", label="after warm start")
    ax.set_xlabel("RL step")
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(-2, 102)
    ax.set_title("search_qa two-hop questions: warm start, then RL (SmolLM2-135M, CPU)")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _verdict(warm: dict, final: dict) -> str:
    if final["ci_low"] > warm["ci_high"]:
        return "RL beat the warm start: the 95% intervals do not overlap."
    if final["success"] > warm["success"]:
        return ("RL scored higher than the warm start, but the 95% intervals overlap: with this budget "
                "the improvement is NOT statistically established.")
    return "RL did NOT improve on the warm start with this budget."


def held_out_episode(model_path: Path, task: dict, sizes: DemoSizes) -> str:
    """One greedy episode of the model at `model_path` on `task`, as mask text, with its outcome."""
    model, tokenizer = load_policy(str(model_path))
    (group,) = rollout(model, tokenizer, "search_qa", [task], group_size=1, max_turns=sizes.max_turns,
                       max_new_tokens=sizes.max_new_tokens, temperature=0.0, seed=0, progress=False)
    trajectory = group.trajectories[0]
    outcome = "success" if trajectory.success else "failure"
    return (f"question: {task['question']}\nexpected answer: {task['answer']}\n\n"
            f"{mask_text(trajectory, tokenizer, show_prompt=False)}\n\n"
            f"-> {outcome} (reward {trajectory.reward:.2f}, {len(trajectory.steps)} turns)")


def _table_row(name: str, result: dict) -> str:
    """One row of the report's table: `name`, its success and its 95% interval, in percent."""
    low, high = 100 * result["ci_low"], 100 * result["ci_high"]
    return f"| {name} | {100 * result['success']:.1f}% | [{low:.1f}, {high:.1f}] |"


def demo(run_dir: str | Path | None = None, fast: bool | None = None, seed: int = 0) -> dict:
    """Warm start on (mostly one-hop) search_qa demonstrations, then outcome-credit RL on two-hop questions.

    Prints base / after warm start / after RL held-out success on two-hop test questions with 95%
    intervals; writes learning_curve.png and report.md into run_dir.
    """
    fast = fast_mode() if fast is None else fast
    sizes = demo_sizes(fast)
    run_dir = Path(run_dir) if run_dir else runs_dir() / ("demo-fast" if fast else "demo")
    run_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    two_hop_test = [t for t in load_tasks("search_qa", "test") if t["hops"] == 2][: sizes.eval_tasks]
    eval_kwargs = dict(tasks=two_hop_test, max_turns=sizes.max_turns, max_new_tokens=sizes.max_new_tokens)
    # train() evaluates on the same questions: the first eval_tasks two-hop test tasks, same limits.

    print(f"[1/4] base model on {len(two_hop_test)} held-out two-hop questions...")
    print(f"      base: {_format(base := evaluate('smollm2-135m', 'search_qa', **eval_kwargs))}")

    print("[2/4] warm start on expert demonstrations (mostly one-hop)...")
    t0 = time.time()
    warm_path = ensure_warm_start("search_qa", n_demos=sizes.one_hop_demos + sizes.two_hop_demos,
                                  steps=sizes.sft_steps, batch_size=sizes.sft_batch, lr=5e-5, seed=seed,
                                  tasks=mixed_hop_tasks(sizes.one_hop_demos, sizes.two_hop_demos, seed))
    sft_seconds = time.time() - t0

    print("[3/4] RL (outcome credit) on two-hop training questions; "
          "its step-0 evaluation is the warm start's...")
    config = TrainConfig(env="search_qa", model=str(warm_path), run_dir=str(run_dir / "rl"),
                         steps=sizes.rl_steps, tasks_per_step=sizes.tasks_per_step,
                         group_size=sizes.group_size, task_filter={"hops": 2}, credit="outcome",
                         eval_every=sizes.eval_every, eval_tasks=sizes.eval_tasks,
                         checkpoint_every=sizes.eval_every, seed=seed,
                         optim=dict(lr=sizes.rl_lr, lora_rank=sizes.lora_rank),
                         rollout=dict(max_turns=sizes.max_turns, max_new_tokens=sizes.max_new_tokens,
                                      sample_dtype=sizes.sample_dtype))
    t0 = time.time()
    if train(config)["interrupted"]:  # Ctrl+C: no report on a run that did not finish
        print("The demo stopped at the RL run's checkpoint; run it again to resume from there.")
        return {"interrupted": True, "run_dir": config.run_dir}
    rl_seconds = time.time() - t0
    evals = [r for r in read_metrics(config.run_dir) if r["kind"] == "eval"]
    warm, final = evals[0], evals[-1]
    print(f"[4/4] after warm start: {_format(warm)}\n      after RL: {_format(final)}")
    verdict = _verdict(warm, final)
    print(verdict)

    plot_learning_curve(run_dir / "rl", base, warm, run_dir / "learning_curve.png")
    episode = held_out_episode(Path(config.run_dir) / "checkpoint" / "model", two_hop_test[0], sizes)
    print("One held-out episode of the trained model "
          "([[ ]] = model tokens, loss mask 1; the rest is context):")
    print(episode)
    (run_dir / "episode.txt").write_text(episode + "\n")
    total = time.time() - t_start
    report = f"""# Demo: warm start, then RL, on search_qa (SmolLM2-135M-Instruct)

Held-out: the first {len(two_hop_test)} two-hop questions of the test split (greedy, one episode each,
{sizes.max_turns} turns of at most {sizes.max_new_tokens} new tokens). 95% Wilson intervals.

| model | success | 95% interval |
|---|---|---|
{_table_row('base', base)}
{_table_row('after warm start', warm)}
{_table_row('after RL', final)}

{verdict}

Sizes: warm start on {sizes.one_hop_demos} one-hop + {sizes.two_hop_demos} two-hop expert demonstrations,
{sizes.sft_steps} AdamW steps of batch {sizes.sft_batch}, lr 5e-5, assistant-only loss mask
({sft_seconds / 60:.1f} min, or 0 when reused from {warm_path}). RL: outcome credit (GRPO advantages,
DAPO loss), {sizes.rl_steps} steps of {sizes.tasks_per_step} two-hop tasks x {sizes.group_size} rollouts,
LoRA rank {sizes.lora_rank} (0: full fine-tuning), lr {sizes.rl_lr}, rollouts sampled in
{sizes.sample_dtype} ({rl_seconds / 60:.1f} min, evaluations included).
Total wall time {total / 60:.1f} min. Fast mode: {fast}. Seed: {seed}.

Learning curve: learning_curve.png; per-step metrics: rl/metrics.jsonl; one held-out episode: episode.txt.
"""
    (run_dir / "report.md").write_text(report)
    print(f"Report: {run_dir / 'report.md'}; plot: {run_dir / 'learning_curve.png'}; "
          f"{total / 60:.1f} min in all.")
    return {"base": base, "warm_start": warm, "rl": final, "seconds": total, "verdict": verdict}


# ------------------------------------------------------------------------------------------------------
# the command line
# ------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    torch.set_num_threads(course_threads())
    interruptible()  # started with & from a script, SIGINT would be ignored: Ctrl+C keeps the checkpoint
    parser = argparse.ArgumentParser(prog="python -m course_lib", description=__doc__.split("\n")[0],
                                     allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_config_options(sub.add_parser("train", help="RL training (resumes an existing run dir)",
                                       allow_abbrev=False))
    _add_signature_options(sub.add_parser("eval", help="held-out greedy success with a 95%% interval",
                                          allow_abbrev=False), "eval")
    _add_signature_options(sub.add_parser("sft", help="supervised warm start on expert demonstrations",
                                          allow_abbrev=False), "sft")
    p_demo = sub.add_parser("demo", help="warm start + RL on the embedded model (COURSE_FAST=1: tiny)",
                            allow_abbrev=False)
    p_demo.add_argument("--run-dir", default=None,
                        help="default: runs/demo (runs/demo-fast with COURSE_FAST=1)")
    p_demo.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:  # wrong names, filters and sizes: a one-line usage error, before any model loads
        if args.command == "train":
            config = _config_from(args)
            check(config)
            config_tasks(config)
        elif args.command in ("eval", "sft"):
            split = args.split if args.command == "eval" else "train"
            filter_tasks(load_tasks(args.env, split), args.task_filter)
            if args.command == "eval" and args.n_tasks < 1:
                raise ValueError(f"--n-tasks must be at least 1, got {args.n_tasks}")
    except ValueError as exc:
        parser.error(str(exc))

    if args.command == "train":
        result = train(_config_from(args))
        print(json.dumps(result, indent=1))
    elif args.command == "eval":
        result = evaluate(**_signature_values(args, "eval"), progress=True)
        print(f"{args.model_or_path} on {args.env}/{args.split}: {_format(result)}")
    elif args.command == "sft":
        path = warm_start(**_signature_values(args, "sft"))
        print(f"warm-start checkpoint: {path}")
    else:
        demo(args.run_dir, seed=args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
