"""The RL loop (notebooks 05 to 09): `TrainConfig`, rewards, the update, and `train(config)`.

One RL step is the loop of the whole course:

    rollout (a group of episodes per task)  ->  reward (verifier, judge or a mix)
        ->  turn rewards (once, when the credit method reads them)  ->  advantages (`credit.advantages`)
        ->  update (masked policy loss, plus a value loss when the method learns values)

A run directory holds `metrics.jsonl` (a row per step, plus eval rows), `checkpoint/` (model, optimizer,
value head, step, RNG states, config; written atomically) and `config.json`. `train(config)` on the same
directory resumes after the last checkpoint; Ctrl+C saves a checkpoint before it stops. The warm start is
in `sft`, evaluation in `evaluate`, checkpoints in `checkpoint`, the forward pass in `batching`; their
names are re-exported here, where the notebooks first met them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from course_lib import credit, runs_dir, wilson_interval
from course_lib.batching import (
    collate,
    entropy,
    forward_logprobs,
    hidden_states,
    loss_scale,
    micro_batch_loss,
    pack_by_length,
    pad,
    unscale_gradients,
    use_bf16,
)
from course_lib.checkpoint import (
    DeferredInterrupt,
    check_disk_for_checkpoint,
    checkpoint_bytes,
    find_checkpoint,
    log_metrics,
    nonfinite_in_a_row,
    read_metrics,
    restore_checkpoint,
    save_checkpoint,
    truncate_metrics,
)
from course_lib.credit import CreditInputs, ValueHead, state_positions, value_loss
from course_lib.credit import process_rewards as default_turn_reward
from course_lib.envs import load_tasks
from course_lib.evaluate import evaluate
from course_lib.kv_cache import sampler_gap, sampling_copy, synced
from course_lib.losses import policy_loss
from course_lib.models import autocast_context, load_policy
from course_lib.rollout import RolloutStats, flag_rates, rollout
from course_lib.sft import ensure_warm_start, sft_step, warm_start
from course_lib.tasks import filter_tasks
from course_lib.trajectory import Trajectory, TrajectoryGroup

__all__ = ["TrainConfig", "Batch", "train", "rl_step", "make_batch", "update", "assign_rewards", "turn_rewards",
           "turn_values", "config_tasks", "REWARDS",  # then re-exports for notebooks, tests and benchmarks:
           "runs_dir", "wilson_interval", "evaluate", "warm_start", "ensure_warm_start", "sft_step", "filter_tasks",
           "collate", "pack_by_length", "loss_scale", "state_positions", "default_turn_reward", "read_metrics",
           "save_checkpoint", "find_checkpoint", "checkpoint_bytes", "DeferredInterrupt"]

REWARDS = ("verifier", "judge", "mix")


@dataclass
class TrainConfig:
    """Everything one RL run needs, as data (it is saved as config.json). Defaults: a small outcome-credit
    run on search_qa on a CPU. The Python objects of a run (a judge backend, custom reward functions, a
    test hook) are arguments of `train()`, not fields here."""

    env: str = "search_qa"  # environment name (course_lib.envs.ENVIRONMENTS)
    model: str = "smollm2-135m"  # model name or a checkpoint folder (e.g. a warm start)
    run_dir: str = "runs/train"  # metrics.jsonl, checkpoint/ and config.json go here; resumed if present
    steps: int = 20  # RL steps (one rollout batch and its update each)
    tasks_per_step: int = 4  # tasks sampled per step
    group_size: int = 4  # rollouts per task (the group that advantages compare)
    max_turns: int = 4  # turn limit of an episode
    max_new_tokens: int = 48  # token limit of one model turn
    temperature: float = 1.0  # sampling temperature of rollouts (the loss uses the same one)
    task_filter: dict[str, Any] | None = None  # keep train/test tasks whose fields equal these, e.g. {"hops": 2}
    credit: str = "outcome"  # a method of course_lib.credit.CREDIT_METHODS: "outcome" (GRPO), "gigpo", "turn", "critic"
    credit_options: dict[str, Any] | None = None  # more options of the credit method, e.g. {"scale": "none"}
    reward: str = "verifier"  # "verifier" (env reward), "judge" (course_lib.judge.scoring), "mix" of the two
    mix_weight: float = 0.5  # reward="mix": weight of the judge score, 1 − weight on the verifier
    rubric: str | None = None  # judge rubric (None: the judge's default)
    judge_method: str = "group"  # "group" (score_group, score_turns) or "pointwise" (P(yes): score_pointwise...)
    judge_reference: bool = False  # group judge: show the task's reference answer (info["reference"]) if it has one
    unfinished_reward: float | None = None  # an episode cut at a limit gets this, whatever the judge says (None: no rule)
    turn_reward: str = "process"  # methods that read turn rewards: "process" (turn_reward_fn) or "judge" (score_turns)
    turn_weight: float = 0.5  # credit="turn": A = A_outcome + turn_weight · A_turn
    gamma: float = 0.95  # GiGPO / turn credit discount of step returns (GiGPO's published γ)
    omega: float = 1.0  # GiGPO: A = A_episode + ω · A_step
    similarity: float | None = None  # GiGPO: text-anchor similarity threshold (None: exact match)
    gae_gamma: float = 1.0  # critic: GAE discount over turns
    gae_lambda: float = 0.95  # critic: GAE λ
    value_lr: float = 1e-3  # critic: learning rate of the value head
    value_coef: float = 0.5  # critic: weight of the value loss
    value_clip: float = 0.2  # critic: PPO value clipping range
    value_trains_backbone: bool = False  # critic: let the value loss's gradient into the policy's layers (off: the head alone)
    ppo_epochs: int = 1  # updates per rollout batch (>1 uses the sampling log-probs as ℓ_old, see `update`)
    sample_dtype: str = "float32"  # rollouts sample from the trained weights, or from a "bfloat16" copy of them
    lr: float = 2e-5  # AdamW learning rate of the policy
    weight_decay: float = 0.0  # AdamW weight decay
    max_grad_norm: float = 1.0  # gradient clipping
    loss_type: str = "dapo"  # policy_loss normalisation: "dapo", "bnpo", "grpo", "dr_grpo"
    eps_low: float = 0.2  # clip range below 1
    eps_high: float | None = None  # clip range above 1 (None: eps_low)
    beta: float = 0.0  # KL penalty to the starting model (>0 loads a frozen reference copy)
    token_budget: int = 2048  # padded tokens per micro-batch (gradient accumulation over micro-batches)
    bf16_autocast: bool | None = None  # bf16 autocast for forward passes (None: on for CPU, the model's choice on GPU)
    max_context: int = 1024  # an episode stops when its context would exceed this
    eval_every: int = 5  # held-out greedy evaluation every this many steps (0: only at the end)
    eval_tasks: int = 32  # held-out test tasks per evaluation (0: no evaluation)
    checkpoint_every: int = 5  # checkpoint every this many steps (and at the end)
    seed: int = 0  # seeds task sampling, rollouts and torch
    device: str | None = None  # "cpu", "cuda" or None (auto)
    progress: bool = True  # tqdm progress bars
    max_bad_updates: int = 3  # stop after this many NaN/inf updates in a row

    def to_json(self) -> dict[str, Any]:  # the config as JSON-ready data
        return dataclasses.asdict(self)

    def credit_option_values(self) -> dict[str, Any]:
        """The options this config gives the credit method: every field that some method takes (gamma,
        omega, turn_weight, gae_lambda...), then `credit_options`."""
        fields = {f.name for f in dataclasses.fields(self)}
        return {**{k: getattr(self, k) for k in credit.credit_options() if k in fields}, **(self.credit_options or {})}


@dataclass(frozen=True)
class Hooks:
    """The Python objects of a run, given to `train()` beside its config (see `train`)."""

    reward_fn: Callable[[Trajectory], float] | None = None  # replaces the verifier's reward (shaping, tests)
    turn_reward_fn: Callable[[Trajectory], list[float]] | None = None  # None: credit.process_rewards
    judge: Any = None  # the judge backend (reward="judge"/"mix", turn_reward="judge")
    loss_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None  # testing: (step, loss) -> loss


@dataclass
class Batch:
    """What one RL step trains on, and what it left out and why."""

    trajectories: list[Trajectory]  # the trained trajectories, group by group
    advantages: list[torch.Tensor]  # their per-token advantages
    # reason -> ids of the groups left out: "judge_failed" (the group judging failed), "turn_judge_failed" (a
    # turn judging of one of its trajectories failed), "no_signal" (the method's rule, `credit.groups_to_train`)
    skipped: dict[str, list]
    old_values: list[torch.Tensor] | None = None  # per-turn V(s_t), when the credit method learns values
    returns: list[torch.Tensor] | None = None  # ... and V's targets
    stats: dict[str, Any] = field(default_factory=dict)  # the credit method's diagnostics
    metrics: dict[str, Any] = field(default_factory=dict)  # the step's metrics row


# ------------------------------------------------------------------------------------------------------
# rewards
# ------------------------------------------------------------------------------------------------------


def _judge_module(name: str = "scoring"):  # imported on first use: a run without a judge never needs it
    try:
        judge = __import__(f"course_lib.judge.{name}", fromlist=[name])  # the module itself, not the package
    except ImportError as exc:
        raise RuntimeError(f"reward='judge'/'mix' and turn_reward='judge' need course_lib.judge.scoring, which did not "
                           f"import ({exc}); use reward='verifier' or install the judge's dependencies") from exc
    return judge


def assign_rewards(groups: list[TrajectoryGroup], config: TrainConfig, hooks: Hooks = Hooks()
                   ) -> tuple[list, dict[str, float]]:
    """Set each trajectory's training reward (and its last step's) from the verifier (or `reward_fn`),
    the judge, or a mix of the two; then `unfinished_reward`, if set, for episodes cut at a limit. Returns
    (the ids of the groups whose judging failed, the judge's metrics for the step's row; empty without one).
    A failed judging is reported, never turned into rewards: the step skips that group. The verifier's
    reward is kept in `info["verifier_reward"]`, so success is always measured by it."""
    for g in groups:
        for t in g:
            t.info["verifier_reward"] = t.reward
            if hooks.reward_fn is not None:
                _set_reward(t, float(hooks.reward_fn(t)))
    failed, metrics = [], None
    if config.reward != "verifier":
        judge = _judge_module()
        score_fn = judge.score_pointwise if config.judge_method == "pointwise" else judge.score_group
        metrics, w = judge.JudgeMetrics(), 1.0 if config.reward == "judge" else config.mix_weight
        for g in groups:
            kwargs = {"judge": hooks.judge, "metrics": metrics, **({"rubric": config.rubric} if config.rubric else {})}
            if config.judge_reference and config.judge_method == "group":
                kwargs["reference"] = g.trajectories[0].info.get("reference")
            judged = score_fn(g.trajectories, **kwargs)
            if any(s.failed for s in judged):
                failed.append(g.group_id)
                continue
            for t, s in zip(g, judged):
                _set_reward(t, w * float(s.score) + (1 - w) * t.reward)
    if config.unfinished_reward is not None:  # a hard rule outside the judge: an episode cut at a limit
        for t in (t for g in groups for t in g if t.unfinished):
            _set_reward(t, config.unfinished_reward)
    return failed, metrics.as_row() if metrics else {}


def _set_reward(trajectory: Trajectory, reward: float) -> None:
    """The trajectory's reward is also its last step's (GiGPO sums step rewards)."""
    trajectory.reward = reward
    if trajectory.steps:
        trajectory.steps[-1].reward = reward


def turn_rewards(trajectory: Trajectory, config: TrainConfig, hooks: Hooks = Hooks()) -> tuple[list[float], bool]:
    """Per-turn rewards r_t (not including the final reward), and whether the turn judging failed.

    turn_reward="judge": the judge's score of every turn; when it fails, every r_t is NaN and the step
    skips the trajectory's group (a failed judging is never scored 0). Else `turn_reward_fn`, by default
    the process reward (`credit.process_rewards`).
    """
    if config.turn_reward == "judge":
        judge = _judge_module("turns")
        score_fn = judge.score_turns_pointwise if config.judge_method == "pointwise" else judge.score_turns
        scores = score_fn(trajectory, judge=hooks.judge)
        rewards, failed = list(scores), scores.failed
    else:
        rewards, failed = list((hooks.turn_reward_fn or default_turn_reward)(trajectory)), False
    if len(rewards) != trajectory.num_turns:
        raise ValueError(f"the turn reward gave {len(rewards)} values for {trajectory.num_turns} turns")
    return rewards, failed


@torch.no_grad()
def turn_values(model, value_head, trajs: list[Trajectory], *, token_budget: int, device,
                autocast_dtype) -> list[torch.Tensor]:
    """V(s_t) of every turn of every trajectory: the value head on the decoder's hidden state at
    `state_positions` (no output layer), in length-packed micro-batches."""
    values: list[torch.Tensor] = [torch.zeros(0)] * len(trajs)
    for rows in pack_by_length([len(t.token_ids) for t in trajs], token_budget):
        batch = collate([trajs[i] for i in rows])
        with autocast_context(device, autocast_dtype):
            hidden = hidden_states(model, batch, device)
        positions = pad([state_positions(trajs[i]) for i in rows], -1, torch.long).to(device)
        v = value_head(hidden, positions).float().cpu()
        for j, i in enumerate(rows):
            values[i] = v[j, : trajs[i].num_turns]
    return values


# ------------------------------------------------------------------------------------------------------
# the batch: turn rewards, advantages, and what is skipped (one place)
# ------------------------------------------------------------------------------------------------------


def make_batch(groups: list[TrajectoryGroup], judge_failed: list, config: TrainConfig, hooks: Hooks = Hooks(),
               values_of: Callable[[list[Trajectory]], list[torch.Tensor]] | None = None) -> Batch:
    """The trajectories the update trains on and their per-token advantages, from rewarded groups.

    In order: groups whose judging failed (`judge_failed`) are left out; turn rewards are computed once,
    when the credit method reads them, and a group with a failed turn judging is left out; values come
    from `values_of` when the method reads them; `credit.advantages` computes every advantage; the
    method's rule (`credit.groups_to_train`) leaves out groups without signal. Each left-out group is
    named in `Batch.skipped` under its reason.
    """
    method = credit.credit_method_named(config.credit)
    skipped: dict[str, list] = {"judge_failed": list(judge_failed), "turn_judge_failed": [], "no_signal": []}
    usable = [g for g in groups if g.group_id not in set(judge_failed)]
    per_turn = None
    if "turn_rewards" in method.needs:
        scored = {t.traj_id: turn_rewards(t, config, hooks) for g in usable for t in g}
        skipped["turn_judge_failed"] = [g.group_id for g in usable if any(scored[t.traj_id][1] for t in g)]
        usable = [g for g in usable if g.group_id not in set(skipped["turn_judge_failed"])]
        per_turn = [scored[t.traj_id][0] for g in usable for t in g]
    trajs = [t for g in usable for t in g]
    if not trajs:
        return Batch([], [], skipped)
    if "values" in method.needs and values_of is None:
        raise ValueError(f"credit {config.credit!r} reads values: pass values_of (e.g. `turn_values` with a value head)")
    values = values_of(trajs) if "values" in method.needs else None
    inputs = CreditInputs.of(trajs, turn_rewards=per_turn, values=values)
    result = credit.advantages(config.credit, inputs, **config.credit_option_values())
    kept = set(credit.groups_to_train(config.credit, inputs, result))
    skipped["no_signal"] = [g.group_id for g in usable if g.group_id not in kept]
    rows = [i for i, t in enumerate(trajs) if t.group_id in kept]
    tokens = [credit.to_tokens(result.advantages[i], trajs[i].turn_index, trajs[i].loss_mask) for i in rows]
    learns_values = result.returns is not None and values is not None
    return Batch([trajs[i] for i in rows], tokens, skipped,
                 old_values=[values[i] for i in rows] if learns_values else None,
                 returns=[result.returns[i] for i in rows] if learns_values else None, stats=result.stats)


# ------------------------------------------------------------------------------------------------------
# the update: micro-batches, gradient accumulation, PPO epochs, NaN guard
# ------------------------------------------------------------------------------------------------------


def _value_loss(value_head, hidden, positions, old_values, returns, n_turns: int, clip: float) -> torch.Tensor:
    """This micro-batch's clipped value loss, weighted by its share of the batch's turns: the sum over
    micro-batches is the mean over all turns, whatever the packing."""
    turn_mask, device = (positions >= 0).float(), positions.device
    v_loss = value_loss(value_head(hidden, positions).float(), pad([v.tolist() for v in old_values], 0.0,
                        torch.float32).to(device), pad([r.tolist() for r in returns], 0.0, torch.float32).to(device),
                        clip=clip, mask=turn_mask)
    return v_loss * turn_mask.sum() / n_turns


def update(model, value_head, optimizer, trajs: list[Trajectory], advantages: list[torch.Tensor],
           config: TrainConfig, step: int, *, device, autocast_dtype, ref_model=None,
           old_values: list[torch.Tensor] | None = None, returns: list[torch.Tensor] | None = None,
           loss_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None) -> dict:
    """`ppo_epochs` optimizer steps over the batch, each accumulating gradients over length-bucketed
    micro-batches. Returns the update's metrics; `nonfinite` is True when a NaN/inf loss or gradient
    made it skip an optimizer step (that epoch and the ones after it); `epochs_stepped` counts the
    optimizer steps taken before that, `ppo_epochs` when all went well."""
    critic = value_head is not None
    batches = pack_by_length([len(t.token_ids) for t in trajs], config.token_budget)
    n_items, n_turns = sum(t.num_model_tokens for t in trajs), sum(t.num_turns for t in trajs)
    # dr_grpo divides by a constant (B × the longest possible completion), not by this batch's longest.
    max_completion = config.max_turns * config.max_new_tokens
    real = sum(len(t.token_ids) for t in trajs)
    padded = sum(len(rows) * max(len(trajs[i].token_ids) for i in rows) for rows in batches)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    scale = loss_scale(autocast_dtype)
    sums: Counter = Counter()
    out = {"micro_batches": len(batches), "padding_fraction": 1 - real / padded, "train_tokens": real,
           "nonfinite": False, "epochs_stepped": 0}
    old_from_sampler, first_epoch = config.ppo_epochs > 1 and config.sample_dtype == "float32", {}
    model.train()
    t0 = time.perf_counter()
    for epoch in range(config.ppo_epochs):
        optimizer.zero_grad(set_to_none=True)
        total_loss = 0.0
        for j, rows in enumerate(batches):
            batch = collate([trajs[i] for i in rows], [advantages[i] for i in rows])
            logprobs, logits, hidden = forward_logprobs(model, batch, device, autocast_dtype, config.temperature,
                                                        need_hidden=critic)
            # ℓ_old: one epoch, ℓ detached (TRL's on-policy default, w = 1); more, the sampling log-probs, or with a
            # bf16 sampler the first epoch's ℓ (the master weights before this update: no bf16 log-prob in the ratio).
            old = batch["old_logprobs"].to(device) if old_from_sampler else first_epoch.setdefault(j, logprobs.detach())
            ref = None
            if ref_model is not None:
                with torch.no_grad():
                    ref = forward_logprobs(ref_model, batch, device, autocast_dtype, config.temperature)[0]
            loss_type, share = micro_batch_loss(config.loss_type, len(rows), len(trajs))
            loss, stats = policy_loss(logprobs, old, batch["advantages"].to(device), batch["loss_mask"].to(device),
                                      loss_type=loss_type, eps_low=config.eps_low, eps_high=config.eps_high, ref_logprobs=ref,
                                      beta=config.beta, max_completion_length=max_completion, num_items_in_batch=n_items)
            loss = loss * share
            if critic:
                positions = pad([state_positions(trajs[i]) for i in rows], -1, torch.long).to(device)
                features = hidden if config.value_trains_backbone else hidden.detach()  # why: value_head.ValueHead
                v_loss = _value_loss(value_head, features, positions, [old_values[i] for i in rows],
                                     [returns[i] for i in rows], n_turns, config.value_clip)
                loss = loss + config.value_coef * v_loss
                sums["value_loss"] += v_loss.item() if epoch == 0 else 0.0
            if loss_hook is not None:
                loss = loss_hook(step, loss)
            (loss * scale).backward()
            total_loss += loss.item()
            if epoch == 0:
                weight = stats["tokens"] / max(1, n_items)
                for key in ("clip_fraction_region", "ratio_mean", "kl"):
                    if key in stats:
                        sums[key] += stats[key] * weight
                sums["entropy"] += entropy(logits.detach()) * weight
                sums["sampler_logprob_gap"] += sampler_gap(batch, logprobs) / max(1, n_items)
        unscale_gradients(params, scale)
        grad_norm, *head_norm = [float(torch.nn.utils.clip_grad_norm_(g["params"], config.max_grad_norm))
                                 for g in optimizer.param_groups]  # apart: V's norm must not shrink π's step
        if not (math.isfinite(total_loss) and all(map(math.isfinite, [grad_norm, *head_norm]))):
            optimizer.zero_grad(set_to_none=True)  # skip: one bad batch must not poison the weights
            out["nonfinite"] = True
            break
        optimizer.step()
        out["epochs_stepped"] += 1
    model.eval()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)  # the last optimizer step is queued, not done, until this returns
    seconds = time.perf_counter() - t0
    out.update({"loss": total_loss, "grad_norm": grad_norm, **dict(sums), "seconds_update": seconds,
                "tokens_per_s": real * config.ppo_epochs / seconds, **({"value_grad_norm": head_norm[0]} if head_norm else {})})
    return out


# ------------------------------------------------------------------------------------------------------
# the RL loop
# ------------------------------------------------------------------------------------------------------


def _check(config: TrainConfig, judge: Any = None) -> None:  # wrong names and settings, before anything loads
    credit.credit_method_named(config.credit)
    unknown = sorted(set(config.credit_options or {}) - credit.credit_options())
    if unknown:
        raise ValueError(f"credit_options {unknown} are not options of any credit method; options are: "
                         f"{', '.join(sorted(credit.credit_options()))}")
    if config.reward not in REWARDS:
        raise ValueError(f"reward {config.reward!r} is not known; choose one of {', '.join(REWARDS)}")
    if not config.temperature > 0:
        raise ValueError(f"temperature must be > 0 for training (the loss divides the logits by it), "
                         f"got {config.temperature}")
    if config.turn_reward not in ("process", "judge"):
        raise ValueError(f"turn_reward must be 'process' or 'judge', got {config.turn_reward!r}")
    if config.judge_method not in ("group", "pointwise"):
        raise ValueError(f"judge_method must be 'group' or 'pointwise', got {config.judge_method!r}")
    for name, value in (("reward", config.reward), ("turn_reward", config.turn_reward)):
        if value in ("judge", "mix") and judge is None:  # else it fails only in the first step
            raise ValueError(f"{name}={value!r} needs a judge backend and there is no default one: pass "
                             "judge= to train(), e.g. course_lib.judge.backends.LocalJudge() with judge_method='pointwise' "
                             "(the embedded model) or OpenAIJudge(base_url=...) (a served one)")


def config_tasks(config: TrainConfig) -> tuple[list[dict], list[dict]]:
    """(training tasks, held-out evaluation tasks) of a run; a wrong env name or filter raises ValueError."""
    train_tasks = filter_tasks(load_tasks(config.env, "train"), config.task_filter)
    return train_tasks, filter_tasks(load_tasks(config.env, "test"), config.task_filter)[: config.eval_tasks]


def _batch_metrics(groups: list[TrajectoryGroup], batch: Batch) -> dict[str, Any]:  # rewards, what was skipped
    all_trajs = [t for g in groups for t in g]
    judged = [g for g in groups if g.group_id not in set(batch.skipped["judge_failed"])]
    row = {"reward": sum(t.reward for t in all_trajs) / len(all_trajs),
           "success": sum(t.info["verifier_reward"] > 0.5 for t in all_trajs) / len(all_trajs),
           "turns": sum(t.num_turns for t in all_trajs) / len(all_trajs),
           "unfinished": sum(t.unfinished for t in all_trajs) / len(all_trajs), **flag_rates(all_trajs),
           "equal_reward_groups": sum(len(set(g.rewards)) <= 1 for g in judged),
           "judge_failed_groups": len(batch.skipped["judge_failed"]) + len(batch.skipped["turn_judge_failed"]),
           "skipped_groups": sum(len(ids) for ids in batch.skipped.values()), **batch.stats}
    if batch.trajectories:
        flat = torch.cat([a[torch.tensor(t.loss_mask, dtype=torch.bool)]
                          for a, t in zip(batch.advantages, batch.trajectories)])
        row.update({"advantage_mean": flat.mean().item(),
                    "advantage_std": flat.std().item() if len(flat) > 1 else 0.0})
    return row


def rl_step(step: int, model, tokenizer, value_head, optimizer, train_tasks: list[dict], config: TrainConfig,
            *, device, autocast_dtype, ref_model=None, interrupt: DeferredInterrupt | None = None,
            hooks: Hooks = Hooks(), sampler=None) -> Batch:
    """One RL step: rollout -> reward -> advantages -> update. Returns its batch, with the step's metrics
    row in `batch.metrics`.

    With `interrupt`, a Ctrl+C during the update is held until it is done (rollouts stay interruptible at
    once: they change no weights). `sampler`: a `kv_cache.sampling_copy` the rollouts sample from, synced."""
    rng = random.Random(config.seed * 1_000_003 + step)  # tasks depend only on (seed, step): resumable
    tasks = rng.sample(train_tasks, min(config.tasks_per_step, len(train_tasks)))
    stats = RolloutStats()
    t0 = time.perf_counter()
    groups = rollout(synced(sampler, model), tokenizer, config.env, tasks, group_size=config.group_size,
                     max_turns=config.max_turns, max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                     seed=config.seed * 100_000 + step, max_context=config.max_context, progress=False, stats=stats)
    row: dict[str, Any] = {"step": step, "kind": "train", "seconds_rollout": time.perf_counter() - t0,
                           "generated_tokens": stats.new_tokens, "seconds_generate": stats.generate_seconds,
                           "generate_tokens_per_s": stats.new_tokens / max(stats.generate_seconds, 1e-9)}
    t0 = time.perf_counter()
    judge_failed, judge_row = assign_rewards(groups, config, hooks)
    row.update({**judge_row, "seconds_reward": time.perf_counter() - t0})
    t0 = time.perf_counter()

    def values_of(trajs: list[Trajectory]) -> list[torch.Tensor]:
        return turn_values(model, value_head, trajs, token_budget=config.token_budget, device=device,
                           autocast_dtype=autocast_dtype)

    batch = make_batch(groups, judge_failed, config, hooks, values_of=values_of)
    row.update({**_batch_metrics(groups, batch), "seconds_advantage": time.perf_counter() - t0})
    batch.metrics = row
    if not batch.trajectories:
        row.update({"nonfinite": False, "skipped_update": True})
        return batch
    with interrupt.hold() if interrupt is not None else contextlib.nullcontext():
        row.update(update(model, value_head, optimizer, batch.trajectories, batch.advantages, config, step,
                          device=device, autocast_dtype=autocast_dtype, ref_model=ref_model,
                          old_values=batch.old_values, returns=batch.returns, loss_hook=hooks.loss_hook))
    return batch


@dataclass
class _Run:  # a loaded run: the model and what trains it, and the step it resumes after
    model: Any
    tokenizer: Any
    device: torch.device
    autocast_dtype: torch.dtype | None
    value_head: ValueHead | None
    optimizer: torch.optim.Optimizer
    start: int
    ref_model: Any = None


def _load_run(config: TrainConfig, run_dir: Path, metrics_path: Path) -> _Run:
    """Load the model (from the checkpoint when resuming), its value head and optimizer, and restore the
    checkpoint's state; a fresh run starts an empty metrics file."""
    checkpoint = find_checkpoint(run_dir)
    model, tokenizer = load_policy(str(checkpoint / "model") if checkpoint else config.model, device=config.device)
    device = next(model.parameters()).device
    autocast_dtype = torch.bfloat16 if use_bf16(config.bf16_autocast, device) else model.course_autocast
    # Generation keeps the model's own choice: at decoding batch sizes bf16 autocast on a CPU costs more
    # in casts than it saves in matmuls (measured slower); the training forward/backward uses it.
    learns_values = "values" in credit.credit_method_named(config.credit).needs
    value_head = ValueHead(model.config.hidden_size).to(device) if learns_values else None
    param_groups = [{"params": list(model.parameters()), "lr": config.lr}]
    if value_head is not None:
        param_groups.append({"params": list(value_head.parameters()), "lr": config.value_lr})
    optimizer = torch.optim.AdamW(param_groups, weight_decay=config.weight_decay)
    torch.manual_seed(config.seed)
    start = 0
    if checkpoint:
        start = restore_checkpoint(checkpoint, optimizer, value_head)
        truncate_metrics(metrics_path, start)
        print(f"Resuming {run_dir} from step {start}.")
    else:
        metrics_path.write_text("")
    return _Run(model, tokenizer, device, autocast_dtype, value_head, optimizer, start)


def train(config: TrainConfig, *, judge: Any = None, reward_fn: Callable[[Trajectory], float] | None = None,
          turn_reward_fn: Callable[[Trajectory], list[float]] | None = None,
          loss_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None) -> dict:
    """Run (or resume) an RL run; returns {"step", "eval", "run_dir", "interrupted"}.

    judge: the judge backend (reward="judge"/"mix" or turn_reward="judge"); reward_fn: a reward replacing
    the verifier's; turn_reward_fn: per-turn rewards (None: the process reward); loss_hook: testing.
    Metrics rows go to run_dir/metrics.jsonl: kind "train" (one per step) and kind "eval" (held-out
    greedy success with its 95% Wilson interval, at step 0, every `eval_every` steps and at the end).
    """
    hooks = Hooks(reward_fn=reward_fn, turn_reward_fn=turn_reward_fn, judge=judge, loss_hook=loss_hook)
    _check(config, judge)
    train_tasks, test_tasks = config_tasks(config)  # before the model loads: a bad name or filter fails at once
    run_dir, metrics_path = Path(config.run_dir), Path(config.run_dir) / "metrics.jsonl"
    run_dir.mkdir(parents=True, exist_ok=True)
    run = _load_run(config, run_dir, metrics_path)
    (run_dir / "config.json").write_text(json.dumps(config.to_json(), indent=1))
    if run.start < config.steps:
        check_disk_for_checkpoint(run_dir, run.model, run.value_head)
    run.ref_model = load_policy(config.model, device=config.device)[0] if config.beta > 0 else None
    sampler = sampling_copy(run.model, config.sample_dtype)

    def run_eval(step: int) -> dict:
        t0 = time.perf_counter()
        result = evaluate(run.model, config.env, tokenizer=run.tokenizer, tasks=test_tasks, max_turns=config.max_turns,
                          max_new_tokens=config.max_new_tokens, max_context=config.max_context)
        row = {"step": step, "kind": "eval", **result, "seconds_eval": time.perf_counter() - t0}
        log_metrics(metrics_path, row)
        return row

    logged = read_metrics(run_dir)
    last_eval = next((r for r in reversed(logged) if r["kind"] == "eval"), None)
    if run.start == 0 and last_eval is None and config.eval_every > 0 and config.eval_tasks > 0:
        last_eval = run_eval(0)  # not again when resuming from a checkpoint saved at step 0 (Ctrl+C in step 1)
    step, bad_in_a_row, interrupted = run.start, nonfinite_in_a_row(logged), False
    held = DeferredInterrupt()
    bar = tqdm(range(run.start + 1, config.steps + 1), desc=f"RL {config.credit}", disable=not config.progress,
               initial=run.start, total=config.steps)

    def save(at: int) -> None:
        save_checkpoint(run_dir, run.model, run.tokenizer, run.optimizer, run.value_head, at, config.to_json())

    try:
        for next_step in bar:
            row = rl_step(next_step, run.model, run.tokenizer, run.value_head, run.optimizer, train_tasks, config,
                          device=run.device, autocast_dtype=run.autocast_dtype, ref_model=run.ref_model,
                          interrupt=held, hooks=hooks, sampler=sampler).metrics
            log_metrics(metrics_path, row)
            step = next_step
            bad_in_a_row = _after_update(row, step, bad_in_a_row, config)
            bar.set_postfix(reward=f"{row['reward']:.2f}", success=f"{row['success']:.2f}")
            if held.pending:  # Ctrl+C came during this step's update: the step is done, save it and stop
                raise KeyboardInterrupt
            eval_due = step == config.steps or (config.eval_every > 0 and step % config.eval_every == 0)
            if eval_due and config.eval_tasks > 0:
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


def _after_update(row: dict, step: int, bad_in_a_row: int, config: TrainConfig) -> int:
    """NaN/inf updates in a row after this step; says what happened, stops the run at `max_bad_updates`."""
    bad_in_a_row = bad_in_a_row + 1 if row["nonfinite"] else 0
    if row["nonfinite"]:
        done = (f"update stopped after {row['epochs_stepped']} of {config.ppo_epochs} PPO epochs"
                if row["epochs_stepped"] else "update skipped")
        print(f"step {step}: NaN/inf in the loss or the gradients; {done} ({bad_in_a_row} in a row)")
    if bad_in_a_row >= config.max_bad_updates:
        raise RuntimeError(f"{bad_in_a_row} updates in a row had a NaN/inf loss or gradient (last at step {step}); "
                           "stopping. Lower the learning rate, turn off bf16 autocast, or check the rewards.")
    return bad_in_a_row
