"""The update of one RL step: `optim.ppo_epochs` optimizer steps over the batch, each accumulating
gradients over length-bucketed micro-batches, with the policy loss (`losses.policy_loss`), the value
loss when the method learns values (`critic.micro_batch_value_loss`), and a guard that skips an optimizer
step whose loss or gradient is NaN/inf.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable

import torch

from course_lib.batching import (
    collate,
    entropy,
    forward_logprobs,
    loss_scale,
    micro_batch_loss,
    pack_by_length,
    unscale_gradients,
)
from course_lib.kv_cache import sampler_gap
from course_lib.losses import policy_loss
from course_lib.trajectory import Trajectory

from .config import TrainConfig
from .critic import micro_batch_value_loss


def _reference_logprobs(ref_model, batch: dict, device, autocast_dtype, temperature: float):
    """ℓ_ref of the micro-batch under the frozen starting model (the KL penalty's reference), or None."""
    if ref_model is None:
        return None
    with torch.no_grad():
        return forward_logprobs(ref_model, batch, device, autocast_dtype, temperature)[0]


def _add_diagnostics(sums: Counter, stats: dict, logits: torch.Tensor, logprobs: torch.Tensor, batch: dict,
                     n_items: int) -> None:
    """Add one micro-batch's share of the first epoch's diagnostics (clip fraction, ratio, KL, entropy,
    the sampler's log-prob gap), weighted by its share of the batch's model tokens."""
    weight = stats["tokens"] / max(1, n_items)
    for key in ("clip_fraction_region", "ratio_mean", "kl"):
        if key in stats:
            sums[key] += stats[key] * weight
    sums["entropy"] += entropy(logits.detach()) * weight
    sums["sampler_logprob_gap"] += sampler_gap(batch, logprobs) / max(1, n_items)


def update(model, value_head, optimizer, trajs: list[Trajectory], advantages: list[torch.Tensor],
           config: TrainConfig, step: int, *, device, autocast_dtype, ref_model=None,
           old_values: list[torch.Tensor] | None = None, returns: list[torch.Tensor] | None = None,
           loss_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None) -> dict:
    """`ppo_epochs` optimizer steps over the batch, each accumulating gradients over length-bucketed
    micro-batches. Returns the update's metrics; `nonfinite` is True when a NaN/inf loss or gradient
    made it skip an optimizer step (that epoch and the ones after it); `epochs_stepped` counts the
    optimizer steps taken before that, `ppo_epochs` when all went well."""
    optim, rollout = config.optim, config.rollout
    critic = value_head is not None
    batches = pack_by_length([len(t.token_ids) for t in trajs], optim.token_budget)
    n_items, n_turns = sum(t.num_model_tokens for t in trajs), sum(t.num_turns for t in trajs)
    # dr_grpo divides by a constant (B × the longest possible completion), not by this batch's longest.
    max_completion = rollout.max_turns * rollout.max_new_tokens
    real = sum(len(t.token_ids) for t in trajs)
    padded = sum(len(rows) * max(len(trajs[i].token_ids) for i in rows) for rows in batches)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    scale = loss_scale(autocast_dtype)
    sums: Counter = Counter()
    out = {"micro_batches": len(batches), "padding_fraction": 1 - real / padded, "train_tokens": real,
           "nonfinite": False, "epochs_stepped": 0}
    old_from_sampler, first_epoch = optim.ppo_epochs > 1 and rollout.sample_dtype == "float32", {}
    model.train()
    t0 = time.perf_counter()
    for epoch in range(optim.ppo_epochs):
        optimizer.zero_grad(set_to_none=True)
        total_loss = 0.0
        for j, rows in enumerate(batches):
            batch = collate([trajs[i] for i in rows], [advantages[i] for i in rows])
            logprobs, logits, hidden = forward_logprobs(model, batch, device, autocast_dtype,
                                                        rollout.temperature, need_hidden=critic)
            # ℓ_old: one epoch, ℓ detached (TRL's on-policy default, w = 1); more, the sampling log-probs, or
            # with a bf16 sampler the first epoch's ℓ (weights before this update: no bf16 ℓ in the ratio).
            old = (batch["old_logprobs"].to(device) if old_from_sampler
                   else first_epoch.setdefault(j, logprobs.detach()))
            ref = _reference_logprobs(ref_model, batch, device, autocast_dtype, rollout.temperature)
            loss_type, share = micro_batch_loss(optim.loss_type, len(rows), len(trajs))
            loss, stats = policy_loss(logprobs, old, batch["advantages"].to(device),
                                      batch["loss_mask"].to(device), loss_type=loss_type,
                                      eps_low=optim.eps_low, eps_high=optim.eps_high, ref_logprobs=ref,
                                      beta=optim.beta, max_completion_length=max_completion,
                                      num_items_in_batch=n_items)
            loss = loss * share
            if critic:
                v_loss = micro_batch_value_loss(value_head, hidden, [trajs[i] for i in rows],
                                                [old_values[i] for i in rows], [returns[i] for i in rows],
                                                n_turns=n_turns, config=config)
                loss = loss + config.critic.coef * v_loss
                sums["value_loss"] += v_loss.item() if epoch == 0 else 0.0
            if loss_hook is not None:
                loss = loss_hook(step, loss)
            (loss * scale).backward()
            total_loss += loss.item()
            if epoch == 0:
                _add_diagnostics(sums, stats, logits, logprobs, batch, n_items)
        unscale_gradients(params, scale)
        grad_norm, *head_norm = [float(torch.nn.utils.clip_grad_norm_(g["params"], optim.max_grad_norm))
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
                "tokens_per_s": real * optim.ppo_epochs / seconds,
                **({"value_grad_norm": head_norm[0]} if head_norm else {})})
    return out
