"""`course_lib.batching`: packing rows under a token budget, right padding, the forward pass that computes
log π only where the loss reads it, and the loss scale of fp16 autocast. The model is the real embedded
one."""

from __future__ import annotations

import math
import random

import pytest
import torch
from conftest import logprob_atol, make_trajectory

from course_lib import batching
from course_lib.batching import (
    collate,
    entropy,
    forward_logprobs,
    hidden_states,
    loss_scale,
    micro_batch_loss,
    pack_by_length,
    pad,
    shared_prefix_length,
    unscale_gradients,
    use_bf16,
)
from course_lib.envs import load_tasks
from course_lib.losses import token_logprobs
from course_lib.rollout import expert_rollout


@pytest.fixture(scope="module")
def demos(tokenizer):
    """Three real lookup demonstrations (prompt, tool call, observation, answer), of different lengths."""
    return expert_rollout(tokenizer, "lookup", load_tasks("lookup", "train")[:3])


# ------------------------------------------------------------------------------------------------------
# pack_by_length
# ------------------------------------------------------------------------------------------------------


def test_pack_by_length_puts_similar_lengths_together_longest_first():
    assert pack_by_length([100, 30, 95, 35, 90], token_budget=300) == [[0, 2, 4], [3, 1]]
    assert pack_by_length([], token_budget=10) == []


@pytest.mark.parametrize("seed", range(5))
def test_pack_by_length_keeps_every_row_once_and_stays_under_the_budget(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 400) for _ in range(rng.randint(1, 60))]
    budget = 512
    batches = pack_by_length(lengths, budget)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        padded = len(b) * max(lengths[i] for i in b)
        assert padded <= budget
        assert lengths[b[0]] == max(lengths[i] for i in b)  # the first row sets the padded width


def test_a_row_longer_than_the_budget_gets_a_micro_batch_of_its_own():
    batches = pack_by_length([50, 900, 40, 700], token_budget=100)
    assert [1] in batches and [3] in batches
    assert sorted(i for b in batches for i in b) == [0, 1, 2, 3]
    assert all(len(b) * max([50, 900, 40, 700][i] for i in b) <= 100 for b in batches if len(b) > 1)


# ------------------------------------------------------------------------------------------------------
# pad and collate
# ------------------------------------------------------------------------------------------------------


def test_pad_right_pads_with_the_value_and_dtype():
    out = pad([[1, 2, 3], [4]], -7, torch.long)
    assert out.dtype == torch.long and out.tolist() == [[1, 2, 3], [4, -7, -7]]
    assert pad([[0.5], [1.5, 2.5]], 0.0, torch.float32).tolist() == [[0.5, 0.0], [1.5, 2.5]]


def test_collate_pads_right_and_masks_the_padding():
    short = make_trajectory(["A"], prompt_ids=(11, 12), action_ids=(21,), logprob=-0.5)
    long = make_trajectory(["A", "B"], prompt_ids=(11, 12, 13), action_ids=(31, 32), logprob=-2.0)
    batch = collate([short, long], token_advantages=[torch.tensor([0.0, 0.0, 1.5]), torch.full((7,), -1.0)])
    assert batch["input_ids"].tolist() == [[11, 12, 21, 0, 0, 0, 0], [11, 12, 13, 31, 32, 31, 32]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0, 0, 0], [1] * 7]
    assert batch["loss_mask"].tolist() == [[0, 0, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1, 1]]
    assert batch["old_logprobs"].tolist() == [[0, 0, -0.5, 0, 0, 0, 0], [0, 0, 0, -2, -2, -2, -2]]
    assert batch["turn_index"].tolist() == [[-1, -1, 0, -1, -1, -1, -1], [-1, -1, -1, 0, 0, 1, 1]]
    assert batch["advantages"].tolist() == [[0, 0, 1.5, 0, 0, 0, 0], [-1.0] * 7]
    assert batch["loss_mask"].dtype == torch.float32 and batch["input_ids"].dtype == torch.long
    assert "advantages" not in collate([short])


# ------------------------------------------------------------------------------------------------------
# the forward pass
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_forward_logprobs_equals_one_row_at_a_time(policy, demos, temperature):
    """The batched, right-padded pass that runs the output layer only on predicting positions gives each row's
    log-probs as a plain forward pass of that row alone, and 0 wherever loss_mask is 0."""
    model, _ = policy
    batch = collate(demos)
    with torch.no_grad():
        logprobs, logits, hidden = forward_logprobs(model, batch, model.device, None, temperature)
    assert hidden is None
    assert logprobs.shape == batch["input_ids"].shape and logprobs.dtype == torch.float32
    assert logits.shape == (int(batch["loss_mask"][:, 1:].sum()), model.config.vocab_size)
    # fp32: the batched pass sums in another order than one row alone (measured: up to 2e-5 apart)
    atol = logprob_atol(model, 5e-5)
    for i, t in enumerate(demos):
        ids = torch.tensor([t.token_ids], device=model.device)
        with torch.no_grad():
            alone = token_logprobs(model(input_ids=ids).logits, ids, temperature)[0]
        mask = torch.tensor(t.loss_mask, dtype=torch.bool, device=model.device)
        row = logprobs[i, : len(t.token_ids)]
        torch.testing.assert_close(row[mask], alone[mask], atol=atol, rtol=0)
        assert not row[~mask].any() and not logprobs[i, len(t.token_ids):].any()
        assert (row[mask] <= 0).all() and row[mask].sum() < -1.0


def test_forward_logprobs_returns_the_hidden_states_the_value_head_reads(policy, demos):
    model, _ = policy
    batch = collate(demos[:2])
    with torch.no_grad():
        _, _, hidden = forward_logprobs(model, batch, model.device, None, 1.0, need_hidden=True)
        plain = hidden_states(model, batch, model.device)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert hidden.shape == (*batch["input_ids"].shape, model.config.hidden_size)
    torch.testing.assert_close(hidden, plain, atol=1e-5, rtol=0)
    # the decoder's last hidden state is what the output layer reads: lm_head(hidden) = the model's logits
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        from_hidden = model.get_output_embeddings()(plain)
    torch.testing.assert_close(from_hidden[real], logits[real], atol=1e-3, rtol=0)


def test_shared_prefix_length_counts_the_common_start_and_leaves_every_row_a_token():
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 1, 0], [5, 6, 7, 8, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0]])
    assert shared_prefix_length(ids, mask) == 3
    assert shared_prefix_length(ids[[0, 2]], mask[[0, 2]]) == 3  # row 2 has 4 tokens: one stays its own
    assert shared_prefix_length(ids[:1], mask[:1]) == 0  # one row: nothing to share
    assert shared_prefix_length(torch.tensor([[1, 2], [3, 4]]), torch.ones(2, 2, dtype=torch.long)) == 0


def test_the_shared_start_gives_the_hidden_states_and_gradients_of_whole_rows(policy, tokenizer, monkeypatch):
    """search_qa demonstrations of different questions start with the same system prompt (about half their
    tokens). Run once for all rows, it gives the hidden states, the log-probs and the weight gradients of
    the rows run whole, in fp32."""
    model, _ = policy
    demos = expert_rollout(tokenizer, "search_qa", load_tasks("search_qa", "train")[:3])
    batch = collate(demos, [torch.ones(len(d.token_ids)) for d in demos])
    p = shared_prefix_length(batch["input_ids"], batch["attention_mask"])
    assert 100 < p < min(len(d.token_ids) for d in demos) and p < 0.7 * max(len(d.token_ids) for d in demos)
    real = batch["attention_mask"].bool()
    params = [model.model.layers[0].self_attn.q_proj.weight, model.model.layers[-1].mlp.down_proj.weight,
              model.get_input_embeddings().weight]
    out = {}
    for share in (False, True):
        monkeypatch.setattr(batching, "SHARE_PREFIX", share)
        logprobs, _, hidden = forward_logprobs(model, batch, model.device, None, 1.0, need_hidden=True)
        grads = torch.autograd.grad(logprobs.sum() + hidden[real].pow(2).mean(), params)
        out[share] = (hidden.detach()[real], logprobs.detach(), grads)
    torch.testing.assert_close(out[True][0], out[False][0], atol=5e-4, rtol=1e-4)
    torch.testing.assert_close(out[True][1], out[False][1], atol=1e-4, rtol=0)
    for shared, whole in zip(out[True][2], out[False][2]):
        assert ((shared - whole).norm() / whole.norm()) < 1e-4


def test_entropy_of_the_logits_rows():
    assert entropy(torch.zeros(3, 8)) == pytest.approx(math.log(8))
    assert entropy(torch.tensor([[0.0, -1e4]])) == pytest.approx(0.0, abs=1e-6)
    logits = torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
    p = torch.softmax(logits, -1)
    assert entropy(logits) == pytest.approx(float(-(p * p.log()).sum(-1).mean()), rel=1e-6)
    assert entropy(torch.zeros(0, 8)) == 0.0


# ------------------------------------------------------------------------------------------------------
# loss scale and micro-batch shares
# ------------------------------------------------------------------------------------------------------


def test_loss_scale_is_2_to_the_10_under_fp16_only():
    assert loss_scale(torch.float16) == 1024.0
    assert loss_scale(torch.bfloat16) == loss_scale(None) == 1.0


def test_unscale_gradients_divides_every_gradient_by_the_scale():
    a, b, c = (torch.ones(n, requires_grad=True) for n in (2, 3, 1))
    (1024.0 * (3 * a.sum() + 5 * b.sum())).backward()
    unscale_gradients([a, b, c], 1024.0)
    assert a.grad.tolist() == [3.0, 3.0] and b.grad.tolist() == [5.0] * 3 and c.grad is None
    unscale_gradients([a], 1.0)
    assert a.grad.tolist() == [3.0, 3.0]


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo"])
def test_row_averaged_losses_weigh_micro_batches_by_their_rows(loss_type):
    lengths = [120, 40, 300, 90, 90, 15, 200]
    batches = pack_by_length(lengths, token_budget=400)
    assert len(batches) > 1
    shares = [micro_batch_loss(loss_type, len(b), len(lengths)) for b in batches]
    assert all(kind == loss_type for kind, _ in shares)
    assert sum(share for _, share in shares) == pytest.approx(1.0)
    assert [share for _, share in shares] == pytest.approx([len(b) / len(lengths) for b in batches])


@pytest.mark.parametrize("loss_type", ["dapo", "bnpo"])
def test_token_averaged_losses_divide_by_the_whole_batch_themselves(loss_type):
    assert micro_batch_loss(loss_type, 2, 8) == ("dapo", 1.0)


def test_use_bf16_follows_the_flag_else_the_device(monkeypatch):
    """None: on for a CPU with bf16 matrix units (COURSE_BF16 stands in for the hardware), off for one
    without (fp32 there: bf16 matmuls without the units are 100x slower), the model's choice on a GPU."""
    for forced, expected in (("1", True), ("0", False)):
        monkeypatch.setenv("COURSE_BF16", forced)
        assert use_bf16(None, torch.device("cpu")) is expected
    assert use_bf16(None, torch.device("cuda")) is False
    assert use_bf16(False, torch.device("cpu")) is False and use_bf16(True, torch.device("cuda")) is True
