"""The exercise checks of notebook 08, a critic again (`notebooks/08_critic.ipynb`): check_gae (the key idea:
GAE with a value baseline), check_clipped_value_loss, check_truncated_gae, check_r_squared.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_gae(fn: Any) -> Any:
    """Notebook 08: `fn(rewards, values, gamma, lam) -> (advantages [T], returns [T])`, GAE(γ, λ) over the
    turns of one finished episode and the critic's targets."""
    return graded(fn, "my_gae",
                  "walk backwards: δ_t = r_t + γ·V_{t+1} − V_t (V = 0 after the last turn), "
                  "A_t = δ_t + γλ·A_{t+1}; returns_t = A_t + V_t.",
                  _grade_gae)


# (rewards, values, γ, λ): a malformed turn early and success at the end; then the course's γ and λ
_GAE_CASES = [([0.0, -0.1, 0.0, 0.0, 1.0], [0.4, 0.5, 0.3, 0.6, 0.8], 0.9, 0.8),
              ([0.0, 0.0, 1.0], [0.2, 0.6, 0.7], 1.0, 0.95)]


def _gae_variant(rewards, values, gamma, lam, *, next_at_end: str = "zero", factor: str = "γλ",
                 direction: str = "backward", subtract_value: bool = True):
    """GAE's advantages the right way or with one mistake: next_at_end "zero" (right), "last" (V_{T−1} again)
    or "first" (V_0, a wrapped index); factor "γλ" (right), "λ" or "γ"; direction "backward" (right) or
    "forward"; subtract_value False drops the − V_t of δ_t."""
    import torch

    n = len(rewards)
    end = {"zero": 0.0, "last": values[-1], "first": values[0]}[next_at_end]
    baseline = values if subtract_value else [0.0] * n
    delta = [rewards[t] + gamma * (values[t + 1] if t + 1 < n else end) - baseline[t] for t in range(n)]
    decay = {"γλ": gamma * lam, "λ": lam, "γ": gamma}[factor]
    out, carried = [0.0] * n, 0.0
    for t in (reversed(range(n)) if direction == "backward" else range(n)):
        carried = delta[t] + decay * carried
        out[t] = carried
    return torch.tensor(out)


def _grade_gae(fn) -> str:
    import torch

    from course_lib.credit import gae

    for rewards, values, gamma, lam in _GAE_CASES:
        expected, expected_returns = gae(rewards, values, gamma=gamma, lam=lam)
        answer = fn(list(rewards), list(values), gamma, lam)
        if not isinstance(answer, (tuple, list)) or len(answer) != 2:
            raise ExerciseFailed("return a pair (advantages, returns), one value per turn in each")
        got, got_returns = (torch.as_tensor(x, dtype=torch.float32).flatten() for x in answer)
        if got.shape != expected.shape or got_returns.shape != expected.shape:
            raise ExerciseFailed(f"got shapes {tuple(got.shape)} and {tuple(got_returns.shape)}, expected "
                                 f"{tuple(expected.shape)} each: one advantage and one return per turn")
        case = f"for r = {rewards}, V = {values}, γ = {gamma}, λ = {lam}"
        swapped = torch.allclose(got, expected_returns, atol=1e-5) and torch.allclose(got_returns, expected,
                                                                                        atol=1e-5)
        if swapped:
            raise ExerciseFailed("you returned (returns, advantages): the advantages come first")
        if not torch.allclose(got, expected, atol=1e-5):
            raise ExerciseFailed(f"{case} your advantages are {_rounded(got)}, expected "
                                 f"{_rounded(expected)}. " + _gae_hint(got, rewards, values, gamma, lam))
        if not torch.allclose(got_returns, expected_returns, atol=1e-5):
            raise ExerciseFailed(f"{case} your advantages are right but your returns are "
                                 f"{_rounded(got_returns)}, expected {_rounded(expected_returns)}. "
                                 + _returns_hint(got_returns, rewards, values, gamma, expected))
    return ("the success on the last turn flows back to earlier turns, shrunk by γλ per turn, and each turn "
            "is measured against what V expected there.")


def _gae_hint(got, rewards, values, gamma, lam) -> str:
    """What the advantages `got` did wrong, when it is a typical mistake."""
    import torch

    mistakes = [
        (dict(next_at_end="last"), "At the last turn you bootstrapped from V_{T−1} again: the episode is "
         "over, so the value after the last turn is 0, δ_{T−1} = r_{T−1} − V_{T−1}"),
        (dict(next_at_end="first"), "At the last turn you bootstrapped from V_0 (values[t + 1] wrapped "
         "round): the episode is over, so the value after the last turn is 0"),
        (dict(direction="forward"), "You ran the recursion forwards, from turn 0: A_t depends on what comes "
         "after t, so start at the last turn and walk back"),
        (dict(factor="λ"), "Each step back multiplies A_{t+1} by γλ, not by λ alone"),
        (dict(factor="γ"), "Each step back multiplies A_{t+1} by γλ, not by γ alone: λ is the knob"),
        (dict(subtract_value=False), "δ_t = r_t + γ·V_{t+1} − V_t: you did not subtract V_t, the baseline"),
    ]
    for options, hint in mistakes:
        if torch.allclose(got, _gae_variant(rewards, values, gamma, lam, **options), atol=1e-5):
            return hint
    if lam != gamma and torch.allclose(got, _gae_variant(rewards, values, lam, gamma), atol=1e-5):
        return "You swapped γ and λ: γ discounts V_{t+1} inside δ_t; only the recursion uses γλ"
    return ("δ_t = r_t + γ·V_{t+1} − V_t with V = 0 after the last turn, then A_t = δ_t + γλ·A_{t+1}, from "
            "the last turn back")


def _returns_hint(got_returns, rewards, values, gamma, advantages) -> str:
    import torch

    values = torch.tensor(values)
    monte_carlo = _gae_variant(rewards, [0.0] * len(rewards), gamma, 1.0)
    if torch.allclose(got_returns, advantages, atol=1e-5):
        return "These are the advantages again: the critic's target is returns_t = A_t + V_t"
    if torch.allclose(got_returns, advantages - values, atol=1e-5):
        return "The critic's target adds V_t back: returns_t = A_t + V_t, not A_t − V_t"
    if torch.allclose(got_returns, monte_carlo, atol=1e-5):
        return ("These are the Monte Carlo returns G_t; GAE's target is A_t + V_t, which equals G_t only at "
                "λ = 1")
    return "The critic's target is returns_t = A_t + V_t"


def _rounded(values) -> list[float]:
    return [round(float(v), 4) + 0.0 for v in values]


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
