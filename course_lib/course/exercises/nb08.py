"""The exercise checks of notebook 08, a critic again (`notebooks/08_critic.ipynb`): check_clipped_value_loss,
check_truncated_gae, check_r_squared.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_clipped_value_loss(fn: Any) -> Any:
    """Notebook 08: `fn(values, old_values, returns, clip) -> scalar`, PPO's clipped value loss."""
    return graded(
        fn,
        "clipped_value_loss",
        "return ½·mean(max((V − R)², (V_clip − R)²)) with V_clip = V_old + clip(V − V_old, −c, c).",
        _grade_clipped_value_loss,
    )


def _grade_clipped_value_loss(fn) -> str:
    import torch

    from course_lib.value_head import value_loss

    g = torch.Generator().manual_seed(8)
    for clip in (0.2, 0.5):
        values = torch.randn(7, generator=g).requires_grad_(True)
        old_values, returns = torch.randn(7, generator=g), torch.randn(7, generator=g)
        expected = value_loss(values, old_values, returns, clip=clip)
        (expected_grad,) = torch.autograd.grad(expected, values)
        got = fn(values, old_values, returns, clip)
        value = float(torch.as_tensor(got).detach())
        if abs(value - expected.item()) > 1e-6:
            raise ExerciseFailed(
                f"with clip = {clip} your loss is {value:.6f}, expected {expected.item():.6f}: "
                "V_clip = V_old + clip(V − V_old, −c, c); ½·mean(max((V − R)², (V_clip − R)²))."
            )
        (grad,) = torch.autograd.grad(got, values)
        if not torch.allclose(grad, expected_grad, atol=1e-6):
            raise ExerciseFailed(
                "the value is right but the gradient is not: only `values` should carry one."
            )
    return "the max keeps the worse error, so a value step cannot profit from jumping more than c."


def check_truncated_gae(fn: Any) -> Any:
    """Notebook 08: `fn(rewards, values, last_value, gamma, lam) -> [T]`, GAE bootstrapped past a cut
    episode."""
    return graded(fn, "truncated_gae",
                  "run GAE's backwards pass starting from next_value = last_value.",
                  _grade_truncated_gae)


def _grade_truncated_gae(fn) -> str:
    import torch

    from course_lib.credit import gae

    rewards, values = [0.0, -0.1, 0.0, 0.5], [0.3, 0.2, 0.4, 0.6]
    for last_value, gamma, lam in ((0.0, 1.0, 0.95), (0.7, 0.9, 0.8), (0.7, 1.0, 1.0)):
        delta_last = rewards[-1] + gamma * last_value - values[-1]
        manual = [0.0] * 4
        nxt = 0.0
        for t in reversed(range(4)):
            d = delta_last if t == 3 else rewards[t] + gamma * values[t + 1] - values[t]
            nxt = d + gamma * lam * nxt
            manual[t] = nxt
        expected = torch.tensor(manual)
        got = torch.as_tensor(fn(rewards, values, last_value, gamma, lam), dtype=torch.float32)
        if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-5):
            raise ExerciseFailed(
                f"with last_value = {last_value}, γ = {gamma}, λ = {lam} you gave "
                f"{[round(float(x), 4) for x in got]}, expected {[round(float(x), 4) for x in expected]}."
                " Start the backwards pass with next_value = last_value instead of 0."
            )
        if last_value == 0.0 and not torch.allclose(
            got, gae(rewards, values, gamma=gamma, lam=lam)[0], atol=1e-5
        ):
            raise ExerciseFailed("with last_value = 0 your answer should equal course_lib.credit.gae.")
    return "a truncated episode keeps the critic's estimate of what would have come next."


def check_r_squared(fn: Any) -> Any:
    """Notebook 08: `fn(predictions, targets) -> float`, R² = 1 − Σ(y − ŷ)² / Σ(y − ȳ)²."""
    return graded(
        fn,
        "r_squared",
        "return 1 − (sum of squared errors) / (sum of squares around the targets' mean).",
        _grade_r_squared,
    )


def _grade_r_squared(fn) -> str:
    import numpy as np

    cases = [
        ([0.1, 0.4, 0.5, 0.9], [0.0, 0.5, 0.5, 1.0]),
        ([0.6, 0.7, 0.8, 0.9], [0.0, 0.5, 0.5, 1.0]),  # the right order, shifted up: R² < correlation²
        ([0.5, 0.5, 0.5, 0.5], [0.0, 0.5, 0.5, 1.0]),
    ]   # the mean itself: R² = 0
    for predictions, targets in cases:
        y, p = np.asarray(targets, float), np.asarray(predictions, float)
        expected = 1 - ((y - p) ** 2).sum() / ((y - y.mean()) ** 2).sum()
        got = float(fn(predictions, targets))
        if not abs(got - expected) < 1e-6:
            raise ExerciseFailed(
                f"for predictions {predictions} and targets {targets} you gave {got:.4f}, expected "
                f"{expected:.4f}. R² compares the errors with the spread of the targets around their "
                "own mean; it is not the squared correlation, which forgives a biased critic."
            )
    return "a critic that predicts the mean scores 0, a biased one can score below 0, a perfect one 1."
