"""The exercise checks of notebook 08, a critic again (`notebooks/08_critic.ipynb`): check_gae (the key idea:
GAE with a value baseline), check_clipped_value_loss, check_truncated_gae, check_r_squared_parts.

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


def check_r_squared_parts(fn: Any) -> Any:
    """Notebook 08: `fn(predictions, targets) -> (r², offset, scale)`, the parts of
    R² = r² − offset − scale."""
    return graded(
        fn,
        "r_squared_parts",
        "return (r², offset, scale): r = cov(V, G)/(σ_V·σ_G), offset = (mean V − mean G)²/σ_G², "
        "scale = (σ_V − r·σ_G)²/σ_G², with means over all entries (divide by n).",
        _grade_r_squared_parts,
    )


# (predictions V, targets G): a critic with all three faults; one only 0.3 too high (r² = 1, offset 0.45);
# one halfway between the returns and their mean (r² = 1, scale 0.25)
_PARTS_CASES = [([0.3, 0.5, 0.9, 0.6, 0.4, 0.2], [0.0, 0.0, 1.0, 1.0, 0.5, 0.0]),
                ([0.3, 0.3, 1.3, 1.3, 0.8], [0.0, 0.0, 1.0, 1.0, 0.5]),
                ([0.25, 0.25, 0.75, 0.75, 0.5], [0.0, 0.0, 1.0, 1.0, 0.5])]


def _parts_with(predictions, targets, mistake: str | None = None) -> tuple[float, float, float]:
    """(r², offset, scale) the right way or with one mistake."""
    import math

    n = len(targets)
    mean_v, mean_g = sum(predictions) / n, sum(targets) / n
    divide_by = n - 1 if mistake == "n − 1" else n
    var_v = sum((v - mean_v) ** 2 for v in predictions) / divide_by
    var_g = sum((g - mean_g) ** 2 for g in targets) / divide_by
    covariance = sum((v - mean_v) * (g - mean_g) for v, g in zip(predictions, targets)) / divide_by
    r = covariance / math.sqrt(var_v * var_g)
    error = mean_v - mean_g
    offset = {"offset not squared": error / var_g,
              "offset in reward units": error**2}.get(mistake, error**2 / var_g)
    spread = math.sqrt(var_v) - (1.0 if mistake == "scale without r" else r) * math.sqrt(var_g)
    return (r if mistake == "r not squared" else r**2), offset, spread**2 / var_g


_PARTS_HINTS = {
    "r not squared": "your first part is the correlation r; return its square r², the share of the variance "
                     "a perfect ranking would explain",
    "offset not squared": "your offset is the mean error over σ_G²; square the mean error: "
                          "(mean V − mean G)²/σ_G²",
    "offset in reward units": "your offset is the squared mean error in reward² units; divide it by σ_G², so "
                              "that every part is a share of the returns' variance, as R² is",
    "scale without r": "your scale compares σ_V with σ_G; compare it with r·σ_G, the spread that a critic "
                       "correlated r with the returns should have: (σ_V − r·σ_G)²/σ_G²",
    "n − 1": "your variances divide by n − 1 (torch's var() and std() do by default); R² divides by n, so "
             "use correction=0 or means over all entries",
}


def _grade_r_squared_parts(fn) -> str:
    import math

    for predictions, targets in _PARTS_CASES:
        expected = _parts_with(predictions, targets)
        got = tuple(float(x) for x in fn(list(predictions), list(targets)))
        if len(got) == 3 and all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(got, expected)):
            continue
        case = f"for V = {predictions} and G = {targets}"
        shown = ", ".join(f"{x:.4f}" for x in got)
        if len(got) != 3:
            raise ExerciseFailed(f"{case} you returned {len(got)} numbers: return three, (r², offset, scale)")
        hint = next((h for mistake, h in _PARTS_HINTS.items()
                     if all(math.isclose(a, b, abs_tol=1e-6)
                            for a, b in zip(got, _parts_with(predictions, targets, mistake)))), None)
        if hint is None:
            r2 = 1 - (sum((g - v) ** 2 for v, g in zip(predictions, targets))
                      / sum((g - sum(targets) / len(targets)) ** 2 for g in targets))
            hint = (f"r² − offset − scale should equal R² = {r2:.4f}; yours gives "
                    f"{got[0] - got[1] - got[2]:.4f}. r = cov(V, G)/(σ_V·σ_G), "
                    "offset = (mean V − mean G)²/σ_G², scale = (σ_V − r·σ_G)²/σ_G²")
        raise ExerciseFailed(f"{case} you gave ({shown}), expected "
                             f"({', '.join(f'{x:.4f}' for x in expected)}): {hint}.")
    return ("R² = r² − offset − scale: a critic that ranks the returns well still loses R² for being too "
            "high or too low on average (offset), and for spreading its predictions more or less than r "
            "warrants (scale).")
