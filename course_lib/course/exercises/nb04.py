"""The exercise checks of notebook 04, the masked policy-gradient loss (`notebooks/04_policy_loss.ipynb`):
check_reinforce_loss, check_clipped_objective, check_episode_weights.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def _loss_batch():
    import torch

    g = torch.Generator().manual_seed(4)
    logprobs = (-torch.rand(3, 6, generator=g) * 3).requires_grad_(True)
    mask = torch.tensor([[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [0, 1, 0, 1, 0, 0]], dtype=torch.float32)
    advantages = torch.tensor([1.0, -0.5, 2.0])
    return logprobs, advantages, mask


def check_reinforce_loss(fn: Any) -> Any:
    """Notebook 04: `fn(logprobs, advantages, mask) -> scalar`, the token-mean REINFORCE loss."""
    return graded(fn, "my_reinforce_loss",
                  "return −Σ A_b·ℓ_bt·m_bt / Σ m_bt.",
                  _grade_reinforce_loss)


def _grade_reinforce_loss(fn) -> str:
    from course_lib.losses import policy_loss

    logprobs, advantages, mask = _loss_batch()
    expected, _ = policy_loss(logprobs, logprobs.detach(), advantages, mask, loss_type="bnpo")
    (expected_grad,) = __import__("torch").autograd.grad(expected, logprobs)
    # policy_loss's value is −mean(w·A) with w = 1; REINFORCE's value is −mean(A·ℓ): same gradient,
    # other value.
    expected_value = -(advantages[:, None] * logprobs * mask).sum() / mask.sum()
    got = fn(logprobs, advantages, mask)
    if abs(got.item() - expected_value.item()) > 1e-6:
        raise ExerciseFailed(f"your loss is {got.item():.6f}, expected {expected_value.item():.6f}: "
                             "−Σ A_b·ℓ_bt·m_bt / Σ m_bt (advantages [B] broadcast over tokens).")
    (grad,) = __import__("torch").autograd.grad(got, logprobs)
    if (grad - expected_grad).abs().max().item() > 1e-6:
        raise ExerciseFailed("the value is right but the gradient is not: is a detach() in the wrong place?")
    if grad[mask == 0].abs().max().item() != 0.0:
        raise ExerciseFailed("masked positions got a gradient: multiply by the mask before summing.")
    return (
        "value and gradient equal policy_loss(..., loss_type='bnpo') with old_logprobs = logprobs.detach()."
    )


def check_clipped_objective(fn: Any) -> Any:
    """Notebook 04: `fn(ratio, advantage, eps) -> tensor`, the PPO clipped objective min(wA, clip(w)A)."""
    return graded(fn, "clipped",
                  "return min(w·A, clip(w, 1−ε, 1+ε)·A), elementwise.",
                  _grade_clipped_objective)


def _grade_clipped_objective(fn) -> str:
    import torch

    ratio = torch.tensor([0.5, 0.79, 0.8, 1.0, 1.1, 1.2, 1.21, 2.0])
    for advantage in (1.0, -1.0, 0.5):
        expected = torch.min(ratio * advantage, ratio.clamp(0.8, 1.2) * advantage)
        got = fn(ratio, advantage, 0.2)
        if not torch.allclose(torch.as_tensor(got, dtype=torch.float32), expected, atol=1e-6):
            raise ExerciseFailed(
                f"for A = {advantage} you gave {[round(float(x), 3) for x in got]}, expected "
                f"{[round(float(x), 3) for x in expected]}. Take the min of the unclipped and "
                "the clipped term (clip w to [1−ε, 1+ε]) and do not negate it."
            )
    return "the min makes the objective pessimistic: clipping only removes the incentive to move further."


def check_episode_weights(fn: Any) -> Any:
    """Notebook 04: `fn(lengths, T, loss_type) -> list[float]`, the weight each token of episode b gets."""
    return graded(
        fn,
        "token_weights",
        "return the weight of one token of each episode, from the table of the four normalisations.",
        _grade_episode_weights,
    )


def _grade_episode_weights(fn) -> str:
    import torch

    from course_lib.losses import policy_loss

    lengths, T = [2, 9, 5], 12
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        logprobs = torch.zeros(len(lengths), T, requires_grad=True)
        loss, _ = policy_loss(
            logprobs,
            logprobs.detach(),
            torch.ones(len(lengths)),
            mask,
            loss_type=loss_type,
            max_completion_length=T,
        )
        (grad,) = torch.autograd.grad(loss, logprobs)
        expected = [-grad[b, 0].item() for b in range(len(lengths))]
        got = [float(x) for x in fn(lengths, T, loss_type)]
        if len(got) != len(expected) or any(abs(g - e) > 1e-6 for g, e in zip(got, expected)):
            raise ExerciseFailed(f"for {loss_type} with lengths {lengths}, T = {T} you gave "
                                 f"{[round(g, 4) for g in got]}, expected {[round(e, 4) for e in expected]} "
                                 "(T is the padded length, a setting, not the longest episode's length).")
    return (
        "grpo divides by each episode's own length; bnpo/dapo by the batch's tokens; dr_grpo by a constant."
    )
