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
from course_lib.evaluate import evaluate
from course_lib.integrations.trl import build_trainer, grpo_config, task_dataset
from course_lib.models import resolve_model_path
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


def _run_ours(a, model_path: str, test_tasks: list[dict], run_dir: str) -> dict:
    config = TrainConfig(env=a.env, model=model_path, run_dir=run_dir, steps=a.steps,
                         tasks_per_step=a.tasks_per_step, group_size=a.group_size, eval_every=0,
                         eval_tasks=len(test_tasks), checkpoint_every=0, progress=False, seed=a.seed,
                         rollout=dict(max_turns=a.max_turns, max_new_tokens=a.max_new_tokens,
                                      temperature=1.0),
                         optim=dict(lr=a.lr, loss_type="dapo", beta=0.0, bf16_autocast=a.bf16_autocast,
                                    token_budget=1 << 20))
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
    p.add_argument("--bf16-autocast", action="store_true",
                   help="ours with bf16 autocast (TRL stays fp32 on CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--json", default=None, help="also write the results here")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if torch.cuda.is_available():
        a.bf16_autocast = None  # ours: the model's dtype choice (bf16 weights); TRL: bf16 mixed precision
    print(machine())
    t0 = time.perf_counter()
    if a.warm_start_steps:
        model_path = str(ensure_warm_start(a.env, n_demos=64, steps=a.warm_start_steps, batch_size=4,
                                           progress=False))
    else:
        model_path = resolve_model_path("smollm2-135m")
    print(f"model: {model_path} ({time.perf_counter() - t0:.0f} s)")
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
