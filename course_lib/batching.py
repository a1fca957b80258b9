"""Batches and the model's forward pass, shared by the warm start (`sft`), the RL update and the critic.

    pack_by_length   micro-batches of similar lengths under a token budget
    collate          right-padded tensors [B, T] of a micro-batch
    forward_logprobs log π of the sampled tokens only (the output layer runs where loss_mask = 1)
    hidden_states    the decoder's last hidden state (what the value head reads); a start all rows share
                     runs once
    loss_scale       the static loss scale of fp16 autocast, and `unscale_gradients`

This module knows trajectories' token lists and the model; it knows nothing of advantages, credit
methods or training configs.
"""

from __future__ import annotations

import torch

from course_lib.models import autocast_context, bf16_is_fast
from course_lib.trajectory import Trajectory


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


def pad(rows: list[list], value, dtype) -> torch.Tensor:
    """Rows of different lengths as one tensor [len(rows), longest], right-padded with `value`."""
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out


def collate(trajectories: list[Trajectory], token_advantages: list[torch.Tensor] | None = None) -> dict:
    """Right-padded tensors [B, T] of a micro-batch (padding has attention 0 and loss mask 0)."""
    batch = {
        "input_ids": pad([t.token_ids for t in trajectories], 0, torch.long),
        "attention_mask": pad([[1] * len(t.token_ids) for t in trajectories], 0, torch.long),
        "loss_mask": pad([t.loss_mask for t in trajectories], 0, torch.float32),
        "old_logprobs": pad([t.logprobs for t in trajectories], 0.0, torch.float32),
        "turn_index": pad([t.turn_index for t in trajectories], -1, torch.long),
    }
    if token_advantages is not None:
        batch["advantages"] = pad([a.tolist() for a in token_advantages], 0.0, torch.float32)
    return batch


# True: rows that start alike run their common start once (`hidden_states`); False: every row runs whole
# (the update before 2026-12-06, kept for benchmarks/engine_then_now.py and the tests that compare the two).
SHARE_PREFIX = True


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """p: how many leading tokens every row of a right-padded micro-batch has in common (the system prompt
    all episodes of an environment share; a group's task too when only its rollouts are in the batch),
    at most the shortest row's length − 1, so that every row keeps at least one token of its own.
    0 for a single row."""
    if input_ids.shape[0] < 2:
        return 0
    same = (input_ids == input_ids[:1]).all(dim=0).long()
    return max(0, min(int(same.cumprod(0).sum()), int(attention_mask.sum(1).min()) - 1))


def hidden_states(model, batch: dict, device) -> torch.Tensor:
    """The decoder's last hidden state [B, T, H] (the model without its output layer).

    Causal attention at position t reads tokens ≤ t only, so rows that start with the same p tokens have
    the same hidden states and the same keys and values there. Those p tokens run once, as one row, and
    the rest of every row attends to their keys and values (`shared_prefix_length`):

        H[:, :p] = decoder(x[0, :p])                 one row; its keys and values kept
        H[:, p:] = decoder(x[:, p:] | K, V of x[:p])  every row, after the shared start

    The hidden states are the same, and so are the gradients: the shared start's gradient is the sum over
    the rows, as when each row carried its own copy. In search_qa the system prompt every episode starts
    with is about half of the tokens, so half of the tokens go through the model once instead of B times.
    """
    ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
    decoder = model.get_decoder()
    p = shared_prefix_length(ids, mask) if SHARE_PREFIX else 0
    if p == 0:
        return decoder(input_ids=ids, attention_mask=mask).last_hidden_state
    head = decoder(input_ids=ids[:1, :p], use_cache=True)
    cache = head.cache
    cache.batch_repeat_interleave(ids.shape[0])  # a view per row would do; the copy is small (K/V only)
    tail = decoder(input_ids=ids[:, p:], attention_mask=mask, cache=cache, use_cache=False).last_hidden_state
    return torch.cat([head.last_hidden_state.expand(ids.shape[0], -1, -1), tail], dim=1)


def forward_logprobs(model, batch: dict, device, autocast_dtype, temperature: float,
                     need_hidden: bool = False):
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
        hidden = hidden_states(model, batch, device)
        logits = model.get_output_embeddings()(hidden[:, :-1][predicting])  # [N, V]
    rows = logits.float() / temperature
    chosen = rows.gather(-1, ids[:, 1:][predicting].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(rows, dim=-1)
    logprobs = torch.zeros(ids.shape, dtype=torch.float32, device=device)
    logprobs = torch.cat([logprobs[:, :1], logprobs[:, 1:].masked_scatter(predicting, chosen)], dim=1)
    return logprobs, logits, hidden if need_hidden else None


@torch.no_grad()
def entropy(logits: torch.Tensor) -> float:
    """Mean entropy of the policy (before temperature) over the rows of `logits` [N, V] (the predictions
    of loss-masked tokens, as `forward_logprobs` returns them)."""
    if logits.numel() == 0:
        return 0.0
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(-(logp.exp() * logp).sum(-1).mean())


def loss_scale(autocast_dtype: torch.dtype | None) -> float:
    """Static loss scale S: the backward pass runs on S · loss and the gradients are divided by S
    before clipping. S = 2^10 under fp16 autocast (a T4), 1 otherwise.

    fp16 flushes numbers below ~6e-8 to zero, and many of a language model's gradients are that small:
    on one SFT batch of the embedded model, fp16 autocast without scaling left 13.7% of the weight
    gradients at exactly 0 (0.18% with S = 2^10; S = 2^16 overflowed to inf). bf16 has fp32's exponent
    range and needs no scaling. A static S keeps resuming exact (no scaler state); an overflow shows as
    a non-finite gradient, and the RL update and `sft_step` then skip the optimizer step.
    """
    return 2.0**10 if autocast_dtype == torch.float16 else 1.0


def unscale_gradients(params, scale: float) -> None:
    """Divide every gradient by the loss scale (before clipping)."""
    if scale != 1.0:
        for p in params:
            if p.grad is not None:
                p.grad.div_(scale)


def micro_batch_loss(loss_type: str, rows: int, total_rows: int) -> tuple[str, float]:
    """The loss type to call per micro-batch, and the factor that makes the sum over micro-batches equal
    the loss of the whole batch: dapo/bnpo divide by the batch's token count (num_items_in_batch);
    grpo and dr_grpo average over rows, so each micro-batch weighs rows / total_rows."""
    if loss_type in ("dapo", "bnpo"):
        return "dapo", 1.0
    return loss_type, rows / total_rows


def use_bf16(flag: bool | None, device: torch.device) -> bool:
    """bf16 autocast for the training forward: `flag`, or (None) on for a CPU with bf16 matrix units
    (`models.bf16_is_fast`; fp32 on one without), the model's choice on a GPU."""
    return (device.type == "cpu" and bf16_is_fast(device)) if flag is None else flag
