"""The decode step's attention on grouped K/V heads (course_lib.decode_attention) equals transformers' SDPA.

The engine's greedy tokens are pinned to the plain `rollout.generate_turn` in test_kv_cache; here the
attention itself, on random tensors and on the real model's decode step with left padding.
"""

import pytest
import torch
from conftest import TEST_DEVICE

from course_lib import decode_attention, kv_cache
from course_lib.models import load_policy


@pytest.mark.parametrize("mask_kind", ["bool", "float", "none"])
def test_grouped_decode_attention_equals_sdpa_with_repeated_heads(mask_kind):
    gen = torch.Generator().manual_seed(0)
    batch, heads, kv_heads, length, dim = 5, 9, 3, 37, 64
    q = torch.randn(batch, heads, 1, dim, generator=gen)
    k, v = (torch.randn(batch, kv_heads, length, dim, generator=gen) for _ in range(2))
    attend = torch.ones(batch, 1, 1, length, dtype=torch.bool)
    for row in range(batch):
        attend[row, ..., : 3 * row] = False  # left padding of 0, 3, 6, ... positions
    mask = {"bool": attend, "none": None,
            "float": torch.zeros(attend.shape).masked_fill(~attend, float("-inf"))}[mask_kind]
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(heads // kv_heads, 1),
        v.repeat_interleave(heads // kv_heads, 1), attn_mask=mask)
    got = decode_attention.grouped_decode_attention(q, k, v, mask, dim ** -0.5)
    assert got.shape == (batch, 1, heads, dim)
    assert torch.allclose(got, expected.transpose(1, 2), atol=1e-6)


@torch.no_grad()
def test_a_decode_step_of_the_model_gives_the_logits_of_sdpa():
    model, _ = load_policy("smollm2-135m", device=TEST_DEVICE)
    assert model.config._attn_implementation == decode_attention.ATTENTION  # what load_policy gives
    device = model.device
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(100, 40_000, (3, 20), generator=gen).to(device)
    mask = torch.ones_like(ids)
    mask[1, :4] = mask[2, :9] = 0  # left padding
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = {}
    for attention in ("sdpa", decode_attention.ATTENTION):
        model.set_attn_implementation(attention)
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=kv_cache.new_cache(),
                    use_cache=True, logits_to_keep=1)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        step = model(input_ids=token, attention_mask=torch.cat([mask, mask.new_ones((3, 1))], 1),
                     position_ids=positions[:, -1:] + 1, cache=out.cache, use_cache=True)
        logits[attention] = step.logits[:, -1].float()
    tol = 1e-4 if next(model.parameters()).dtype == torch.float32 else 5e-2
    assert torch.allclose(logits["sdpa"], logits[decode_attention.ATTENTION], atol=tol)
