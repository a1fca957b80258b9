"""The exercise checks of notebook 04, the masked policy-gradient loss (`notebooks/04_policy_loss.ipynb`):
check_reinforce_loss, check_policy_loss, check_episode_weights.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

import math
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


def check_policy_loss(fn: Any) -> Any:
    """Notebook 04: `fn(logprobs, old_logprobs, advantages, mask, eps_low, eps_high) -> scalar`, the masked,
    clipped policy loss, a mean over the batch's model tokens."""
    return graded(fn, "my_policy_loss",
                  "return −Σ m·min(w·A, clip(w, 1−ε_low, 1+ε_high)·A) / Σ m with w = exp(ℓ − ℓ_old).",
                  _grade_policy_loss)


def _grade_policy_loss(fn) -> str:
    import torch

    from course_lib.losses import policy_loss

    eps = {"eps_low": 0.2, "eps_high": 0.28}
    ratios = [0.5, 0.7, 0.8, 1.0, 1.1, 1.25, 1.3, 2.0]
    for advantage in (1.0, -1.0):  # one token at a time: the clip, without the mask and the count
        expected, got, expected_grads, grads = [], [], [], []
        for w in ratios:
            logprob = torch.tensor([[math.log(w)]], requires_grad=True)
            args = (logprob, torch.zeros(1, 1), torch.tensor([advantage]), torch.ones(1, 1))
            reference, _ = policy_loss(*args, loss_type="bnpo", **eps)
            mine = fn(*args, **eps)
            expected.append(reference.item())
            is_tensor = torch.is_tensor(mine)
            got.append(float(mine.detach() if is_tensor else mine))
            expected_grads.append(torch.autograd.grad(reference, logprob)[0].item())
            grads.append(torch.autograd.grad(mine, logprob)[0].item() if is_tensor and mine.requires_grad
                         else 0.0)
        _explain_clip(advantage, ratios, expected, got)
        if any(abs(g - e) > 1e-6 for g, e in zip(grads, expected_grads)):
            raise ExerciseFailed(
                f"for A = {advantage:+.0f} the values are right but the gradients are not: you gave "
                f"{_rounded(grads)}, expected {_rounded(expected_grads)} at w = {ratios}. Compute w = "
                "exp(ℓ − ℓ_old) from logprobs so that it carries their gradient (detach only old_logprobs)"
            )

    logprobs, advantages, mask = _loss_batch()
    g = torch.Generator().manual_seed(40)  # ratios from 0.34 to 2.98: clipped above and below
    old_logprobs = logprobs.detach() + 0.6 * torch.randn(logprobs.shape, generator=g)
    expected, _ = policy_loss(logprobs, old_logprobs, advantages, mask, loss_type="bnpo", **eps)
    (expected_grad,) = torch.autograd.grad(expected, logprobs)
    got = fn(logprobs, old_logprobs, advantages, mask, **eps)
    (grad,) = torch.autograd.grad(got, logprobs)
    if grad[mask == 0].abs().max().item() != 0.0:
        raise ExerciseFailed("positions with mask 0 (the prompt, tool output, padding) got a gradient: "
                             "multiply each token's term by m before summing, so that only the model's "
                             "tokens count")
    if abs(got.item() - expected.item()) > 1e-6:
        raise ExerciseFailed(_explain_count(logprobs, old_logprobs, advantages, mask, eps, got.item(),
                                            expected.item()))
    if (grad - expected_grad).abs().max().item() > 1e-6:
        raise ExerciseFailed("on a batch the value is right but the gradient is not: is a detach() in the "
                             "wrong place?")
    return ("value and gradient equal policy_loss(..., loss_type='bnpo'): clipped on the right side for good "
            "and bad actions, masked, and averaged over the model's tokens.")


def _rounded(values) -> list[float]:
    return [round(v, 3) + 0.0 for v in values]


def _explain_clip(advantage, ratios, expected, got) -> None:
    """Raise a hint when the one-token losses `got` differ from `expected` for this advantage."""
    if all(abs(g - e) <= 1e-6 for g, e in zip(got, expected)):
        return
    if all(abs(g + e) <= 1e-6 for g, e in zip(got, expected)):
        raise ExerciseFailed("your values have the wrong sign: that is the objective, which training "
                             "maximises. The loss that an optimiser minimises is minus the objective")
    shown = f"at w = {ratios} you gave {_rounded(got)}, expected {_rounded(expected)}"
    if advantage > 0:
        raise ExerciseFailed(f"for a good action (A = +1) {shown}. The loss is −min(w·A, clip(w, 1−ε_low, "
                             "1+ε_high)·A): it follows −w·A and stops falling once w passes 1 + ε_high")
    raise ExerciseFailed(
        f"for a bad action (A = −1) {shown}. Multiplying by a negative A reverses the order, so the min "
        "picks the clipped term when w < 1 − ε_low and the unclipped w·A when w > 1 + ε_high: take the min "
        "of the two products w·A and clip(w)·A, not of the two ratios"
    )


def _explain_count(logprobs, old_logprobs, advantages, mask, eps, got, expected) -> str:
    """A hint for a loss whose masked sum is right but whose divisor is not, else the two values."""
    from course_lib.losses import policy_loss

    total = expected * mask.sum().item()  # the masked sum of the per-token losses
    B, T = mask.shape
    grpo, _ = policy_loss(logprobs, old_logprobs, advantages, mask, loss_type="grpo", **eps)
    if abs(got - total / (B * T)) < 1e-6:
        return (f"you divided by all B·T = {B * T} positions, prompt, tool output and padding included: "
                f"divide by Σm = {int(mask.sum())}, the number of tokens the model wrote")
    if abs(got - total / B) < 1e-6:
        return (f"you divided by the number of episodes B = {B}: divide by Σm = {int(mask.sum())}, the "
                "number of tokens the model wrote")
    if abs(got - total) < 1e-6:
        return f"you returned the sum: divide it by Σm = {int(mask.sum())}, the number of the model's tokens"
    if abs(got - grpo.item()) < 1e-6:
        return ("you averaged each episode over its own tokens, then the episodes: that is "
                "loss_type='grpo', where a token of a short episode weighs more. Here every model token "
                "counts once: divide the batch's masked sum by Σm")
    return (f"on a batch of {B} episodes your loss is {got:.6f}, expected {expected:.6f}: "
            "−Σ m·min(w·A, clip(w)·A) / Σ m, with each episode's advantage A_b on all of its tokens")


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
