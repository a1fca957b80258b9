"""Tests for course_lib.losses: TRL 1.16's own `_compute_loss` as the reference, plus hand cases."""

from __future__ import annotations

import math
import os
import tempfile
import warnings
import zlib
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.losses import masked_mean, policy_loss, sft_loss, token_logprobs

TOL = 1e-6


# ---------------------------------------------------------------------------------------------------------
# TRL's real GRPOTrainer._compute_loss on our tensors
# ---------------------------------------------------------------------------------------------------------


class _OneProcess:
    """The few Accelerator methods `_compute_loss` calls, for a single process (gather = identity)."""

    num_processes = 1
    is_main_process = True

    def gather(self, tensor):
        return tensor

    def gather_for_metrics(self, tensor):
        return tensor

    def reduce(self, tensor, reduction="sum"):
        return tensor

    def pad_across_processes(self, tensor, dim=0, pad_index=0):
        return tensor


def _trl_trainer(logps, *, loss_type, beta, epsilon, epsilon_high, max_completion_length):
    """A GRPOTrainer built without __init__: only the attributes `_compute_loss` reads, taken from a real
    GRPOConfig exactly as GRPOTrainer.__init__ copies them, and a model forward replaced by `logps`."""
    from trl import GRPOConfig, GRPOTrainer

    with warnings.catch_warnings():  # transformers' own deprecation notice about gradient_checkpointing
        warnings.simplefilter("ignore", FutureWarning)
        args = GRPOConfig(
            output_dir=os.path.join(tempfile.gettempdir(), "course_lib_trl_reference"),  # never written
            loss_type=loss_type,
            beta=beta,
            epsilon=epsilon,
            epsilon_high=epsilon_high,
            max_completion_length=max_completion_length,
            report_to="none",
            use_cpu=True,
        )
    trainer = object.__new__(GRPOTrainer)
    trainer.args = args
    trainer.loss_type = args.loss_type
    trainer.beta = args.beta
    trainer.epsilon_low = args.epsilon
    trainer.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    trainer.max_completion_length = args.max_completion_length
    trainer.importance_sampling_level = args.importance_sampling_level
    trainer.off_policy_mask_threshold = args.off_policy_mask_threshold
    trainer.top_entropy_quantile = args.top_entropy_quantile
    trainer.use_vllm = args.use_vllm
    trainer.vllm_importance_sampling_correction = args.vllm_importance_sampling_correction
    trainer.entropy_coef = args.entropy_coef
    trainer.use_adaptive_entropy = args.use_adaptive_entropy
    trainer._entropy_bonus_enabled = args.entropy_coef != 0.0 or args.use_adaptive_entropy
    trainer.aux_loss_enabled = False  # not a mixture-of-experts model
    trainer.current_gradient_accumulation_steps = 1
    trainer.accelerator = _OneProcess()
    trainer.model = SimpleNamespace(training=True)
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    # the model forward: return our chosen per-token log-probs (and zero entropies, which only feed metrics)
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logps, torch.zeros_like(logps), None)
    return trainer


def _batch(seed=0, B=4, T=7, dtype=torch.float64):
    """Random log-probs with ratios far enough from 1 to hit both clip edges, a completion mask with
    padding (the last row fully masked when B > 2) and a tool mask with holes, as in a multi-turn
    rollout. Needs B >= 2."""
    g = torch.Generator().manual_seed(seed)
    logps = -torch.rand(B, T, generator=g, dtype=dtype) * 3
    old = logps + (torch.rand(B, T, generator=g, dtype=dtype) - 0.5) * 0.9  # w in about [0.64, 1.57]
    ref = logps + (torch.rand(B, T, generator=g, dtype=dtype) - 0.5)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    if B > 2:
        lengths[-1] = 0
    completion_mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    tool_mask = (torch.rand(B, T, generator=g) > 0.25).long()
    tool_mask[:2, 0] = 1
    adv_seq = torch.randn(B, generator=g, dtype=dtype)
    adv_tok = torch.randn(B, T, generator=g, dtype=dtype)
    # make sure both clip edges are hit: w = 1.5 with A > 0 at (0, 0), w = 0.6 with A < 0 at (1, 0)
    old[0, 0], old[1, 0] = logps[0, 0] - math.log(1.5), logps[1, 0] - math.log(0.6)
    adv_seq[0], adv_seq[1] = adv_seq[0].abs(), -adv_seq[1].abs()
    adv_tok[0, 0], adv_tok[1, 0] = adv_tok[0, 0].abs(), -adv_tok[1, 0].abs()
    return SimpleNamespace(
        logps=logps,
        old=old,
        ref=ref,
        completion_mask=completion_mask,
        tool_mask=tool_mask,
        adv_seq=adv_seq,
        adv_tok=adv_tok,
    )


def _trl_loss_and_grad(
    batch,
    advantages,
    *,
    loss_type,
    beta,
    epsilon,
    epsilon_high,
    max_completion_length,
    num_items_in_batch=None,
    old=True,
):
    logps = batch.logps.clone().requires_grad_(True)
    B, T = logps.shape
    trainer = _trl_trainer(
        logps,
        loss_type=loss_type,
        beta=beta,
        epsilon=epsilon,
        epsilon_high=epsilon_high,
        max_completion_length=max_completion_length,
    )
    mask = batch.completion_mask * batch.tool_mask
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": batch.completion_mask,
        "tool_mask": batch.tool_mask,
        "advantages": advantages,
        "num_items_in_batch": mask.sum() if num_items_in_batch is None else torch.tensor(num_items_in_batch),
    }
    if old:
        inputs["old_per_token_logps"] = batch.old
    if beta != 0.0:
        inputs["ref_per_token_logps"] = batch.ref
    loss = trainer.compute_loss(None, inputs)
    loss.backward()
    return loss.detach(), logps.grad, trainer._metrics["train"]


def _our_loss_and_grad(batch, advantages, *, old=True, **kwargs):
    logps = batch.logps.clone().requires_grad_(True)
    mask = (batch.completion_mask * batch.tool_mask).to(logps.dtype)
    old_logps = batch.old if old else logps.detach()
    loss, stats = policy_loss(logps, old_logps, advantages, mask, ref_logprobs=batch.ref, **kwargs)
    loss.backward()
    return loss.detach(), logps.grad, stats


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("advantage_shape", ["[B]", "[B, T]"])
@pytest.mark.parametrize("eps", [(0.2, None), (0.2, 0.28)])
def test_policy_loss_equals_trl(loss_type, beta, advantage_shape, eps):
    batch = _batch(seed=zlib.crc32(f"{loss_type} {beta} {advantage_shape}".encode()))
    advantages = batch.adv_seq if advantage_shape == "[B]" else batch.adv_tok
    eps_low, eps_high = eps
    T = batch.logps.size(1)
    trl_loss, trl_grad, metrics = _trl_loss_and_grad(
        batch,
        advantages,
        loss_type=loss_type,
        beta=beta,
        epsilon=eps_low,
        epsilon_high=eps_high,
        max_completion_length=T,
    )
    loss, grad, stats = _our_loss_and_grad(
        batch, advantages, loss_type=loss_type, beta=beta, eps_low=eps_low, eps_high=eps_high
    )
    assert abs(loss.item() - trl_loss.item()) <= TOL
    assert torch.allclose(grad, trl_grad, atol=TOL, rtol=0)
    assert grad.abs().sum() > 0  # the comparison is not vacuous: gradients flow and both clip edges are hit
    assert stats["clip_fraction_low"] > 0 and stats["clip_fraction_high"] > 0
    # the logged diagnostics agree with TRL's metrics too
    assert stats["clip_fraction_low"] == pytest.approx(metrics["clip_ratio/low_mean"][-1], abs=TOL)
    assert stats["clip_fraction_high"] == pytest.approx(metrics["clip_ratio/high_mean"][-1], abs=TOL)
    assert stats["clip_fraction_region"] == pytest.approx(metrics["clip_ratio/region_mean"][-1], abs=TOL)
    if beta != 0.0:
        assert stats["kl"] == pytest.approx(metrics["kl"][-1], abs=TOL)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_policy_loss_equals_trl_on_policy(loss_type):
    """One update per rollout: TRL uses ℓ.detach() as ℓ_old when no old log-probs are given."""
    batch = _batch(seed=11)
    T = batch.logps.size(1)
    trl_loss, trl_grad, _ = _trl_loss_and_grad(
        batch,
        batch.adv_seq,
        loss_type=loss_type,
        beta=0.1,
        epsilon=0.2,
        epsilon_high=None,
        max_completion_length=T,
        old=False,
    )
    loss, grad, _ = _our_loss_and_grad(batch, batch.adv_seq, old=False, loss_type=loss_type, beta=0.1)
    assert abs(loss.item() - trl_loss.item()) <= TOL
    assert torch.allclose(grad, trl_grad, atol=TOL, rtol=0)


def test_dr_grpo_and_dapo_constants_equal_trl():
    """max_completion_length larger than T (dr_grpo) and a generation-batch token count (dapo)."""
    batch = _batch(seed=5)
    T = batch.logps.size(1)
    trl_loss, trl_grad, _ = _trl_loss_and_grad(
        batch,
        batch.adv_seq,
        loss_type="dr_grpo",
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.3,
        max_completion_length=T + 9,
    )
    loss, grad, _ = _our_loss_and_grad(
        batch, batch.adv_seq, loss_type="dr_grpo", eps_high=0.3, max_completion_length=T + 9
    )
    assert abs(loss.item() - trl_loss.item()) <= TOL and torch.allclose(grad, trl_grad, atol=TOL, rtol=0)

    trl_loss, trl_grad, _ = _trl_loss_and_grad(
        batch,
        batch.adv_seq,
        loss_type="dapo",
        beta=0.0,
        epsilon=0.2,
        epsilon_high=None,
        max_completion_length=T,
        num_items_in_batch=37,
    )
    loss, grad, _ = _our_loss_and_grad(batch, batch.adv_seq, loss_type="dapo", num_items_in_batch=37)
    assert abs(loss.item() - trl_loss.item()) <= TOL and torch.allclose(grad, trl_grad, atol=TOL, rtol=0)


@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(2, 6),
    T=st.integers(1, 12),
    seed=st.integers(0, 2**16),
    loss_type=st.sampled_from(["grpo", "bnpo", "dr_grpo", "dapo"]),
    beta=st.sampled_from([0.0, 0.1]),
    per_token_advantages=st.booleans(),
    eps_high=st.sampled_from([None, 0.28]),
)
def test_policy_loss_equals_trl_on_random_shapes(B, T, seed, loss_type, beta, per_token_advantages, eps_high):
    batch = _batch(seed=seed, B=B, T=T)
    advantages = batch.adv_tok if per_token_advantages else batch.adv_seq
    trl_loss, trl_grad, _ = _trl_loss_and_grad(
        batch,
        advantages,
        loss_type=loss_type,
        beta=beta,
        epsilon=0.2,
        epsilon_high=eps_high,
        max_completion_length=T,
    )
    loss, grad, _ = _our_loss_and_grad(batch, advantages, loss_type=loss_type, beta=beta, eps_high=eps_high)
    assert abs(loss.item() - trl_loss.item()) <= TOL
    assert torch.allclose(grad, trl_grad, atol=TOL, rtol=0)


# ---------------------------------------------------------------------------------------------------------
# hand cases
# ---------------------------------------------------------------------------------------------------------


def _leaf(values):
    return torch.tensor(values, dtype=torch.float64).requires_grad_(True)


def test_ratio_above_clip_with_positive_advantage_gets_no_gradient():
    # token 0: w = e^0.5 ≈ 1.65 > 1.2 with A > 0 -> clipped, zero gradient; token 1: w = 1 -> gradient −A/2
    logps = _leaf([[0.0, -1.0]])
    old = torch.tensor([[-0.5, -1.0]], dtype=torch.float64)
    loss, stats = policy_loss(
        logps, old, torch.tensor([2.0], dtype=torch.float64), torch.ones(1, 2), loss_type="dapo"
    )
    loss.backward()
    assert logps.grad[0, 0].item() == 0.0
    assert logps.grad[0, 1].item() == pytest.approx(-2.0 / 2)
    assert loss.item() == pytest.approx(-(1.2 * 2 + 1.0 * 2) / 2)
    assert stats["clip_fraction_high"] == 0.5 and stats["clip_fraction_low"] == 0.0


def test_ratio_below_clip_with_negative_advantage_gets_no_gradient():
    logps = _leaf([[-1.0]])
    old = torch.tensor([[-0.5]], dtype=torch.float64)  # w = e^-0.5 ≈ 0.61 < 0.8 with A < 0
    loss, stats = policy_loss(logps, old, torch.tensor([-1.0], dtype=torch.float64), torch.ones(1, 1))
    loss.backward()
    assert logps.grad.item() == 0.0
    assert loss.item() == pytest.approx(0.8)
    assert stats["clip_fraction_low"] == 1.0


def test_clipped_side_that_lowers_the_objective_keeps_its_gradient():
    # w ≈ 1.65 > 1.2 with A < 0: min picks the unclipped w·A, so the gradient −A·w flows
    logps = _leaf([[0.0]])
    old = torch.tensor([[-0.5]], dtype=torch.float64)
    loss, _ = policy_loss(logps, old, torch.tensor([-1.0], dtype=torch.float64), torch.ones(1, 1))
    loss.backward()
    assert logps.grad.item() == pytest.approx(math.exp(0.5))


def test_masked_tokens_get_exactly_zero_gradient():
    batch = _batch(seed=7)
    logps = batch.logps.clone().requires_grad_(True)
    mask = (batch.completion_mask * batch.tool_mask).double()
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        logps.grad = None
        loss, _ = policy_loss(
            logps, batch.old, batch.adv_tok, mask, loss_type=loss_type, ref_logprobs=batch.ref, beta=0.1
        )
        loss.backward()
        assert torch.all(logps.grad[mask == 0] == 0.0)
        assert torch.all(logps.grad[mask == 1] != 0.0)


def test_on_policy_loss_is_reinforce():
    # ℓ_old = ℓ: w = 1, and the gradient of the dapo loss is −A·m/Σm on every token
    logps = _leaf([[-1.0, -2.0, -0.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, stats = policy_loss(logps, logps.detach(), torch.tensor([0.5]).double(), mask)
    loss.backward()
    assert loss.item() == pytest.approx(-0.5)
    assert logps.grad[0].tolist() == pytest.approx([-0.25, -0.25, 0.0])
    assert stats["ratio_mean"] == 1.0 and stats["tokens"] == 2.0


def test_old_and_reference_log_probs_carry_no_gradient_even_if_not_detached():
    # The same numbers through tensors that still require gradients: the gradient is REINFORCE's as above,
    # not 0 (ℓ − ℓ_old differentiated on both sides) and not changed by the reference model's log-probs.
    logps = _leaf([[-1.0, -2.0, -0.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, _ = policy_loss(logps, logps, torch.tensor([0.5]).double(), mask)
    loss.backward()
    assert logps.grad[0].tolist() == pytest.approx([-0.25, -0.25, 0.0])
    grads = []
    for ref in (lambda lp: (lp * 0.5).detach(), lambda lp: lp * 0.5):
        lp = _leaf([[-1.0, -2.0, -0.5]])
        policy_loss(lp, lp, torch.tensor([0.5]).double(), mask, ref_logprobs=ref(lp), beta=0.1)[0].backward()
        grads.append(lp.grad[0].tolist())
    assert grads[1] == pytest.approx(grads[0])


def test_normalisations_by_hand():
    # per-token loss = −A·w = −1 on every token (w = 1, A = 1); row 0 has 3 tokens, row 1 has 1
    logps = torch.zeros(2, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.float64)
    adv = torch.ones(2, dtype=torch.float64)

    def loss_of(loss_type, **kw):
        return policy_loss(logps, logps, adv, mask, loss_type=loss_type, **kw)[0].item()

    assert loss_of("grpo") == pytest.approx(-1.0)  # mean(3/3, 1/1)
    assert loss_of("bnpo") == pytest.approx(-1.0)  # 4/4
    assert loss_of("dapo") == pytest.approx(-1.0)
    assert loss_of("dapo", num_items_in_batch=8) == pytest.approx(-0.5)
    assert loss_of("dr_grpo") == pytest.approx(-4 / (2 * 4))
    assert loss_of("dr_grpo", max_completion_length=10) == pytest.approx(-4 / (2 * 10))
    # an empty mask gives 0, not NaN
    empty = torch.zeros_like(mask)
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        assert policy_loss(logps, logps, adv, empty, loss_type=loss_type)[0].item() == 0.0


def test_kl_term_by_hand():
    # ℓ = 0, ℓ_ref = −1, on-policy (w = 1): k3 = e^-1 + 1 − 1 = e^-1; A = 0 leaves only β·k3
    logps = _leaf([[0.0]])
    ref = torch.tensor([[-1.0]], dtype=torch.float64)
    loss, stats = policy_loss(
        logps,
        logps.detach(),
        torch.zeros(1, dtype=torch.float64),
        torch.ones(1, 1),
        ref_logprobs=ref,
        beta=0.5,
    )
    assert loss.item() == pytest.approx(0.5 * math.exp(-1))
    assert stats["kl"] == pytest.approx(math.exp(-1))
    loss.backward()
    # d/dℓ [w·k3] at w = 1: ∂w/∂ℓ·k3 + ∂k3/∂ℓ = e^-1 + (−e^-1 + 1) = 1
    assert logps.grad.item() == pytest.approx(0.5 * 1.0)


def test_policy_loss_errors_are_helpful():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="choose one of"):
        policy_loss(x, x, torch.zeros(1), x, loss_type="ppo")
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(x, x, torch.zeros(1), x, beta=0.1)


# ---------------------------------------------------------------------------------------------------------
# token_logprobs, masked_mean, sft_loss
# ---------------------------------------------------------------------------------------------------------


def test_token_logprobs_matches_log_softmax_and_temperature():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=g, dtype=torch.float64)
    ids = torch.randint(0, 11, (2, 5), generator=g)
    for temperature in (1.0, 0.7):
        expected = torch.log_softmax(logits / temperature, -1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
        out = token_logprobs(logits, ids, temperature=temperature)
        assert out.shape == (2, 5)
        assert torch.all(out[:, 0] == 0)
        assert torch.allclose(out[:, 1:], expected)


def test_token_logprobs_upcasts_bf16():
    logits = torch.randn(1, 4, 7).to(torch.bfloat16)
    ids = torch.tensor([[0, 1, 2, 3]])
    out = token_logprobs(logits, ids)
    assert out.dtype == torch.float32
    expected = torch.log_softmax(logits.float(), -1)[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]
    assert torch.allclose(out[0, 1:], expected)


def test_masked_mean():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = torch.tensor([[1, 0, 1], [0, 0, 0]])
    assert masked_mean(x, m).item() == 2.0
    assert masked_mean(x, m, dim=-1).tolist() == [2.0, 0.0]


def test_sft_loss_uniform_logits_is_log_vocab():
    logits = torch.zeros(1, 4, 8)
    loss, stats = sft_loss(logits, torch.tensor([[1, 2, 3, 4]]))
    assert loss.item() == pytest.approx(math.log(8))
    assert stats["tokens"] == 3.0  # position 0 is never a target


def test_sft_loss_mask_selects_targets_by_hand():
    # vocabulary of 2; logits at t−1 favour token 0 by log 3 (p = 3/4)
    logits = torch.tensor([[[math.log(3.0), 0.0]] * 4])
    ids = torch.tensor([[0, 0, 1, 0]])
    mask = torch.tensor([[1, 1, 1, 0]])  # trains on targets t = 1 (token 0) and t = 2 (token 1)
    loss, stats = sft_loss(logits, ids, mask)
    assert loss.item() == pytest.approx(-(math.log(0.75) + math.log(0.25)) / 2)
    assert stats["tokens"] == 2.0 and stats["accuracy"] == 0.5


def test_sft_loss_masked_targets_get_no_gradient_and_padding_is_skipped():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 6, 5, generator=g).requires_grad_(True)
    ids = torch.randint(0, 5, (2, 6), generator=g)
    mask = torch.tensor([[0, 0, 1, 1, 0, 1], [0, 1, 1, 1, 1, 1]])
    loss, _ = sft_loss(logits, ids, mask)
    loss.backward()
    # logits at t−1 feed target t: a masked target leaves its predicting position untouched
    assert torch.all(logits.grad[0, [0, 3]] == 0)
    assert torch.all(logits.grad[0, 5] == 0)  # the last position predicts nothing
    flat = F.cross_entropy(logits[:, :-1].reshape(-1, 5), ids[:, 1:].reshape(-1), reduction="none")
    assert loss.item() == pytest.approx(
        (flat * mask[:, 1:].reshape(-1)).sum().item() / mask[:, 1:].sum().item()
    )

    attention = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    no_mask, stats = sft_loss(logits, ids, attention_mask=attention)
    assert stats["tokens"] == 5 + 2
    both, stats = sft_loss(logits, ids, mask, attention_mask=attention)
    assert stats["tokens"] == 3 + 2
