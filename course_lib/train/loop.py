"""The RL loop (notebooks 05 to 09): `Run` (a loaded run), `rl_step(run, ...)` (one step) and
`train(config)` (the whole run, resumable), with the NaN guard.

A run directory holds `metrics.jsonl` (a row per step, plus eval rows), `checkpoint/` (model, optimizer,
value head, step, RNG states, config; written atomically) and `config.json`. `train(config)` on the same
directory resumes after the last checkpoint; Ctrl+C saves a checkpoint before it stops.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from course_lib import lora, rewards
from course_lib.batching import use_bf16
from course_lib.checkpoint import (
    DeferredInterrupt,
    check_disk_for_checkpoint,
    find_checkpoint,
    log_metrics,
    nonfinite_in_a_row,
    read_metrics,
    restore_checkpoint,
    save_checkpoint,
    truncate_metrics,
)
from course_lib.envs import load_tasks
from course_lib.evaluate import evaluate
from course_lib.kv_cache import sampling_copy, synced
from course_lib.models import load_policy
from course_lib.rollout import RolloutStats, flag_rates, rollout
from course_lib.tasks import filter_tasks
from course_lib.trajectory import Trajectory
from course_lib.value_head import ValueHead

from .batch import Batch, make_batch
from .config import Hooks, TrainConfig, check
from .critic import make_value_head, param_groups, turn_values
from .update import update


@dataclass
class Run:
    """A loaded run: its config, the model and what trains it, and the step it resumes after."""

    config: TrainConfig
    model: Any
    tokenizer: Any
    device: torch.device
    autocast_dtype: torch.dtype | None  # of the training forward/backward (generation keeps the model's)
    value_head: ValueHead | None  # when the credit method learns values
    optimizer: torch.optim.Optimizer
    ref_model: Any = None  # a frozen copy of the starting model, when optim.beta > 0 (KL penalty)
    sampler: Any = None  # a `kv_cache.sampling_copy` the rollouts sample from (None: the model itself)
    start: int = 0  # the last finished step (0: a fresh run)


def config_tasks(config: TrainConfig) -> tuple[list[dict], list[dict]]:
    """(training tasks, held-out evaluation tasks) of a run; a wrong env name or filter raises ValueError."""
    train_tasks = filter_tasks(load_tasks(config.env, "train"), config.task_filter)
    return train_tasks, filter_tasks(load_tasks(config.env, "test"), config.task_filter)[: config.eval_tasks]


def _batch_metrics(groups, step_rewards: rewards.Rewards, batch: Batch) -> dict[str, Any]:
    """The step's rewards (training reward, verifier reward and success side by side), what was skipped."""
    all_trajs = [t for g in groups for t in g]
    judged = [g for g in step_rewards.groups if g.group_id not in set(batch.skipped["judge_failed"])]
    row = {**step_rewards.metrics(),
           "turns": sum(t.num_turns for t in all_trajs) / len(all_trajs),
           "unfinished": sum(t.unfinished for t in all_trajs) / len(all_trajs), **flag_rates(all_trajs),
           "equal_reward_groups": sum(len(set(g.rewards)) <= 1 for g in judged),
           "judge_failed_groups": len(batch.skipped["judge_failed"] + batch.skipped["turn_judge_failed"]),
           "skipped_groups": sum(len(ids) for ids in batch.skipped.values()), **batch.stats}
    row["nonzero_advantage_tokens"] = 0.0  # the share of the step's model tokens the update can move
    if batch.trajectories:
        flat = torch.cat([a[torch.tensor(t.loss_mask, dtype=torch.bool)]
                          for a, t in zip(batch.advantages, batch.trajectories)])
        row.update({"advantage_mean": flat.mean().item(),
                    "advantage_std": flat.std().item() if len(flat) > 1 else 0.0,
                    "nonzero_advantage_tokens": int((flat != 0).sum()) / max(1, sum(sum(t.loss_mask)
                                                                                   for t in all_trajs))})
    return row


def rl_step(run: Run, step: int, train_tasks: list[dict], hooks: Hooks | None = None,
            interrupt: DeferredInterrupt | None = None) -> Batch:
    """One RL step: rollout -> rewards (`rewards.assign`) -> batch (`make_batch`) -> `update`. Returns its
    batch, with the step's metrics row in `batch.metrics`. The rolled-out trajectories are not changed:
    the batch trains on rewarded copies.

    With `interrupt`, a Ctrl+C during the update is held until it is done (rollouts stay interruptible at
    once: they change no weights)."""
    config, spec, hooks = run.config, run.config.rollout, hooks or Hooks()
    rng = random.Random(config.seed * 1_000_003 + step)  # tasks depend only on (seed, step): resumable
    tasks = rng.sample(train_tasks, min(config.tasks_per_step, len(train_tasks)))
    stats = RolloutStats()
    t0 = time.perf_counter()
    groups = rollout(synced(run.sampler, run.model), run.tokenizer, config.env, tasks,
                     group_size=config.group_size, max_turns=spec.max_turns,
                     max_new_tokens=spec.max_new_tokens, temperature=spec.temperature,
                     seed=config.seed * 100_000 + step, max_context=spec.max_context, progress=False,
                     stats=stats, max_batch=spec.max_batch)
    row: dict[str, Any] = {"step": step, "kind": "train", "seconds_rollout": time.perf_counter() - t0,
                           "generated_tokens": stats.new_tokens, "seconds_generate": stats.generate_seconds,
                           "generate_tokens_per_s": stats.new_tokens / max(stats.generate_seconds, 1e-9)}
    t0 = time.perf_counter()
    step_rewards = rewards.assign(config.reward, groups, judge=hooks.judge, reward_fn=hooks.reward_fn)
    row.update({**step_rewards.judge_metrics, "seconds_reward": time.perf_counter() - t0})
    t0 = time.perf_counter()

    def values_of(trajs: list[Trajectory]) -> list[torch.Tensor]:
        return turn_values(run.model, run.value_head, trajs, token_budget=config.optim.token_budget,
                           device=run.device, autocast_dtype=run.autocast_dtype)

    batch = make_batch(step_rewards.groups, step_rewards.judge_failed, config, hooks, values_of=values_of)
    row.update({**_batch_metrics(groups, step_rewards, batch), "seconds_advantage": time.perf_counter() - t0})
    batch.metrics = row
    if not batch.trajectories:
        row.update({"nonfinite": False, "skipped_update": True})
        return batch
    with interrupt.hold() if interrupt is not None else contextlib.nullcontext():
        row.update(update(run.model, run.value_head, run.optimizer, batch.trajectories, batch.advantages,
                          config, step, device=run.device, autocast_dtype=run.autocast_dtype,
                          ref_model=run.ref_model,
                          old_values=batch.old_values, returns=batch.returns, loss_hook=hooks.loss_hook))
    return batch


def load_run(config: TrainConfig, metrics_path: Path) -> Run:
    """Load the model (from the checkpoint when resuming), its value head, optimizer, reference model and
    sampler, and restore the checkpoint's state; a fresh run starts an empty metrics file."""
    run_dir = Path(config.run_dir)
    checkpoint = find_checkpoint(run_dir)
    model, tokenizer = _load_model(config, checkpoint)
    device = next(model.parameters()).device
    autocast_dtype = torch.bfloat16 if use_bf16(config.optim.bf16_autocast, device) else model.course_autocast
    # Generation keeps the model's own choice: at decoding batch sizes bf16 autocast on a CPU costs more
    # in casts than it saves in matmuls (measured slower); the training forward/backward uses it.
    value_head = make_value_head(config, model)
    optimizer = torch.optim.AdamW(param_groups(config, model, value_head),
                                  weight_decay=config.optim.weight_decay, eps=config.optim.adam_eps)
    torch.manual_seed(config.seed)
    start = 0
    if checkpoint:
        start = restore_checkpoint(checkpoint, optimizer, value_head)
        truncate_metrics(metrics_path, start)
        print(f"Resuming {run_dir} from step {start}.")
    else:
        metrics_path.write_text("")
    return Run(config, model, tokenizer, device, autocast_dtype, value_head, optimizer, start=start)


def _load_model(config: TrainConfig, checkpoint: Path | None):
    """The policy to train and its tokenizer: the checkpoint's weights when resuming, else `config.model`'s;
    with `optim.lora_rank`, `config.model` frozen under the checkpoint's (or fresh) LoRA adapters."""
    if not config.optim.lora_rank:
        return load_policy(str(checkpoint / "model") if checkpoint else config.model, device=config.device)
    model, tokenizer = load_policy(config.model, device=config.device)
    if checkpoint:
        return lora.load_adapters(model, checkpoint / "model"), tokenizer
    optim = config.optim
    torch.manual_seed(config.seed)  # A's random start: the same adapters for the same seed
    return lora.add_adapters(model, optim.lora_rank, optim.lora_alpha, base=config.model), tokenizer


def train(config: TrainConfig, *, judge: Any = None, reward_fn: Callable[[Trajectory], float] | None = None,
          turn_reward_fn: Callable[[Trajectory], list[float]] | None = None,
          loss_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None) -> dict:
    """Run (or resume) an RL run; returns {"step", "eval", "run_dir", "interrupted"}.

    judge: the judge backend (reward source "judge"/"mix" or turn_reward="judge"); reward_fn: a reward
    replacing the verifier's; turn_reward_fn: the "process" turn-reward rule's function (None: the process
    reward); loss_hook: testing. Metrics rows go to run_dir/metrics.jsonl: kind "train" (one per step:
    the training reward `reward`, the verifier's `success` and `verifier_reward`, ...) and kind "eval"
    (held-out greedy success with its 95% Wilson interval, at step 0, every `eval_every` steps and at the
    end).
    """
    hooks = Hooks(reward_fn=reward_fn, turn_reward_fn=turn_reward_fn, judge=judge, loss_hook=loss_hook)
    check(config, judge)
    train_tasks, test_tasks = config_tasks(config)  # before the model loads: a bad name or filter fails now
    run_dir, metrics_path = Path(config.run_dir), Path(config.run_dir) / "metrics.jsonl"
    run_dir.mkdir(parents=True, exist_ok=True)
    run = load_run(config, metrics_path)
    (run_dir / "config.json").write_text(json.dumps(config.to_json(), indent=1))
    if run.start < config.steps:
        check_disk_for_checkpoint(run_dir, run.model, run.value_head)
    run.ref_model = load_policy(config.model, device=config.device)[0] if config.optim.beta > 0 else None
    run.sampler = sampling_copy(run.model, config.rollout.sample_dtype)
    # evaluation runs fp32 weights: the model itself, or (LoRA) a merged fp32 copy, the sampler's if it is one
    evaluator = run.sampler if config.rollout.sample_dtype == "float32" else sampling_copy(run.model)

    def run_eval(step: int) -> dict:
        t0 = time.perf_counter()
        result = evaluate(synced(evaluator, run.model), config.env, tokenizer=run.tokenizer, tasks=test_tasks,
                          max_turns=config.rollout.max_turns, max_new_tokens=config.rollout.max_new_tokens,
                          max_context=config.rollout.max_context)
        row = {"step": step, "kind": "eval", **result, "seconds_eval": time.perf_counter() - t0}
        log_metrics(metrics_path, row)
        return row

    def eval_due(step: int) -> bool:
        return config.eval_tasks > 0 and (step == config.steps
                                          or (config.eval_every > 0 and step % config.eval_every == 0))

    logged = read_metrics(run_dir)
    last_eval = next((r for r in reversed(logged) if r["kind"] == "eval"), None)
    if run.start == 0 and last_eval is None and config.eval_every > 0 and config.eval_tasks > 0:
        last_eval = run_eval(0)  # not again when resuming from a checkpoint of step 0 (Ctrl+C in step 1)
    elif run.start > 0 and eval_due(run.start) and not any(r["kind"] == "eval" and r["step"] == run.start
                                                           for r in logged):
        last_eval = run_eval(run.start)  # a Ctrl+C after this step's update came before its evaluation
    step, bad_in_a_row, interrupted = run.start, nonfinite_in_a_row(logged), False
    held = DeferredInterrupt()
    bar = tqdm(range(run.start + 1, config.steps + 1), desc=f"RL {config.credit}",
               disable=not config.progress, initial=run.start, total=config.steps)

    def save(at: int) -> None:
        save_checkpoint(run_dir, run.model, run.tokenizer, run.optimizer, run.value_head, at,
                        config.to_json())

    try:
        for next_step in bar:
            row = rl_step(run, next_step, train_tasks, hooks=hooks, interrupt=held).metrics
            log_metrics(metrics_path, row)
            step = next_step
            bad_in_a_row = nan_guard(row, step, bad_in_a_row, config)
            bar.set_postfix(reward=f"{row['reward']:.2f}", success=f"{row['success']:.2f}")
            if held.pending:  # Ctrl+C came during this step's update: the step is done, save it and stop
                raise KeyboardInterrupt
            if eval_due(step):
                last_eval = run_eval(step)
            if step == config.steps or (config.checkpoint_every > 0 and step % config.checkpoint_every == 0):
                save(step)
    except KeyboardInterrupt:
        interrupted = True
        save(step)
        print(f"Interrupted: checkpoint saved at step {step} in {run_dir}; run train() again to resume.")
    finally:
        bar.close()
    return {"step": step, "eval": last_eval, "run_dir": str(run_dir), "interrupted": interrupted}


def nan_guard(row: dict, step: int, bad_in_a_row: int, config: TrainConfig) -> int:
    """NaN/inf updates in a row after this step; says what happened, stops the run at `max_bad_updates`."""
    bad_in_a_row = bad_in_a_row + 1 if row["nonfinite"] else 0
    if row["nonfinite"]:
        done = (f"update stopped after {row['epochs_stepped']} of {config.optim.ppo_epochs} PPO epochs"
                if row["epochs_stepped"] else "update skipped")
        print(f"step {step}: NaN/inf in the loss or the gradients; {done} ({bad_in_a_row} in a row)")
    if bad_in_a_row >= config.max_bad_updates:
        raise RuntimeError(f"{bad_in_a_row} updates in a row had a NaN/inf loss or gradient (last at step "
                           f"{step}); stopping. Lower the learning rate, turn off bf16 autocast, or check "
                           "the rewards.")
    return bad_in_a_row
