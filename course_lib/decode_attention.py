"""Attention for a decode step (one new token per row), computed on the grouped key/value heads.

SmolLM2-135M has 9 query heads and 3 key/value heads: grouped-query attention, each K/V head serving a
group of 3 query heads. In a decode step every row brings one query token, so with the group's query heads
stacked as rows, attention is two small matrix products per row and K/V head:

    scores = q Kᵀ · scale + mask        q [B, kv_heads, group, d],  K [B, kv_heads, T, d]
    out    = softmax(scores) V           [B, kv_heads, group, d]  ->  [B, 1, heads, d]

K and V are read once and never repeated per query head. When the rows have equal length (no mask),
transformers hands this shape to torch's fused GQA kernel (`scaled_dot_product_attention(enable_gqa=True)`),
built for many queries: on the course's 2-core CPU it took about 10x as long in bf16, most of a bf16 decode
step at batch 16; with padded rows the two are within a few percent (benchmarks/README.md,
rollout_throughput). Prefill and training (more than one query per row) go to transformers' SDPA path
unchanged, so gradients and the trainer's log-probs are computed exactly as before.

`install(model)` registers this function with transformers under the name ``ATTENTION`` and switches the
model to it; `load_policy` does this for every model it returns.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTENTION = "course_decode"
ENABLED = True  # `install` switches models over; False leaves them on transformers' SDPA


def grouped_decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """One query token per row: query [B, heads, 1, d], key/value [B, kv_heads, T, d], mask None or
    [B, 1, 1, T] (bool: True = attend; or additive floats) -> [B, 1, heads, d]. The softmax runs in fp32."""
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    q = query.reshape(batch, kv_heads, heads // kv_heads, dim)
    # K Qᵀ, transposed back: K stays the left operand, read in its own layout even when it is a view into a
    # larger buffer (the preallocated cache), which q Kᵀ would first copy (measured: 2.8x slower in bf16).
    scores = torch.matmul(key, q.transpose(-1, -2)).transpose(-1, -2) * scale  # [B, kv_heads, group, T]
    if mask is not None:
        mask = mask[..., -key.shape[-2]:]
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    return torch.matmul(probs, value).reshape(batch, 1, heads, dim)


def decode_attention_forward(module: torch.nn.Module, query: torch.Tensor,
                             key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, dropout: float = 0.0,
                             scaling: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: `grouped_decode_attention` for one query token per row, without
    dropout or extra biases; everything else (prefill, training) goes to `sdpa_attention_forward`."""
    one_query = query.shape[2] == 1 and key.shape[1] > 0 and query.shape[1] % key.shape[1] == 0
    if not one_query or dropout > 0.0 or kwargs.get("position_bias") is not None or kwargs.get("softcap"):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return grouped_decode_attention(query, key, value, attention_mask, scale), None


AttentionInterface.register(ATTENTION, decode_attention_forward)
AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # the same masks as SDPA: bool, True = attend


def install(model) -> None:
    """Switch `model` (a transformers model whose attention goes through AttentionInterface, e.g. Llama) to
    `decode_attention_forward`. Other models are left as they are, and every model when `ENABLED` is
    False (SDPA for decode steps too: the engine before 2026-12-04, `benchmarks/engine_then_now.py`)."""
    if not ENABLED:
        return
    if getattr(model.config, "_attn_implementation", None) in ("sdpa", "eager", ATTENTION):
        model.set_attn_implementation(ATTENTION)
