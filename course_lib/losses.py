"""Losses: the masked clipped policy-gradient loss (notebook 04) and the SFT warm-start loss (notebook 03).

Notation (as in the course):
    ℓ_t      log π_θ(a_t | history) of the token at position t (logits divided by the sampling temperature)
    ℓ_old    the same log-prob under the policy that sampled the rollout
    w_t      exp(ℓ_t − ℓ_old,t), the importance ratio
    A        the advantage, one per trajectory [B] or one per token [B, T]
    m_t      the loss mask: 1 on tokens the model sampled, 0 on prompt, tool output and padding

Every tensor of a batch has shape [B, T]: B trajectories (or completions), T token positions.
"""

from __future__ import annotations

import torch

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `x` over the positions where `mask` is 1: Σ(x·m) / max(Σm, 1).

    With `dim=None` the mean runs over every element; with `dim` it runs along that dimension.
    An all-zero mask gives 0 rather than NaN.
    """
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of every token under the logits that predicted it.

    out[b, t] = log softmax(logits[b, t−1] / temperature)[token_ids[b, t]] for t ≥ 1, and out[b, 0] = 0
    (nothing predicts the first token).

    Shapes: logits [B, T, V], token_ids [B, T] -> [B, T].

    Computed as (chosen logit − logsumexp of the row), one sequence at a time, so the full [B, T, V]
    log-softmax is never held in memory at once. Half-precision logits are upcast to float32 per row,
    because logsumexp in bf16 loses about two digits.
    """
    compute_dtype = torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else logits.dtype
    out = torch.zeros(token_ids.shape, dtype=compute_dtype, device=logits.device)
    for b in range(logits.size(0)):
        row = logits[b, :-1].to(compute_dtype) / temperature  # [T-1, V], position t-1 predicts token t
        chosen = row.gather(-1, token_ids[b, 1:].unsqueeze(-1)).squeeze(-1)
        out[b, 1:] = chosen - torch.logsumexp(row, dim=-1)
    return out


def sft_loss(
    logits: torch.Tensor,
    token_ids: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Masked next-token cross-entropy for the supervised warm start.

    L = −Σ_{t≥1} m_t · log π_θ(token_t | tokens_<t) / Σ_{t≥1} m_t   (a mean over every trained token
    of the batch)

    Shapes: logits [B, T, V], token_ids [B, T], mask [B, T]. mask[b, t] = 1 means "train on predicting
    token t" (from the logits at t−1); position 0 is never a target. `mask=None` trains on every token,
    except padding when `attention_mask` is given. In the course the mask is the trajectory's `loss_mask`,
    so the model learns its own actions and never learns to write tool output.

    Returns (loss, stats) with stats: loss, tokens (targets trained on), accuracy (greedy prediction
    equals the target, over trained tokens).
    """
    if mask is None:
        mask = torch.ones_like(token_ids) if attention_mask is None else attention_mask
    elif attention_mask is not None:
        mask = mask * attention_mask
    target_mask = mask[:, 1:].to(torch.float32)
    logprobs = token_logprobs(logits, token_ids)[:, 1:]
    loss = -masked_mean(logprobs, target_mask)
    with torch.no_grad():
        correct = (logits[:, :-1].argmax(-1) == token_ids[:, 1:]).to(torch.float32)
        stats = {
            "loss": loss.item(),
            "tokens": target_mask.sum().item(),
            "accuracy": masked_mean(correct, target_mask).item(),
        }
    return loss, stats


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str = "dapo",
    eps_low: float = 0.2,
    eps_high: float | None = None,
    ref_logprobs: torch.Tensor | None = None,
    beta: float = 0.0,
    max_completion_length: int | None = None,
    num_items_in_batch: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The masked, clipped policy-gradient loss (PPO/GRPO surrogate) with an optional KL penalty.

    Per token (ε_high defaults to ε_low, as in TRL):
        w_t  = exp(ℓ_t − ℓ_old,t)
        L_t  = −min(w_t·A, clip(w_t, 1 − ε_low, 1 + ε_high)·A)
        L_t += β · w_t · (exp(ℓ_ref,t − ℓ_t) − (ℓ_ref,t − ℓ_t) − 1)      only when β ≠ 0 (k3 KL estimate,
               multiplied by the unclipped w_t: TRL's `use_bias_correction_kl`, its default)

    Reduction over the [B, T] batch, m the loss mask:
        "grpo"     mean_b [ Σ_t L·m / max(Σ_t m, 1) ]         per-sequence mean, then batch mean
        "bnpo"     Σ L·m / max(Σ m, 1)                          token mean over this batch
        "dr_grpo"  Σ L·m / (B · max_completion_length)          a constant (default max_completion_length = T)
        "dapo"     Σ L·m / max(num_items_in_batch, 1)           token mean over the whole generation batch
                                                                (default num_items_in_batch = Σ m)

    Shapes: logprobs, old_logprobs, ref_logprobs, mask [B, T]; advantages [B] or [B, T].
    `old_logprobs` and `ref_logprobs` carry no gradient (detached here, in case the caller forgot);
    pass `logprobs.detach()` as `old_logprobs` for a single update per rollout (then w = 1 but ∇w = ∇ℓ,
    which is plain REINFORCE).

    Equal to TRL 1.16 `GRPOTrainer._compute_loss` (one process, no gradient accumulation, token-level
    importance sampling, no entropy filtering, no vLLM correction), in value and gradient.

    Returns (loss, stats); stats are floats over the masked tokens: loss, tokens, ratio_mean, ratio_max,
    clip_fraction_low (w < 1 − ε_low with A < 0), clip_fraction_high (w > 1 + ε_high with A > 0),
    clip_fraction_region (either), and kl (the β-term's per-token KL, with its w factor) when
    `ref_logprobs` is given.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type {loss_type!r} is not known; choose one of {', '.join(LOSS_TYPES)}")
    if beta != 0.0 and ref_logprobs is None:
        raise ValueError("beta != 0 needs ref_logprobs (the reference model's per-token log-probs)")
    eps_high = eps_low if eps_high is None else eps_high
    mask = mask.to(logprobs.dtype)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # [B] -> [B, 1], one advantage for every token of the row

    old_logprobs = old_logprobs.detach()
    ref_logprobs = ref_logprobs.detach() if ref_logprobs is not None else None
    ratio = torch.exp(logprobs - old_logprobs)
    clipped_ratio = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(ratio * advantages, clipped_ratio * advantages)
    kl = None
    if ref_logprobs is not None:
        log_ref_ratio = ref_logprobs - logprobs
        kl = (torch.exp(log_ref_ratio) - log_ref_ratio - 1) * ratio
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * kl

    loss = _reduce(per_token_loss, mask, loss_type, max_completion_length, num_items_in_batch)
    stats = _policy_stats(loss, ratio, advantages, mask, kl, eps_low, eps_high)
    return loss, stats


def _reduce(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    max_completion_length: int | None,
    num_items_in_batch: int | float | torch.Tensor | None,
) -> torch.Tensor:
    """The four normalisations of `policy_loss` (see its docstring)."""
    masked_loss = per_token_loss * mask
    if loss_type == "grpo":
        return (masked_loss.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return masked_loss.sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        length = mask.size(1) if max_completion_length is None else max_completion_length
        return masked_loss.sum() / max(mask.size(0) * length, 1)
    count = mask.sum() if num_items_in_batch is None else num_items_in_batch
    count = torch.as_tensor(count, dtype=mask.dtype, device=mask.device)
    return masked_loss.sum() / count.clamp(min=1.0)


@torch.no_grad()
def _policy_stats(
    loss: torch.Tensor,
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    kl: torch.Tensor | None,
    eps_low: float,
    eps_high: float,
) -> dict[str, float]:
    """Diagnostics over the masked tokens, named after TRL's clip_ratio/* metrics."""
    low = ((ratio < 1 - eps_low) & (advantages < 0)).to(mask.dtype)
    high = ((ratio > 1 + eps_high) & (advantages > 0)).to(mask.dtype)
    stats = {
        "loss": loss.item(),
        "tokens": mask.sum().item(),
        "ratio_mean": masked_mean(ratio, mask).item(),
        "ratio_max": ratio.masked_fill(mask == 0, float("-inf")).max().item() if mask.any() else 1.0,
        "clip_fraction_low": masked_mean(low, mask).item(),
        "clip_fraction_high": masked_mean(high, mask).item(),
        "clip_fraction_region": masked_mean(torch.maximum(low, high), mask).item(),
    }
    if kl is not None:
        stats["kl"] = masked_mean(kl, mask).item()
    return stats
