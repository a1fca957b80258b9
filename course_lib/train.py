"""Training: the supervised warm start (notebook 03) and the RL loop (notebooks 05 to 09).

One RL step is the loop of the whole course:

    rollout (a group of episodes per task)  ->  reward (verifier, judge or a mix)
        ->  advantages (credit: "outcome", "gigpo", "turn" or "critic")  ->  update (masked policy loss)

Everything a run produces lives in its run directory: `metrics.jsonl` (one row per step, plus eval
rows), `checkpoint/` (model, optimizer, value head, step, RNG states, config; written atomically), and
`config.json`. Calling `train(config)` again on the same run directory resumes after the last
checkpoint, so no step is lost or repeated; Ctrl+C saves a checkpoint before it stops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from course_lib.credit import (
    ValueHead,
    broadcast_to_tokens,
    gae,
    gigpo_advantages,
    outcome_advantages,
    step_group_sizes,
    turn_advantages,
    value_loss,
)
from course_lib.envs import load_tasks
from course_lib.losses import policy_loss, sft_loss
from course_lib.models import autocast_context, load_policy
from course_lib.rollout import RolloutStats, expert_rollout, rollout
from course_lib.trajectory import Trajectory, TrajectoryGroup

CREDITS = ("outcome", "gigpo", "turn", "critic")
REWARDS = ("verifier", "judge", "mix")


def runs_dir() -> Path:
    """Where runs live: $COURSE_RUNS, else the repository's `runs/` folder (ignored by git)."""
    return Path(os.environ.get("COURSE_RUNS", Path(__file__).resolve().parents[1] / "runs"))


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a success rate: better than p ± 1.96·sqrt(p(1−p)/n) near 0 and 1."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def default_turn_reward(trajectory: Trajectory) -> list[float]:
    """A simple process reward, one per turn: −0.1 for a malformed action or a tool error, else 0.

    It reads only what the environment reported (the action kind and an observation starting with
    "Error"), so it cannot be gamed by the wording of an action; it rewards well-formed tool use, never
    the outcome (the verifier's reward stays in charge of that).
    """
    rewards = []
    for step in trajectory.steps:
        bad = step.info.get("action_kind") == "malformed" or step.observation_text.startswith("Error")
        rewards.append(-0.1 if bad else 0.0)
    return rewards


@dataclass
class TrainConfig:
    """Everything one RL run needs. Defaults: a small outcome-credit run on search_qa on a CPU."""

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
    credit: str = "outcome"  # "outcome" (GRPO), "gigpo", "turn" (process/judge turn rewards), "critic" (GAE)
    reward: str = "verifier"  # "verifier" (env reward), "judge" (course_lib.judge), "mix" of the two
    mix_weight: float = 0.5  # reward="mix": weight of the judge score, 1 − weight on the verifier
    reward_fn: Callable[[Trajectory], float] | None = None  # custom reward replacing the verifier's (shaping, tests)
    judge: Any = None  # judge backend (course_lib.judge.LocalJudge...); no default: judge rewards need one set
    rubric: str | None = None  # judge rubric (None: the judge's default)
    turn_reward: str = "process"  # credit="turn"/"critic": "process" (turn_reward_fn) or "judge" (score_turns)
    turn_reward_fn: Callable[[Trajectory], list[float]] | None = None  # per-turn rewards; None: default_turn_reward
    turn_weight: float = 0.5  # credit="turn": A = A_outcome + turn_weight · A_turn
    gamma: float = 0.95  # GiGPO / turn credit discount of step returns (GiGPO's published γ)
    omega: float = 1.0  # GiGPO: A = A_episode + ω · A_step
    similarity: float | None = None  # GiGPO: text-anchor similarity threshold (None: exact match)
    gae_gamma: float = 1.0  # critic: GAE discount over turns
    gae_lambda: float = 0.95  # critic: GAE λ
    value_lr: float = 1e-3  # critic: learning rate of the value head
    value_coef: float = 0.5  # critic: weight of the value loss
    value_clip: float = 0.2  # critic: PPO value clipping range
    ppo_epochs: int = 1  # updates per rollout batch (>1 uses the sampling log-probs as ℓ_old)
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
    loss_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None  # testing: (step, loss) -> loss

    def to_json(self) -> dict[str, Any]:
        """The config as JSON (callables become their names)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if callable(value):
                value = getattr(value, "__name__", repr(value))
            elif f.name == "judge" and value is not None:
                value = getattr(value, "name", repr(value))  # a backend object: its name
            out[f.name] = value
        return out


# ------------------------------------------------------------------------------------------------------
# batches: padding, length bucketing, forward passes
# ------------------------------------------------------------------------------------------------------


def pack_by_length(lengths: list[int], token_budget: int) -> list[list[int]]:
    """Micro-batches of row indices: sort by length (longest first), pack while rows × longest ≤ budget.

    Rows of similar length share a micro-batch, so right padding stays small. A row longer than the
    budget gets a micro-batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= token_budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _pad(rows: list[list], value, dtype) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out


def collate(trajectories: list[Trajectory], token_advantages: list[torch.Tensor] | None = None) -> dict:
    """Right-padded tensors [B, T] of a micro-batch (padding has attention 0 and loss mask 0)."""
    batch = {
        "input_ids": _pad([t.token_ids for t in trajectories], 0, torch.long),
        "attention_mask": _pad([[1] * len(t.token_ids) for t in trajectories], 0, torch.long),
        "loss_mask": _pad([t.loss_mask for t in trajectories], 0, torch.float32),
        "old_logprobs": _pad([t.logprobs for t in trajectories], 0.0, torch.float32),
        "turn_index": _pad([t.turn_index for t in trajectories], -1, torch.long),
    }
    if token_advantages is not None:
        batch["advantages"] = _pad([a.tolist() for a in token_advantages], 0.0, torch.float32)
    return batch


def state_positions(trajectory: Trajectory) -> list[int]:
    """Where the value head reads V(s_t): the position just before the first sampled token of turn t.

    The hidden state there has read the whole context of turn t (prompt, earlier actions and
    observations) and nothing of the action a_t, so what it can predict is V(s_t). Read after the
    action, it would learn Q(s_t, a_t), and GAE's δ_t = r_t + γ·V(s_{t+1}) − V(s_t) would then average
    zero for every action, good or bad: no signal about which action was better.
    """
    first: dict[int, int] = {}
    for pos, (m, turn) in enumerate(zip(trajectory.loss_mask, trajectory.turn_index)):
        if m and turn not in first:
            first[turn] = pos - 1
    return [first.get(k, 0) for k in range(trajectory.num_turns)]


def _read_positions(trajectories: list[Trajectory]) -> torch.Tensor:
    """`state_positions` of a micro-batch, padded with -1 to [B, most turns]."""
    return _pad([state_positions(t) for t in trajectories], -1, torch.long)


def _forward(model, batch: dict, device, autocast_dtype, temperature: float, need_hidden: bool = False):
    """(log-probs [B, T] float32, logits [N, V], last hidden state [B, T, H] or None).

    Only the N positions that predict a model token (loss_mask[t] = 1, predicted from the hidden state
    at t − 1) go through the output layer: log π(token_t) = logit[token_t] − logsumexp(logit / τ) there
    (what `losses.token_logprobs` computes for every position),
    and 0 at every other position (the loss never reads those). In an agent's trajectory most tokens are
    prompt and observations, so this skips most of the 49k-wide output layer and its softmax.
    """
    ids = batch["input_ids"].to(device)
    predicting = batch["loss_mask"][:, 1:].to(device).bool()  # [B, T-1]: position t-1 predicts model token t
    with autocast_context(device, autocast_dtype):
        hidden = _hidden(model, batch, device)
        logits = model.get_output_embeddings()(hidden[:, :-1][predicting])  # [N, V]
    rows = logits.float() / temperature
    chosen = rows.gather(-1, ids[:, 1:][predicting].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(rows, dim=-1)
    logprobs = torch.zeros(ids.shape, dtype=torch.float32, device=device)
    logprobs = torch.cat([logprobs[:, :1], logprobs[:, 1:].masked_scatter(predicting, chosen)], dim=1)
    return logprobs, logits, hidden if need_hidden else None


def loss_scale(autocast_dtype: torch.dtype | None) -> float:
    """Static loss scale S: the backward pass runs on S · loss and the gradients are divided by S
    before clipping. S = 2^10 under fp16 autocast (a T4), 1 otherwise.

    fp16 flushes numbers below ~6e-8 to zero, and many of a language model's gradients are that small:
    on one SFT batch of the embedded model, fp16 autocast without scaling left 13.7% of the weight
    gradients at exactly 0 (0.18% with S = 2^10; S = 2^16 overflowed to inf). bf16 has fp32's exponent
    range and needs no scaling. A static S keeps resuming exact (no scaler state); an overflow shows as
    a non-finite gradient, and `update` and `sft_step` then skip the optimizer step.
    """
    return 2.0**10 if autocast_dtype == torch.float16 else 1.0


def _unscale(params, scale: float) -> None:
    if scale != 1.0:
        for p in params:
            if p.grad is not None:
                p.grad.div_(scale)


def _hidden(model, batch: dict, device) -> torch.Tensor:
    """The decoder's last hidden state [B, T, H] (the model without its output layer)."""
    return model.get_decoder()(input_ids=batch["input_ids"].to(device),
                               attention_mask=batch["attention_mask"].to(device)).last_hidden_state


@torch.no_grad()
def _entropy(logits: torch.Tensor) -> float:
    """Mean entropy of the policy (before temperature) over the rows of `logits` [N, V] (the predictions
    of the loss-masked tokens, as `_forward` returns them)."""
    if logits.numel() == 0:
        return 0.0
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(-(logp.exp() * logp).sum(-1).mean())


# ------------------------------------------------------------------------------------------------------
# supervised warm start
# ------------------------------------------------------------------------------------------------------


def sft_step(model, optimizer, trajectories: list[Trajectory], *, mask: str = "assistant",
             autocast_dtype: torch.dtype | None = None, max_grad_norm: float = 1.0,
             token_budget: int = 2048) -> dict[str, float]:
    """One supervised update on demonstrations; mask="assistant" trains on the model's turns only
    (the trajectory's `loss_mask`), mask="none" on every token (the ablation of notebook 03).

    The batch is cut into micro-batches of at most `token_budget` padded tokens (`pack_by_length`);
    each micro-batch's mean loss is weighted by its share of the trained tokens, so the accumulated
    gradient equals that of the whole batch's mean loss while memory stays bounded (long gridworld
    episodes at batch 8 would otherwise hold tens of GB of activations).
    """
    if mask not in ("assistant", "none"):
        raise ValueError(f"mask must be 'assistant' or 'none', got {mask!r}")
    device = next(model.parameters()).device

    def trained(t: Trajectory) -> int:  # targets are positions 1..T-1
        return sum(t.loss_mask[1:]) if mask == "assistant" else len(t.token_ids) - 1

    total = sum(trained(t) for t in trajectories)
    if total == 0:
        raise ValueError("no trained tokens in this batch (empty loss mask)")
    model.train()
    optimizer.zero_grad(set_to_none=True)
    scale = loss_scale(autocast_dtype)
    sums = {"loss": 0.0, "accuracy": 0.0}
    for rows in pack_by_length([len(t.token_ids) for t in trajectories], token_budget):
        part = [trajectories[i] for i in rows]
        share = sum(trained(t) for t in part) / total
        if share == 0:
            continue
        batch = collate(part)
        with autocast_context(device, autocast_dtype):
            logits = model(input_ids=batch["input_ids"].to(device),
                           attention_mask=batch["attention_mask"].to(device)).logits
        loss_mask = batch["loss_mask"] if mask == "assistant" else None
        loss, stats = sft_loss(logits, batch["input_ids"].to(device),
                               None if loss_mask is None else loss_mask.to(device),
                               attention_mask=batch["attention_mask"].to(device))
        (loss * share * scale).backward()
        sums["loss"] += stats["loss"] * share
        sums["accuracy"] += stats["accuracy"] * share
        del logits, loss
    _unscale(model.parameters(), scale)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))
    skipped = not math.isfinite(grad_norm)
    if skipped:  # an fp16 overflow or a bad batch: leave the weights as they were
        optimizer.zero_grad(set_to_none=True)
    else:
        optimizer.step()
    model.eval()
    return {**sums, "tokens": float(total), "grad_norm": grad_norm, "skipped": skipped}


def filter_tasks(tasks: list[dict], task_filter: dict[str, Any] | None) -> list[dict]:
    """The tasks whose fields equal every key of `task_filter` (all of them when it is None or empty).

    A filter that is not a dict, or that leaves no task out of some, is an error: a typo in a key or a
    value (`{"hop": 2}`, `{"hops": "2"}`) would otherwise train or evaluate on nothing without a word."""
    if not task_filter:
        return tasks
    if not isinstance(task_filter, dict):
        raise ValueError(f"task_filter must be a dict of task fields and values, e.g. {{\"hops\": 2}}; got {task_filter!r}")
    kept = [t for t in tasks if all(t.get(k) == v for k, v in task_filter.items())]
    if tasks and not kept:
        fields = sorted({k for t in tasks for k in t})
        raise ValueError(f"no task matches task_filter {task_filter!r}; the tasks' fields are: {', '.join(fields)}")
    return kept


def _use_bf16(flag: bool | None, device: torch.device) -> bool:
    return device.type == "cpu" if flag is None else flag


def warm_start(env: str = "search_qa", *, model: str = "smollm2-135m", n_demos: int = 256, steps: int = 32,
               lr: float = 5e-5, batch_size: int = 8, run_dir: str | Path = "runs/warm_start/run",
               mask: str = "assistant", seed: int = 0, task_filter: dict[str, Any] | None = None,
               max_turns: int = 8, bf16_autocast: bool | None = None, device: str | None = None,
               tasks: list[dict] | None = None, progress: bool = True) -> Path:
    """Supervised warm start on expert demonstrations; saves a checkpoint that `load_policy(path)` reads.

    Demonstrations: the env's expert on `n_demos` training tasks (filtered by `task_filter`, e.g.
    {"hops": 1}, and shuffled), or on the first `n_demos` of `tasks` when given. Each step trains on `batch_size` demonstrations drawn in a seeded shuffled order.
    Writes sft_metrics.jsonl next to the model files. Returns the checkpoint folder.
    """
    torch.manual_seed(seed)
    run_dir = Path(run_dir)
    model_obj, tokenizer = load_policy(model, device=device)
    dev = next(model_obj.parameters()).device
    autocast_dtype = torch.bfloat16 if _use_bf16(bf16_autocast, dev) else model_obj.course_autocast
    if tasks is None:
        tasks = filter_tasks(load_tasks(env, "train"), task_filter)
        random.Random(seed).shuffle(tasks)
    demos = expert_rollout(tokenizer, env, tasks[:n_demos], max_turns=max_turns)
    optimizer = torch.optim.AdamW(model_obj.parameters(), lr=lr, weight_decay=0.0)
    rng = random.Random(seed + 1)
    order: list[int] = []
    rows = []
    for step in tqdm(range(1, steps + 1), desc="warm start", disable=not progress):
        if len(order) < batch_size:
            order += rng.sample(range(len(demos)), len(demos))
        picked, order = order[:batch_size], order[batch_size:]
        t0 = time.perf_counter()
        stats = sft_step(model_obj, optimizer, [demos[i] for i in picked], mask=mask, autocast_dtype=autocast_dtype)
        rows.append({"step": step, **stats, "seconds": time.perf_counter() - t0})
    _save_model(model_obj, tokenizer, run_dir)
    with (run_dir / "sft_metrics.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return run_dir


def _save_model(model, tokenizer, target: Path) -> None:
    """save_pretrained into a temporary folder, then rename: a half-written checkpoint is never seen."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".tmp-{target.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def ensure_warm_start(env: str = "search_qa", **options: Any) -> Path:
    """The warm-start checkpoint for these options, trained once and reused from
    `runs/warm_start/<env>-<hash of the options>` afterwards (what the notebooks call)."""
    options.pop("run_dir", None)
    key = json.dumps({"env": env, **{k: v for k, v in options.items() if k != "progress"}}, sort_keys=True)
    path = runs_dir() / "warm_start" / f"{env}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    if not (path / "config.json").exists():
        warm_start(env, run_dir=path, **options)
    return path


# ------------------------------------------------------------------------------------------------------
# evaluation
# ------------------------------------------------------------------------------------------------------


def evaluate(model_or_path, env: str, split: str = "test", n_tasks: int = 32, *, tokenizer=None,
             tasks: list[dict] | None = None, task_filter: dict[str, Any] | None = None, max_turns: int = 4,
             max_new_tokens: int = 48, max_context: int = 2048, batch_size: int = 32, progress: bool = False,
             device: str | None = None) -> dict[str, float]:
    """Greedy success rate on held-out tasks (one episode each), with a 95% Wilson interval.

    model_or_path: a model (then pass `tokenizer`) or anything `load_policy` accepts.
    Returns {"success", "ci_low", "ci_high", "n"}.
    """
    if tasks is None:  # before the model: a bad name or filter fails in a second, not after loading it
        if n_tasks < 1:
            raise ValueError(f"n_tasks must be at least 1, got {n_tasks}")
        tasks = filter_tasks(load_tasks(env, split), task_filter)[:n_tasks]
    if isinstance(model_or_path, (str, Path)):
        model, tokenizer = load_policy(str(model_or_path), device=device)
    else:
        model = model_or_path
        if tokenizer is None:
            raise ValueError("pass tokenizer=... together with a model object")
    wins = 0
    for start in range(0, len(tasks), batch_size):
        groups = rollout(model, tokenizer, env, tasks[start:start + batch_size], group_size=1,
                         max_turns=max_turns, max_new_tokens=max_new_tokens, temperature=0.0,
                         seed=0, max_context=max_context, progress=progress)
        wins += sum(t.success for g in groups for t in g)
    low, high = wilson_interval(wins, len(tasks))
    return {"success": wins / max(1, len(tasks)), "ci_low": low, "ci_high": high, "n": len(tasks)}


# ------------------------------------------------------------------------------------------------------
# rewards and advantages
# ------------------------------------------------------------------------------------------------------


def _judge_module():
    try:
        import course_lib.judge as judge
    except ImportError as exc:
        raise RuntimeError(
            f"reward='judge'/'mix' and turn_reward='judge' need course_lib.judge, which did not import ({exc}); "
            "use reward='verifier' or install the judge's dependencies"
        ) from exc
    return judge


def assign_rewards(groups: list[TrajectoryGroup], config: TrainConfig) -> None:
    """Set each trajectory's training reward (and its last step's) from the verifier (or `reward_fn`),
    the judge, or a mix of the two.

    The verifier's reward is kept in `info["verifier_reward"]`, so success is always measured by it.
    """
    for g in groups:
        for t in g:
            t.info["verifier_reward"] = t.reward
            if config.reward_fn is not None:
                _set_reward(t, float(config.reward_fn(t)))
    if config.reward == "verifier":
        return
    judge = _judge_module()
    for g in groups:
        kwargs = {"judge": config.judge}
        if config.rubric is not None:
            kwargs["rubric"] = config.rubric
        judged = judge.score_group(g.trajectories, **kwargs)
        if any(s.failed for s in judged):
            # A failed judge call is reported, never turned into rewards: the step skips this group.
            for t in g:
                t.info["judge_failed"] = True
            continue
        scores = [s.score for s in judged]
        for t, score in zip(g, scores):
            w = 1.0 if config.reward == "judge" else config.mix_weight
            _set_reward(t, w * float(score) + (1 - w) * t.reward)


def _set_reward(trajectory: Trajectory, reward: float) -> None:
    """The trajectory's reward is also its last step's (GiGPO sums step rewards)."""
    trajectory.reward = reward
    if trajectory.steps:
        trajectory.steps[-1].reward = reward


def turn_rewards(trajectory: Trajectory, config: TrainConfig) -> list[float]:
    """Per-turn process rewards r_t (not including the final reward).

    turn_reward="judge": when the judge fails, every r_t is NaN and `info["turn_judge_failed"]` is True;
    `rl_step` then skips the trajectory's group (a failed judging is never scored 0).
    """
    if config.turn_reward == "judge":
        scores = _judge_module().score_turns(trajectory, judge=config.judge)
        trajectory.info["turn_judge_failed"] = scores.failed
        rewards = list(scores)
    else:
        rewards = list((config.turn_reward_fn or default_turn_reward)(trajectory))
    if len(rewards) != trajectory.num_turns:
        raise ValueError(f"the turn reward gave {len(rewards)} values for {trajectory.num_turns} turns")
    return rewards


def token_advantages(trajs: list[Trajectory], config: TrainConfig, metrics: dict) -> list[torch.Tensor]:
    """One advantage per token of each trajectory (0 off the model's tokens), by the credit method."""
    group_ids = [t.group_id for t in trajs]
    if config.credit == "outcome":
        adv = outcome_advantages([t.reward for t in trajs], group_ids)
        return [_on_model_tokens(broadcast_to_tokens(a.repeat(max(1, t.num_turns)), torch.tensor(t.turn_index)), t)
                for a, t in zip(adv, trajs)]
    rows = [(t, k) for t in trajs for k in range(t.num_turns)]
    if config.credit == "gigpo":
        anchors = [t.steps[k].anchor for t, k in rows]
        row_groups = [t.group_id for t, _ in rows]
        per_row = gigpo_advantages([t.steps[k].reward for t, k in rows], anchors, row_groups,
                                   [t.traj_id for t, _ in rows], gamma=config.gamma, omega=config.omega,
                                   similarity=config.similarity)
        sizes = step_group_sizes(anchors, row_groups, similarity=config.similarity)
        metrics["step_group_sizes"] = dict(sorted(Counter(sizes).items()))
        metrics["step_group_size_mean"] = sum(sizes) / max(1, len(sizes))
    elif config.credit == "turn":
        process = {t.traj_id: turn_rewards(t, config) for t in trajs}
        per_row = turn_advantages([process[t.traj_id][k] for t, k in rows], [t.reward for t, _ in rows],
                                  [t.group_id for t, _ in rows], [t.traj_id for t, _ in rows],
                                  weight=config.turn_weight, gamma=config.gamma)
    else:
        raise ValueError(f"credit {config.credit!r} is not known; choose one of {', '.join(CREDITS)}")
    out, i = [], 0
    for t in trajs:
        out.append(_on_model_tokens(broadcast_to_tokens(per_row[i:i + t.num_turns], torch.tensor(t.turn_index)), t))
        i += t.num_turns
    return out


def _on_model_tokens(advantages: torch.Tensor, trajectory: Trajectory) -> torch.Tensor:
    """Zero on the tokens the model did not sample: a turn's observation and closing carry its turn index."""
    return advantages * torch.tensor(trajectory.loss_mask, dtype=advantages.dtype)


@torch.no_grad()
def critic_advantages(model, value_head, trajs: list[Trajectory], config: TrainConfig, device,
                      autocast_dtype) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """Turn-level GAE with the value head: per-token advantages, and per-turn old values and returns.

    Per-turn rewards: the process reward of each turn, plus the final reward on the last turn.
    Advantages are whitened over the batch (PPO's usual normalisation).
    """
    values: list[torch.Tensor] = [torch.zeros(0)] * len(trajs)
    for rows in pack_by_length([len(t.token_ids) for t in trajs], config.token_budget):
        batch = collate([trajs[i] for i in rows])
        with autocast_context(device, autocast_dtype):
            hidden = _hidden(model, batch, device)  # the values need no output layer
        positions = _read_positions([trajs[i] for i in rows]).to(device)
        v = value_head(hidden, positions).float().cpu()
        for j, i in enumerate(rows):
            values[i] = v[j, : trajs[i].num_turns]
    per_turn_adv, returns = [], []
    for t, v in zip(trajs, values):
        r = turn_rewards(t, config)
        r[-1] += t.reward
        a, ret = gae(r, v, gamma=config.gae_gamma, lam=config.gae_lambda)
        per_turn_adv.append(a)
        returns.append(ret)
    flat = torch.cat(per_turn_adv)
    flat = flat[flat.isfinite()]  # a failed turn judging (NaN, its group skipped) must not spread to the batch
    mean, std = flat.mean(), (flat.std() if len(flat) > 1 else torch.tensor(1.0))
    tokens = [broadcast_to_tokens((a - mean) / (std + 1e-6), torch.tensor(t.turn_index))
              for a, t in zip(per_turn_adv, trajs)]
    return tokens, values, returns


# ------------------------------------------------------------------------------------------------------
# the update: micro-batches, gradient accumulation, PPO epochs, NaN guard
# ------------------------------------------------------------------------------------------------------


def _loss_scaling(loss_type: str, rows: int, total_rows: int) -> tuple[str, float]:
    """The loss type to call per micro-batch, and the factor that makes the sum over micro-batches equal
    the loss of the whole batch: dapo/bnpo divide by the batch's token count (num_items_in_batch);
    grpo and dr_grpo average over rows, so each micro-batch weighs rows / total_rows."""
    if loss_type in ("dapo", "bnpo"):
        return "dapo", 1.0
    return loss_type, rows / total_rows


def update(model, value_head, optimizer, trajs: list[Trajectory], advantages: list[torch.Tensor],
           config: TrainConfig, step: int, *, device, autocast_dtype, ref_model=None,
           old_values: list[torch.Tensor] | None = None, returns: list[torch.Tensor] | None = None) -> dict:
    """`ppo_epochs` optimizer steps over the batch, each accumulating gradients over length-bucketed
    micro-batches. Returns the update's metrics; `nonfinite` is True when a NaN/inf loss or gradient
    made it skip an optimizer step (that epoch and the ones after it); `epochs_stepped` counts the
    optimizer steps taken before that, `ppo_epochs` when all went well."""
    critic = value_head is not None
    batches = pack_by_length([len(t.token_ids) for t in trajs], config.token_budget)
    n_items = sum(t.num_model_tokens for t in trajs)
    n_turns = sum(t.num_turns for t in trajs)
    # dr_grpo divides by a constant (B × the longest possible completion), not by this batch's longest.
    max_completion = config.max_turns * config.max_new_tokens
    real = sum(len(t.token_ids) for t in trajs)
    padded = sum(len(rows) * max(len(trajs[i].token_ids) for i in rows) for rows in batches)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    scale = loss_scale(autocast_dtype)
    read_at = [_read_positions([trajs[i] for i in rows]).to(device) for rows in batches] if critic else None
    sums: Counter = Counter()
    out = {"micro_batches": len(batches), "padding_fraction": 1 - real / padded, "train_tokens": real,
           "nonfinite": False, "epochs_stepped": 0}
    model.train()
    t0 = time.perf_counter()
    for epoch in range(config.ppo_epochs):
        optimizer.zero_grad(set_to_none=True)
        total_loss = 0.0
        for k, rows in enumerate(batches):
            batch = collate([trajs[i] for i in rows], [advantages[i] for i in rows])
            logprobs, logits, hidden = _forward(model, batch, device, autocast_dtype, config.temperature,
                                                need_hidden=critic)
            mask = batch["loss_mask"].to(device)
            # One epoch: ℓ_old = ℓ detached (TRL's on-policy default, w = 1); more: the sampling log-probs.
            old = batch["old_logprobs"].to(device) if config.ppo_epochs > 1 else logprobs.detach()
            ref = None
            if ref_model is not None:
                with torch.no_grad():
                    ref = _forward(ref_model, batch, device, autocast_dtype, config.temperature)[0]
            loss_type, share = _loss_scaling(config.loss_type, len(rows), len(trajs))
            loss, stats = policy_loss(logprobs, old, batch["advantages"].to(device), mask, loss_type=loss_type,
                                      eps_low=config.eps_low, eps_high=config.eps_high, ref_logprobs=ref,
                                      beta=config.beta, max_completion_length=max_completion,
                                      num_items_in_batch=n_items)
            loss = loss * share
            if critic:
                positions = read_at[k]
                values = value_head(hidden, positions).float()
                turn_mask = (positions >= 0).float()
                v_loss = value_loss(values, _pad([old_values[i].tolist() for i in rows], 0.0, torch.float32).to(device),
                                    _pad([returns[i].tolist() for i in rows], 0.0, torch.float32).to(device),
                                    clip=config.value_clip, mask=turn_mask)
                # value_loss averages over this micro-batch's turns; weighted by its share of the batch's
                # turns, the sum over micro-batches is the mean over all turns, whatever the packing.
                v_loss = v_loss * turn_mask.sum() / n_turns
                loss = loss + config.value_coef * v_loss
                if epoch == 0:
                    sums["value_loss"] += v_loss.item()
            if config.loss_hook is not None:
                loss = config.loss_hook(step, loss)
            (loss * scale).backward()
            total_loss += loss.item()
            if epoch == 0:
                weight = stats["tokens"] / max(1, n_items)
                for key in ("clip_fraction_region", "ratio_mean", "kl"):
                    if key in stats:
                        sums[key] += stats[key] * weight
                sums["entropy"] += _entropy(logits.detach()) * weight
        _unscale(params, scale)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm))
        if not (math.isfinite(total_loss) and math.isfinite(grad_norm)):
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
                "tokens_per_s": real * config.ppo_epochs / seconds})
    return out


# ------------------------------------------------------------------------------------------------------
# checkpoints and metrics
# ------------------------------------------------------------------------------------------------------


def checkpoint_bytes(model, value_head=None) -> int:
    """What `save_checkpoint` writes, give or take the tokenizer: the weights, plus AdamW's two moments per
    weight (exp_avg, exp_avg_sq, same dtype), for the model and the value head: 3 x the parameter bytes."""
    params = list(model.parameters()) + (list(value_head.parameters()) if value_head is not None else [])
    return 3 * sum(p.numel() * p.element_size() for p in params)


def save_checkpoint(run_dir: Path, model, tokenizer, optimizer, value_head, step: int, config: TrainConfig) -> None:
    """Write run_dir/checkpoint atomically: a temporary folder, then a rename (the old one goes last).

    A failed write (a full disk, say) removes the partial folder, leaves the previous checkpoint as it was and
    raises an OSError that says how much space the disk has left."""
    tmp, final, old = run_dir / ".checkpoint-tmp", run_dir / "checkpoint", run_dir / ".checkpoint-old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        model.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        rng = {"torch": torch.get_rng_state(), "python": random.getstate(),
               "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
        torch.save({"optimizer": optimizer.state_dict(), "rng": rng,
                    "value_head": value_head.state_dict() if value_head is not None else None}, tmp / "state.pt")
        (tmp / "config.json").write_text(json.dumps(config.to_json(), indent=1))
        (tmp / "step.json").write_text(json.dumps({"step": step}))
    except Exception as e:  # a failed write is an OSError, a SafetensorError or torch.save's RuntimeError
        shutil.rmtree(tmp, ignore_errors=True)
        free = shutil.disk_usage(run_dir).free
        kept = f"the checkpoint in {final} is untouched" if final.exists() else "no earlier checkpoint exists"
        raise OSError(f"could not write the checkpoint of step {step} to {tmp} ({type(e).__name__}: {e}); "
                      f"{free / 2**30:.2f} GB are free on that disk and this checkpoint needs about "
                      f"{checkpoint_bytes(model, value_head) / 2**30:.2f} GB (weights and optimizer state); {kept}. "
                      f"Free some space (old run folders under runs/) and run again: train() resumes from the last "
                      f"checkpoint.") from e
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def _check_disk_for_checkpoint(run_dir: Path, model, value_head) -> None:
    """Fail before the first rollout, not at the first save, when a checkpoint cannot fit on the run's disk
    (the new one is written next to the previous one, which goes only after the rename)."""
    need, free = checkpoint_bytes(model, value_head), shutil.disk_usage(run_dir).free
    if free < need:
        raise OSError(f"{run_dir} has {free / 2**30:.2f} GB free, and a checkpoint of this run needs about "
                      f"{need / 2**30:.2f} GB (weights and optimizer state); no step was run. Free some space (old "
                      f"run folders under runs/) or choose a run_dir on a bigger disk (COURSE_RUNS moves runs/).")


def find_checkpoint(run_dir: Path) -> Path | None:
    """The run's checkpoint, recovering the previous one when a save was cut between its two renames."""
    final, old = run_dir / "checkpoint", run_dir / ".checkpoint-old"
    if not (final / "step.json").exists() and (old / "step.json").exists():
        shutil.rmtree(final, ignore_errors=True)
        old.rename(final)
    return final if (final / "step.json").exists() else None


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _truncate_metrics(path: Path, last_step: int) -> None:
    """Keep only rows up to the checkpoint's step: a step logged after it will be run again."""
    rows = read_metrics(path.parent)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] <= last_step))


def _bad_in_a_row(rows: list[dict]) -> int:
    """How many of the last logged training steps in a row had a NaN/inf update (to resume the count)."""
    count = 0
    for row in reversed([r for r in rows if r["kind"] == "train"]):
        if not row.get("nonfinite"):
            break
        count += 1
    return count


def _log(path: Path, row: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


# ------------------------------------------------------------------------------------------------------
# the RL loop
# ------------------------------------------------------------------------------------------------------


def _check(config: TrainConfig) -> None:
    if config.credit not in CREDITS:
        raise ValueError(f"credit {config.credit!r} is not known; choose one of {', '.join(CREDITS)}")
    if config.reward not in REWARDS:
        raise ValueError(f"reward {config.reward!r} is not known; choose one of {', '.join(REWARDS)}")
    if not config.temperature > 0:
        raise ValueError(f"temperature must be > 0 for training (the loss divides the logits by it), "
                         f"got {config.temperature}")
    if config.turn_reward not in ("process", "judge"):
        raise ValueError(f"turn_reward must be 'process' or 'judge', got {config.turn_reward!r}")
    for name, value in (("reward", config.reward), ("turn_reward", config.turn_reward)):
        if value in ("judge", "mix") and config.judge is None:  # else it fails only in the first step
            raise ValueError(f"{name}={value!r} needs a judge backend and there is no default one: set "
                             "judge= from Python, e.g. course_lib.judge.LocalJudge(mode='logprob') (the "
                             "embedded model) or OpenAIJudge(base_url=...) (a served one)")


def config_tasks(config: TrainConfig) -> tuple[list[dict], list[dict]]:
    """(training tasks, held-out evaluation tasks) of a run; a wrong env name or filter raises ValueError."""
    train_tasks = filter_tasks(load_tasks(config.env, "train"), config.task_filter)
    return train_tasks, filter_tasks(load_tasks(config.env, "test"), config.task_filter)[: config.eval_tasks]


def groups_with_signal(groups: list[TrajectoryGroup], advantages: list[torch.Tensor], *, credit: str
                       ) -> tuple[list[TrajectoryGroup], list[torch.Tensor]]:
    """The groups the update trains on, and their trajectories' advantages (in order).

    outcome, turn: a group whose rewards are all equal is skipped. Under outcome credit its advantages
    are all 0 (no gradient); under turn credit only the turn term would be left, and the verifier stays
    in charge: turn rewards alone (a judge's taste) never train the model.
    gigpo: a group is skipped only when all its advantages are 0. Its step advantages come from the
    environment's own rewards, discounted, so they still separate the members of an all-success group
    (a shorter path through the same state scores higher).
    """
    keep, kept, i = [], [], 0
    for g in groups:
        part, i = advantages[i:i + len(g)], i + len(g)
        signal_left = (any(len(a) and bool(a.abs().max() > 0) for a in part) if credit == "gigpo"
                       else len(set(g.rewards)) > 1)
        if signal_left:
            keep.append(g)
            kept += part
    return keep, kept


class DeferredInterrupt:
    """Holds a Ctrl+C (SIGINT) that arrives during an update until the update is done.

    Stopped half-way, the weights would be part-updated (some PPO epochs or some AdamW tensors done) and
    a checkpoint would store them under the previous step's number; held, the step finishes, is logged,
    and the checkpoint says where the weights are. `pending` tells the caller to stop after the step.
    """

    def __init__(self) -> None:
        self.pending = False

    @contextlib.contextmanager
    def hold(self):
        if threading.current_thread() is not threading.main_thread():
            yield  # only the main thread may set signal handlers (and only it receives Ctrl+C)
            return
        previous = signal.getsignal(signal.SIGINT)

        def remember(signum, frame) -> None:
            self.pending = True
            print("Ctrl+C: finishing this update, then saving a checkpoint.")

        signal.signal(signal.SIGINT, remember)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


def rl_step(step: int, model, tokenizer, value_head, optimizer, train_tasks: list[dict], config: TrainConfig,
            *, device, autocast_dtype, ref_model=None, interrupt: DeferredInterrupt | None = None) -> dict:
    """One RL step: rollout -> reward -> advantages -> update. Returns its metrics row.

    With `interrupt`, a Ctrl+C during the update is held until the update is done (rollouts stay
    interruptible at once: they change no weights)."""
    rng = random.Random(config.seed * 1_000_003 + step)  # tasks depend only on (seed, step): resumable
    tasks = rng.sample(train_tasks, min(config.tasks_per_step, len(train_tasks)))
    stats = RolloutStats()
    t0 = time.perf_counter()
    groups = rollout(model, tokenizer, config.env, tasks, group_size=config.group_size, max_turns=config.max_turns,
                     max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                     seed=config.seed * 100_000 + step, max_context=config.max_context, progress=False, stats=stats)
    row: dict[str, Any] = {"step": step, "kind": "train", "seconds_rollout": time.perf_counter() - t0,
                           "generated_tokens": stats.new_tokens, "seconds_generate": stats.generate_seconds,
                           "generate_tokens_per_s": stats.new_tokens / max(stats.generate_seconds, 1e-9)}
    t0 = time.perf_counter()
    assign_rewards(groups, config)
    row["seconds_reward"] = time.perf_counter() - t0
    all_trajs = [t for g in groups for t in g]
    judge_failed = [g for g in groups if any(t.info.get("judge_failed") for t in g)]
    judged = [g for g in groups if g not in judge_failed]
    row.update({"reward": sum(t.reward for t in all_trajs) / len(all_trajs),
                "success": sum(t.info["verifier_reward"] > 0.5 for t in all_trajs) / len(all_trajs),
                "turns": sum(t.num_turns for t in all_trajs) / len(all_trajs),
                "equal_reward_groups": sum(len(set(g.rewards)) <= 1 for g in judged),
                "judge_failed_groups": len(judge_failed)})
    t0 = time.perf_counter()
    trajs = [t for g in judged for t in g]
    if config.credit == "critic":
        advantages, old_values, returns = (critic_advantages(model, value_head, trajs, config, device, autocast_dtype)
                                           if trajs else ([], [], []))
    else:
        advantages = token_advantages(trajs, config, row) if trajs else []
    # A trajectory whose turns the judge failed to score has NaN advantages: its group is skipped and counted
    # like a failed group judging, so the other groups still train.
    failed = {t.group_id for t in trajs if t.info.get("turn_judge_failed")}
    row["judge_failed_groups"] += len(failed)
    ok = [i for i, t in enumerate(trajs) if t.group_id not in failed]
    trajs, advantages = [trajs[i] for i in ok], [advantages[i] for i in ok]
    keep = [g for g in judged if g.group_id not in failed]
    if config.credit == "critic":  # the critic learns from every group: its baseline is V, not the group mean
        old_values, returns = [old_values[i] for i in ok], [returns[i] for i in ok]
    else:
        old_values = returns = None
        keep, advantages = groups_with_signal(keep, advantages, credit=config.credit)
        trajs = [t for g in keep for t in g]
    row["seconds_advantage"] = time.perf_counter() - t0
    row["skipped_groups"] = len(groups) - len(keep)
    if not trajs:
        row.update({"nonfinite": False, "skipped_update": True})
        return row
    flat = torch.cat([a[torch.tensor(t.loss_mask, dtype=torch.bool)] for a, t in zip(advantages, trajs)])
    row.update({"advantage_mean": flat.mean().item(), "advantage_std": flat.std().item() if len(flat) > 1 else 0.0})
    with interrupt.hold() if interrupt is not None else contextlib.nullcontext():
        row.update(update(model, value_head, optimizer, trajs, advantages, config, step, device=device,
                          autocast_dtype=autocast_dtype, ref_model=ref_model, old_values=old_values,
                          returns=returns))
    return row


def train(config: TrainConfig) -> dict:
    """Run (or resume) an RL run; returns {"step", "eval", "run_dir", "interrupted"}.

    Metrics rows go to run_dir/metrics.jsonl: kind "train" (one per step) and kind "eval" (held-out
    greedy success with its 95% Wilson interval, at step 0, every `eval_every` steps and at the end).
    """
    _check(config)
    train_tasks, test_tasks = config_tasks(config)  # before the model loads: a bad name or filter fails at once
    run_dir = Path(config.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = run_dir / "metrics.jsonl"
    checkpoint = find_checkpoint(run_dir)
    model, tokenizer = load_policy(str(checkpoint / "model") if checkpoint else config.model, device=config.device)
    device = next(model.parameters()).device
    autocast_dtype = torch.bfloat16 if _use_bf16(config.bf16_autocast, device) else model.course_autocast
    # Generation keeps the model's own choice: at decoding batch sizes bf16 autocast on a CPU costs more
    # in casts than it saves in matmuls (measured slower); the training forward/backward uses it.
    value_head = ValueHead(model.config.hidden_size).to(device) if config.credit == "critic" else None
    param_groups = [{"params": list(model.parameters()), "lr": config.lr}]
    if value_head is not None:
        param_groups.append({"params": list(value_head.parameters()), "lr": config.value_lr})
    optimizer = torch.optim.AdamW(param_groups, weight_decay=config.weight_decay)
    torch.manual_seed(config.seed)
    start = 0
    if checkpoint:
        state = torch.load(checkpoint / "state.pt", weights_only=False)
        optimizer.load_state_dict(state["optimizer"])
        if value_head is not None and state["value_head"] is not None:
            value_head.load_state_dict(state["value_head"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        start = json.loads((checkpoint / "step.json").read_text())["step"]
        _truncate_metrics(metrics_path, start)
        print(f"Resuming {run_dir} from step {start}.")
    else:
        metrics_path.write_text("")
    (run_dir / "config.json").write_text(json.dumps(config.to_json(), indent=1))
    if start < config.steps:
        _check_disk_for_checkpoint(run_dir, model, value_head)
    ref_model = load_policy(config.model, device=config.device)[0] if config.beta > 0 else None

    def run_eval(step: int) -> dict:
        t0 = time.perf_counter()
        result = evaluate(model, config.env, tokenizer=tokenizer, tasks=test_tasks, max_turns=config.max_turns,
                          max_new_tokens=config.max_new_tokens, max_context=config.max_context)
        row = {"step": step, "kind": "eval", **result, "seconds_eval": time.perf_counter() - t0}
        _log(metrics_path, row)
        return row

    logged = read_metrics(run_dir)
    last_eval = next((r for r in reversed(logged) if r["kind"] == "eval"), None)
    if start == 0 and last_eval is None and config.eval_every > 0 and config.eval_tasks > 0:
        last_eval = run_eval(0)  # not again when resuming from a checkpoint saved at step 0 (Ctrl+C in step 1)
    step, bad_in_a_row, interrupted = start, _bad_in_a_row(logged), False
    held = DeferredInterrupt()
    bar = tqdm(range(start + 1, config.steps + 1), desc=f"RL {config.credit}", disable=not config.progress,
               initial=start, total=config.steps)
    try:
        for next_step in bar:
            row = rl_step(next_step, model, tokenizer, value_head, optimizer, train_tasks, config,
                          device=device, autocast_dtype=autocast_dtype, ref_model=ref_model, interrupt=held)
            _log(metrics_path, row)
            step = next_step
            bad_in_a_row = bad_in_a_row + 1 if row["nonfinite"] else 0
            if row["nonfinite"]:
                done = (f"update stopped after {row['epochs_stepped']} of {config.ppo_epochs} PPO epochs"
                        if row["epochs_stepped"] else "update skipped")
                print(f"step {step}: NaN/inf in the loss or the gradients; {done} ({bad_in_a_row} in a row)")
            if bad_in_a_row >= config.max_bad_updates:
                raise RuntimeError(
                    f"{bad_in_a_row} updates in a row had a NaN/inf loss or gradient (last at step {step}); "
                    "stopping. Lower the learning rate, turn off bf16 autocast, or check the rewards.")
            bar.set_postfix(reward=f"{row['reward']:.2f}", success=f"{row['success']:.2f}")
            if held.pending:  # Ctrl+C came during this step's update: the step is done, save it and stop
                raise KeyboardInterrupt
            eval_due = step == config.steps or (config.eval_every > 0 and step % config.eval_every == 0)
            if eval_due and config.eval_tasks > 0:
                last_eval = run_eval(step)
            if step == config.steps or (config.checkpoint_every > 0 and step % config.checkpoint_every == 0):
                save_checkpoint(run_dir, model, tokenizer, optimizer, value_head, step, config)
    except KeyboardInterrupt:
        interrupted = True
        save_checkpoint(run_dir, model, tokenizer, optimizer, value_head, step, config)
        print(f"Interrupted: checkpoint saved at step {step} in {run_dir}; run train() again to resume.")
    finally:
        bar.close()
    return {"step": step, "eval": last_eval, "run_dir": str(run_dir), "interrupted": interrupted}
