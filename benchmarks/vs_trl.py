"""Our trainer vs TRL's GRPOTrainer at equal settings, in one process on one machine.

Both start from the same checkpoint, on the same environment, with the same group size, batch
(tasks x group), turn and token limits, learning rate, loss ("dapo", no KL), fp32 weights and the same
number of steps. TRL generates through our rollout engine (the rollout_func adapter), so generation
is equal work and the comparison isolates the training loop. Task order differs (each samples its
own tasks).

    python benchmarks/vs_trl.py                 # default: ~10 min on 2 idle CPU cores
    python benchmarks/vs_trl.py --steps 10 --group-size 8 --tasks-per-step 4   # on a GPU

Prints one table (seconds per step, generated and training tokens per second, peak memory, rewards)
and the ratios ours / TRL; `--json PATH` also writes the numbers.

`--time-to-success TARGET` measures something else: the training time each trainer needs to reach the same
held-out greedy success from the same warm start, TRL with its own generation and tool loop (the
environment_factory adapter). Both train `--max-steps` steps and are evaluated every `--eval-every` steps by
the same evaluator (`course_lib.evaluate.evaluate`, greedy, the same test tasks); evaluation time is left out
of the training clock. TRL's model is also evaluated in the format it trains in (its tool-calling chat
template, `evaluate_tool_calling`), because a warm start trained in our protocol need not work there: the warm
start of this mode is trained on the expert's demonstrations in both formats (`--warm-start-formats both`).

    python benchmarks/vs_trl.py --time-to-success 0.8 --eval-every 5 --max-steps 30 --json tts.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import tempfile
import threading
import time
from pathlib import Path

import torch

from course_lib.checkpoint import read_metrics
from course_lib.envs import load_tasks
from course_lib.evaluate import evaluate, evaluation_tasks
from course_lib.integrations.trl import build_trainer, grpo_config, task_dataset
from course_lib.integrations.trl_eval import evaluate_tool_calling
from course_lib.models import load_tokenizer, resolve_model_path
from course_lib.sft import ensure_warm_start
from course_lib.train.config import TrainConfig
from course_lib.train.loop import train


class PeakMemory:
    """Peak memory during a block: GPU max_memory_allocated, or process RSS sampled every 20 ms."""

    def __init__(self):
        self.peak_mb = 0.0
        self._stop = threading.Event()

    def _rss_mb(self) -> float:
        try:
            import psutil

            return psutil.Process().memory_info().rss / 2**20
        except ImportError:  # ru_maxrss is the peak of the whole process so far (KiB on Linux)
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak_mb = max(self.peak_mb, self._rss_mb())

    def __enter__(self):
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        self.peak_mb = self._rss_mb()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if torch.cuda.is_available():
            self.peak_mb = torch.cuda.max_memory_allocated() / 2**20
        return False


def run_ours(a, model_path: str, test_tasks: list[dict]) -> dict:
    with tempfile.TemporaryDirectory(prefix="vs_trl_ours-") as run_dir:  # its 1.6 GB checkpoint is not kept
        return _run_ours(a, model_path, test_tasks, run_dir)


def ours_config(a: argparse.Namespace, model_path: str, run_dir: str, steps: int, eval_every: int,
                eval_tasks: int) -> TrainConfig:
    """Our trainer at the benchmark's settings (loss dapo, no KL, temperature 1, one update per step)."""
    return TrainConfig(env=a.env, model=model_path, run_dir=run_dir, steps=steps,
                       tasks_per_step=a.tasks_per_step, group_size=a.group_size, eval_every=eval_every,
                       eval_tasks=eval_tasks, checkpoint_every=0, progress=False, seed=a.seed,
                       rollout=dict(max_turns=a.max_turns, max_new_tokens=a.max_new_tokens, temperature=1.0),
                       optim=dict(lr=a.lr, loss_type="dapo", beta=0.0, bf16_autocast=a.bf16_autocast,
                                  token_budget=1 << 20))


def step_seconds(row: dict) -> float:
    """A step of ours without evaluation and checkpointing: rollout, rewards, advantages, update."""
    return (row["seconds_rollout"] + row.get("seconds_reward", 0.0) + row.get("seconds_advantage", 0.0)
            + row.get("seconds_update", 0.0))


def _run_ours(a, model_path: str, test_tasks: list[dict], run_dir: str) -> dict:
    config = ours_config(a, model_path, run_dir, a.steps, eval_every=0, eval_tasks=len(test_tasks))
    with PeakMemory() as memory:
        t0 = time.perf_counter()
        train(config)
        wall = time.perf_counter() - t0
    rows = [r for r in read_metrics(Path(run_dir)) if r["kind"] == "train"]
    evals = [r for r in read_metrics(Path(run_dir)) if r["kind"] == "eval"]
    rollout_s = sum(r["seconds_rollout"] for r in rows)
    update_s = sum(r.get("seconds_update", 0.0) for r in rows)
    other_s = sum(r.get("seconds_reward", 0.0) + r.get("seconds_advantage", 0.0) for r in rows)
    trained = sum(r.get("train_tokens", 0) for r in rows)
    return {
        "seconds_per_step": (rollout_s + update_s + other_s) / len(rows),
        "rollout_s_per_step": rollout_s / len(rows),
        "update_s_per_step": update_s / len(rows),
        # all steps' tokens over all their generation time, as for TRL below (not a mean of per-step rates)
        "generated_tokens_per_s": (sum(r["generated_tokens"] for r in rows)
                                   / sum(r["seconds_generate"] for r in rows)),
        "training_tokens_per_s": trained / update_s if update_s else float("nan"),
        "trained_tokens_per_step": trained / len(rows),
        "updates_skipped": sum(bool(r.get("skipped_update")) for r in rows),
        "peak_memory_mb": memory.peak_mb,
        "reward_last_step": rows[-1]["reward"],
        "heldout_success": evals[-1]["success"] if evals else float("nan"),
        "wall_s_incl_eval_and_checkpoint": wall,
    }


def run_trl(a, model_path: str, test_tasks: list[dict]) -> dict:
    with tempfile.TemporaryDirectory(prefix="vs_trl_trl-") as output_dir:
        return _run_trl(a, model_path, test_tasks, output_dir)


def _run_trl(a, model_path: str, test_tasks: list[dict], output_dir: str) -> dict:
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.seconds: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.t0)

    args = grpo_config(output_dir, steps=a.steps, num_generations=a.group_size,
                       batch_size=a.tasks_per_step * a.group_size,
                       max_completion_length=a.max_turns * a.max_new_tokens,
                       learning_rate=a.lr, seed=a.seed, max_turns=a.max_turns)
    dataset = task_dataset(a.env, "train")
    with PeakMemory() as memory:
        trainer, rollout_func = build_trainer(a.env, "rollout_func", model=model_path, args=args,
                                              max_turns=a.max_turns, max_new_tokens=a.max_new_tokens,
                                              dataset=dataset)
        timer = StepTimer()
        trainer.add_callback(timer)
        rollout_seconds, trained_tokens = [], []
        inner = trainer.rollout_func

        def timed_rollout(prompts, trainer):
            t0 = time.perf_counter()
            out = inner(prompts, trainer)
            rollout_seconds.append(time.perf_counter() - t0)
            trained_tokens.append(sum(len(p) + len(c)
                                      for p, c in zip(out["prompt_ids"], out["completion_ids"])))
            return out

        trainer.rollout_func = timed_rollout
        trainer.train()
    steps = len(timer.seconds)
    rollout_s, step_s = sum(rollout_seconds), sum(timer.seconds)
    update_s = step_s - rollout_s
    stats = rollout_func.stats
    model = trainer.model
    model.eval()
    success = evaluate(model, a.env, tokenizer=trainer.processing_class, tasks=test_tasks,
                       max_turns=a.max_turns, max_new_tokens=a.max_new_tokens)["success"]
    rewards = [r["reward"] for r in trainer.state.log_history if "reward" in r]
    return {
        "seconds_per_step": step_s / steps,
        "rollout_s_per_step": rollout_s / steps,
        "update_s_per_step": update_s / steps,
        "generated_tokens_per_s": stats.new_tokens / max(stats.generate_seconds, 1e-9),
        "training_tokens_per_s": sum(trained_tokens) / update_s,
        "trained_tokens_per_step": sum(trained_tokens) / steps,
        "updates_skipped": 0,
        "peak_memory_mb": memory.peak_mb,
        "reward_last_step": rewards[-1],
        "heldout_success": success,
        "wall_s_incl_eval_and_checkpoint": float("nan"),
    }


ROWS = [("seconds_per_step", "seconds / step", "{:.1f}"),
        ("rollout_s_per_step", "  rollout s / step", "{:.1f}"),
        ("update_s_per_step", "  update s / step", "{:.1f}"),
        ("generated_tokens_per_s", "generated tokens / s", "{:.1f}"),
        ("training_tokens_per_s", "training tokens / s", "{:.0f}"),
        ("trained_tokens_per_step", "tokens trained / step", "{:.0f}"),
        ("updates_skipped", "updates skipped", "{}"),
        ("peak_memory_mb", "peak memory (MB)", "{:.0f}"), ("reward_last_step", "reward, last step", "{:.2f}"),
        ("heldout_success", "held-out greedy success", "{:.2f}")]


def table(ours: dict, trl: dict) -> str:
    lines = ["| metric | course_lib | TRL GRPOTrainer | ours / TRL |", "|---|---:|---:|---:|"]
    for key, label, fmt in ROWS:
        ratio = ours[key] / trl[key] if isinstance(trl[key], float) and trl[key] else float("nan")
        lines.append(f"| {label} | {fmt.format(ours[key])} | {fmt.format(trl[key])} | {ratio:.2f} |")
    return "\n".join(lines)


def explain(ours: dict, trl: dict) -> list[str]:
    """Why one is slower: which part of the step the gap comes from."""
    notes = []
    gap = ours["seconds_per_step"] - trl["seconds_per_step"]
    if gap <= 0:
        notes.append(f"ours is faster per step by {-gap:.1f} s")
    else:
        parts = {"rollout": ours["rollout_s_per_step"] - trl["rollout_s_per_step"],
                 "update": ours["update_s_per_step"] - trl["update_s_per_step"]}
        worst = max(parts, key=parts.get)
        notes.append(f"ours is slower per step by {gap:.1f} s, mostly in the {worst} "
                     f"({parts[worst]:+.1f} s/step; rollout {parts['rollout']:+.1f}, "
                     f"update {parts['update']:+.1f})")
    if ours["updates_skipped"]:
        notes.append(f"ours skipped {ours['updates_skipped']} update(s) where every group had equal rewards "
                     "(zero advantage, no gradient); TRL runs the forward/backward anyway")
    if ours["trained_tokens_per_step"] < trl["trained_tokens_per_step"]:
        notes.append("ours trains fewer tokens per step: groups with equal rewards are dropped before the "
                     "update")
    notes.append("generation is the same engine in both (TRL calls our rollout through rollout_func): a "
                 "generated-tokens/s gap comes from different sampled text (other seeds, so other turn "
                 "lengths and another batch occupancy) or from machine load, not from code")
    return notes


def machine() -> str:
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    return (f"{time.strftime('%Y-%m-%d %H:%M')} | {os.cpu_count()} cores, {cpu} | {gpu} | torch threads "
            f"{torch.get_num_threads()} | load average at start {load[0]:.1f}")


# ----- time to the same held-out success -----------------------------------------------------------------


def time_to_target(curve: list[dict], target: float, key: str = "success") -> dict:
    """When a curve first reaches `target`: {"seconds", "step"} of its first evaluation with `key` >= target
    (both None if none does) and the best value on the curve with its step."""
    first = next((point for point in curve if point[key] >= target), None)
    best = max(curve, key=lambda point: point[key])
    return {"seconds": first["train_seconds"] if first else None, "step": first["step"] if first else None,
            "best": best[key], "best_step": best["step"]}


def ours_curve(a: argparse.Namespace, model_path: str, test_tasks: list[dict]) -> dict:
    with tempfile.TemporaryDirectory(prefix="vs_trl_ours-") as run_dir:  # its 1.6 GB checkpoint is not kept
        train(ours_config(a, model_path, run_dir, a.max_steps, eval_every=a.eval_every,
                          eval_tasks=len(test_tasks)))
        metrics = read_metrics(Path(run_dir))
    # train() evaluates at step 0, every eval_every steps and at the end, on the first eval_tasks test tasks
    # (the tasks given to TRL's evaluation below), with `evaluate`; its clock is the sum of the steps' parts.
    rows = [r for r in metrics if r["kind"] == "train"]
    clock, seconds_at = 0.0, {0: 0.0}
    for row in rows:
        clock += step_seconds(row)
        seconds_at[row["step"]] = clock
    curve = [{"step": r["step"], "train_seconds": seconds_at[r["step"]], "success": r["success"],
              "eval_seconds": r["seconds_eval"]} for r in metrics if r["kind"] == "eval"]
    return {"curve": curve, "steps": len(rows), "seconds_per_step": clock / max(1, len(rows)),
            "reward_mean": sum(r["reward"] for r in rows) / max(1, len(rows)),
            "updates_skipped": sum(bool(r.get("skipped_update")) for r in rows)}


def trl_curve(a: argparse.Namespace, model_path: str, test_tasks: list[dict]) -> dict:
    with tempfile.TemporaryDirectory(prefix="vs_trl_trl-") as output_dir:
        return _trl_curve(a, model_path, test_tasks, output_dir)


def _trl_curve(a: argparse.Namespace, model_path: str, test_tasks: list[dict], output_dir: str) -> dict:
    from transformers import TrainerCallback

    args = grpo_config(output_dir, steps=a.max_steps, num_generations=a.group_size,
                       batch_size=a.tasks_per_step * a.group_size,
                       max_completion_length=a.max_turns * a.max_new_tokens,
                       learning_rate=a.lr, seed=a.seed, max_turns=a.max_turns)
    # TRL's own generation and tool loop; the tokenizer it trains with has the tool-calling template
    trainer, _ = build_trainer(a.env, "environment_factory", model=model_path, args=args,
                               max_turns=a.max_turns, max_new_tokens=a.max_new_tokens)
    our_tokenizer = load_tokenizer(resolve_model_path(model_path))  # our format: the evaluator ours uses

    def heldout(step: int, train_seconds: float) -> dict:
        model, t0 = trainer.model, time.perf_counter()
        was_training = model.training
        model.eval()
        try:
            ours_format = evaluate(model, a.env, tokenizer=our_tokenizer, tasks=test_tasks,
                                   max_turns=a.max_turns, max_new_tokens=a.max_new_tokens)
            tool_format = evaluate_tool_calling(model, trainer.processing_class, a.env, test_tasks,
                                                max_turns=a.max_turns,
                                                max_completion_length=args.max_completion_length)
        finally:
            model.train(was_training)
        return {"step": step, "train_seconds": train_seconds, "success": ours_format["success"],
                "success_tool_calling": tool_format["success"],
                "turns_with_tool_calls": tool_format["turns_with_tool_calls"],
                "eval_seconds": time.perf_counter() - t0}

    class Clock(TrainerCallback):
        """The training clock, stopped while the model is evaluated every eval_every steps."""

        def __init__(self):
            self.train_seconds = 0.0
            self.curve = [heldout(0, 0.0)]

        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.train_seconds += time.perf_counter() - self.t0
            if state.global_step % a.eval_every == 0 or state.global_step == state.max_steps:
                self.curve.append(heldout(state.global_step, self.train_seconds))

    clock = Clock()
    trainer.add_callback(clock)
    trainer.train()
    rewards = [r["reward"] for r in trainer.state.log_history if "reward" in r]
    steps = trainer.state.global_step
    return {"curve": clock.curve, "steps": steps, "seconds_per_step": clock.train_seconds / max(1, steps),
            "reward_mean": sum(rewards) / max(1, len(rewards)),
            "steps_with_zero_reward": sum(r == 0 for r in rewards)}


def _seconds(reached: dict, max_steps: int) -> str:
    if reached["seconds"] is None:
        return (f"not reached within {max_steps} steps (best {reached['best']:.2f} at step "
                f"{reached['best_step']})")
    return f"{reached['seconds']:.0f} s (step {reached['step']})"


def curve_tables(result: dict) -> str:
    """The curves side by side (one row per evaluation step), then the summary per trainer."""
    ours, trl, max_steps = result["ours"], result["trl"], result["max_steps"]
    trl_at = {point["step"]: point for point in trl["curve"]}
    lines = ["| step | course_lib: training s | course_lib: held-out success | TRL: training s "
             "| TRL: held-out success | TRL: success in its tool-calling format |",
             "|---:|---:|---:|---:|---:|---:|"]
    for point in ours["curve"]:
        other = trl_at.get(point["step"])
        trl_cells = (f"{other['train_seconds']:.0f} | {other['success']:.2f} | "
                     f"{other['success_tool_calling']:.2f}" if other else "- | - | -")
        lines.append(f"| {point['step']} | {point['train_seconds']:.0f} | {point['success']:.2f} "
                     f"| {trl_cells} |")
    lines += ["", "| | course_lib | TRL GRPOTrainer (environment_factory) |", "|---|---:|---:|",
              f"| training s / step | {ours['seconds_per_step']:.1f} | {trl['seconds_per_step']:.1f} |",
              f"| mean training reward | {ours['reward_mean']:.2f} | {trl['reward_mean']:.2f} |",
              f"| evaluations | {len(ours['curve'])} | {len(trl['curve'])} |",
              f"| time to {result['target']:.2f} held-out success | {_seconds(ours['reached'], max_steps)} "
              f"| {_seconds(trl['reached'], max_steps)} |",
              f"| the same in TRL's tool-calling format | - "
              f"| {_seconds(trl['reached_tool_calling'], max_steps)} |"]
    return "\n".join(lines)


def time_to_success_notes(result: dict) -> list[str]:
    """What the numbers say beyond the table: the warm start in both formats, a target met before training,
    a trainer without reward signal, the ratio."""
    ours, trl, target = result["ours"], result["trl"], result["target"]
    warm = result["warm_start"]
    trained_on = (f"{warm['steps']} steps on demonstrations in {' and '.join(warm['formats'])} format"
                  if warm["formats"] else "none, the base model")
    notes = [f"warm start ({trained_on}), held-out greedy success: {warm['success']:.2f} in our "
             f"format (our engine, <tool_call>/<answer> tags), {warm['success_tool_calling']:.2f} in TRL's "
             f"tool-calling format (tools rendered by the chat template, `answer` is a tool; TRL's parser "
             f"found a tool call in {warm['turns_with_tool_calls']:.0%} of its turns)"]
    if warm["success_tool_calling"] < warm["success"] - 0.2:
        learnt = ("both formats, but the tool-calling one less well" if "tool_calling" in warm["formats"]
                  else "our protocol, not TRL's tool-calling template")
        notes.append(f"TRL starts from a much lower success in the format it trains in: the warm start "
                     f"learnt {learnt}, so the two trainers do not start from the same effective policy; "
                     "TRL's time also includes learning the format")
    if ours["curve"][0]["success"] >= target:
        notes.append(f"the warm start already reaches {target:.2f} in our format before any RL step: the "
                     "time to target is 0 for both; use a weaker warm start (--warm-start-steps) or a higher "
                     "target")
    if trl["steps_with_zero_reward"] == trl["steps"]:
        notes.append(f"TRL's training reward was 0 on all {trl['steps']} steps: every group had equal "
                     "rewards, so GRPO's advantages and gradient were zero and TRL's model did not learn")
    if result["ratio_ours_over_trl"] is not None:
        notes.append(f"time to {target:.2f}: ours / TRL = {result['ratio_ours_over_trl']:.2f}")
    else:
        notes.append(f"no ratio: both trainers must reach {target:.2f} after at least one step")
    return notes


def time_to_success(a: argparse.Namespace, model_path: str, formats: tuple[str, ...]) -> dict:
    """Both trainers from `model_path` to `a.time_to_success` held-out success; the result with its notes.
    formats: the warm start's demonstration formats (none: `model_path` is the base model)."""
    test_tasks = evaluation_tasks(a.env, "test", a.eval_tasks)  # the tasks train() evaluates ours on
    ours = ours_curve(a, model_path, test_tasks)
    gc.collect()
    trl = trl_curve(a, model_path, test_tasks)
    target = a.time_to_success
    ours["reached"] = time_to_target(ours["curve"], target)
    trl["reached"] = time_to_target(trl["curve"], target)
    trl["reached_tool_calling"] = time_to_target(trl["curve"], target, key="success_tool_calling")
    warm = trl["curve"][0]
    both = ours["reached"]["seconds"], trl["reached"]["seconds"]
    result = {"machine": machine(), "target": target, "max_steps": a.max_steps, "eval_every": a.eval_every,
              "eval_tasks": len(test_tasks),
              "size": (f"env {a.env}, up to {a.max_steps} steps x {a.tasks_per_step} tasks x group "
                       f"{a.group_size}, max_turns {a.max_turns}, max_new_tokens {a.max_new_tokens} (TRL: "
                       f"{a.max_turns * a.max_new_tokens} per completion), loss dapo, lr {a.lr}, held-out "
                       f"evaluation every {a.eval_every} steps on {len(test_tasks)} test tasks"),
              "warm_start": {"model": model_path, "steps": a.warm_start_steps, "formats": list(formats),
                             "success": ours["curve"][0]["success"],
                             "success_under_trl": warm["success"],
                             "success_tool_calling": warm["success_tool_calling"],
                             "turns_with_tool_calls": warm["turns_with_tool_calls"]},
              "ours": ours, "trl": trl,
              "ratio_ours_over_trl": both[0] / both[1] if None not in both and both[1] > 0 else None}
    result["notes"] = time_to_success_notes(result)
    return result


# --warm-start-formats -> the demonstration formats of `course_lib.sft.warm_start`
WARM_START_FORMATS = {"ours": ("ours",), "both": ("ours", "tool_calling")}


def warm_start_formats(a: argparse.Namespace) -> tuple[str, ...]:
    """The warm start's demonstration formats: --warm-start-formats, else both formats for --time-to-success
    (TRL's environment_factory trains in its tool-calling format, which a warm start on our protocol alone
    does not speak) and ours for the per-step comparison (TRL generates through our engine there)."""
    choice = a.warm_start_formats or ("both" if a.time_to_success is not None else "ours")
    return WARM_START_FORMATS[choice]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="lookup")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--tasks-per-step", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--eval-tasks", type=int, default=8)
    p.add_argument("--warm-start-steps", type=int, default=12,
                   help="supervised warm start first (0: the base model, whose rewards are all 0)")
    p.add_argument("--warm-start-formats", choices=sorted(WARM_START_FORMATS), default=None,
                   help="the warm start's demonstrations: in our protocol, or in ours and TRL's tool-calling "
                        "format mixed (default: both with --time-to-success, else ours)")
    p.add_argument("--bf16-autocast", action="store_true",
                   help="ours with bf16 autocast (TRL stays fp32 on CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--time-to-success", type=float, default=None, metavar="TARGET",
                   help="instead: training time of each trainer to this held-out greedy success (TRL with "
                        "its own generation, the environment_factory adapter)")
    p.add_argument("--eval-every", type=int, default=5, help="--time-to-success: evaluate every K steps")
    p.add_argument("--max-steps", type=int, default=30, help="--time-to-success: steps of each trainer")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if torch.cuda.is_available():
        a.bf16_autocast = None  # ours: the model's dtype choice (bf16 weights); TRL: bf16 mixed precision
    print(machine())
    t0 = time.perf_counter()
    formats = warm_start_formats(a) if a.warm_start_steps else ()
    if a.warm_start_steps:
        model_path = str(ensure_warm_start(a.env, n_demos=64, steps=a.warm_start_steps, batch_size=4,
                                           formats=formats, progress=False))
    else:
        model_path = resolve_model_path("smollm2-135m")
    print(f"model: {model_path}, warm start formats: {', '.join(formats) or 'none'} "
          f"({time.perf_counter() - t0:.0f} s)")
    if a.time_to_success is not None:
        result = time_to_success(a, model_path, formats)
        print(result["size"])
        print(curve_tables(result))
        for note in result["notes"]:
            print("-", note)
        if a.json:
            Path(a.json).write_text(json.dumps(result, indent=1))
        return result
    test_tasks = load_tasks(a.env, "test", a.eval_tasks)
    ours = run_ours(a, model_path, test_tasks)
    gc.collect()
    trl = run_trl(a, model_path, test_tasks)
    size = (f"env {a.env}, {a.steps} steps x {a.tasks_per_step} tasks x group {a.group_size}, max_turns "
            f"{a.max_turns}, max_new_tokens {a.max_new_tokens}, fp32, loss dapo, lr {a.lr}")
    print(size)
    print(table(ours, trl))
    for note in explain(ours, trl):
        print("-", note)
    result = {"machine": machine(), "size": size, "ours": ours, "trl": trl, "notes": explain(ours, trl)}
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
