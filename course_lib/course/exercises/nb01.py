"""The exercise checks of notebook 01, the agentic setting (`notebooks/01_agentic_setting.ipynb`):
check_wilson_interval, check_episodes_needed, check_classify_action.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_wilson_interval(fn: Any) -> Any:
    """Notebook 01: `fn(successes, n, z=1.96) -> (low, high)`, the Wilson score interval ((0, 1) at n = 0)."""
    return graded(fn, "my_wilson",
                  "return (low, high), the 95% Wilson score interval for successes out of n, and (0, 1) when "
                  "n = 0.",
                  _grade_wilson_interval)


def _wilson_variant(successes: int, n: int, z: float = 1.96, *, centre: str = "wilson",
                    small_n_term: bool = True, shrink: bool = True) -> tuple[float, float]:
    """Wilson's interval the right way or with one mistake: centre "p" (not pulled toward 1/2), no z²/4n² in
    the half-width, or neither part divided by 1 + z²/n."""
    import math

    p = successes / n
    denominator = 1 + z**2 / n if shrink else 1.0
    middle = p if centre == "p" else (p + z**2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + (z**2 / (4 * n**2) if small_n_term else 0.0)) / denominator
    return max(0.0, middle - half), min(1.0, middle + half)


def _normal_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    import math

    p = successes / n
    half = z * math.sqrt(p * (1 - p) / n)
    return p - half, p + half


def _same(got, expected) -> bool:
    import math

    return len(got) == 2 and all(math.isclose(float(g), e, abs_tol=1e-6) for g, e in zip(got, expected))


def _wilson_hint(got, successes: int, n: int) -> str:
    """What the interval `got` for successes/n did wrong, when it is a typical mistake."""
    normal = _normal_interval(successes, n)
    if _same(got, normal) or _same(got, (max(0.0, normal[0]), min(1.0, normal[1]))):
        return ("That is the normal interval p ± z·sqrt(p(1−p)/n), which has width 0 at 0/n and n/n. "
                "Wilson's measures the spread at J, not at p: use the centre and half-width above")
    for z in (1.645, 2.0, 2.576, 1.0):
        if _same(got, _wilson_variant(successes, n, z)):
            return f"Your interval is Wilson's with z = {z}; a 95% interval uses z = 1.96"
    if _same(got, _wilson_variant(successes, n, centre="p")):
        return ("Your interval is centred on p = successes/n. Wilson's centre is shifted toward 1/2: "
                "(p + z²/2n)/(1 + z²/n)")
    if _same(got, _wilson_variant(successes, n, small_n_term=False)):
        return ("Your half-width leaves out z²/4n² under the square root, so it is 0 at 0/n: "
                "z·sqrt(p(1−p)/n + z²/4n²)/(1 + z²/n)")
    if _same(got, _wilson_variant(successes, n, shrink=False)):
        return "Divide both the centre and the half-width by 1 + z²/n"
    return ("Centre (p + z²/2n)/(1 + z²/n), half-width z·sqrt(p(1−p)/n + z²/4n²)/(1 + z²/n), z = 1.96, "
            "clipped to [0, 1]")


def _grade_wilson_interval(fn) -> str:
    from course_lib import wilson_interval

    for successes, n in [(0, 10), (5, 10), (10, 10), (37, 100), (1, 3)]:
        got, expected = tuple(fn(successes, n)), wilson_interval(successes, n)
        if not _same(got, expected):
            shown = ", ".join(f"{float(x):.4f}" for x in got)
            raise ExerciseFailed(f"for {successes}/{n} you gave ({shown}), expected ({expected[0]:.4f}, "
                                 f"{expected[1]:.4f}). {_wilson_hint(got, successes, n)}.")
    try:
        got = tuple(fn(0, 0))
    except ZeroDivisionError:
        raise ExerciseFailed("for 0 episodes (n = 0) your function divided by zero. No episode, no evidence: "
                             "return (0.0, 1.0), every rate is still possible.") from None
    if not _same(got, (0.0, 1.0)):  # a nan is never the same
        raise ExerciseFailed(f"for 0 episodes (n = 0) you gave {got}: with no evidence every rate is still "
                             "possible, so return (0.0, 1.0).")
    got, expected = tuple(fn(3, 10, 2.576)), wilson_interval(3, 10, 2.576)
    if not _same(got, expected):
        ignored = _same(got, wilson_interval(3, 10))
        raise ExerciseFailed("for 3/10 with z = 2.576 (a 99% interval) " + (
            "you gave the 95% interval: use the z argument, do not fix 1.96 inside the function."
            if ignored else f"you gave {got}, expected ({expected[0]:.4f}, {expected[1]:.4f})."))
    return "your interval matches course_lib.wilson_interval, including at 0/n, n/n and n = 0."


def check_episodes_needed(fn: Any) -> Any:
    """Notebook 01: `fn(half_width) -> int`, episodes for a 95% normal interval of at most ± half_width at p =
    0.5."""
    return graded(fn, "episodes_needed",
                  "return the smallest n with 1.96·sqrt(0.25/n) ≤ half_width (round up).",
                  _grade_episodes_needed)


def _grade_episodes_needed(fn) -> str:
    import math

    for h in (0.1, 0.05, 0.02):
        expected = math.ceil((1.96 * 0.5 / h) ** 2)
        got = fn(h)
        if got != expected:
            raise ExerciseFailed(
                f"for ±{h} you said {got} episodes, expected {expected}. The worst case is p = 0.5, "
                "where 1.96·sqrt(p(1−p)/n) ≤ h gives n ≥ (1.96·0.5/h)²; round up."
            )
    return "halving the interval costs four times the episodes."


def check_classify_action(fn: Any) -> Any:
    """Notebook 01: `fn(text) -> "tool_call" | "answer" | "malformed"` for the lookup environment."""
    return graded(fn, "classify",
                  "return 'tool_call', 'answer' or 'malformed' for the lookup environment's tools.",
                  _grade_classify_action)


def _grade_classify_action(fn) -> str:
    cases = {
        '<tool_call>{"name": "lookup", "arguments": {"name": "Kalo"}}</tool_call>': "tool_call",
        "Agent Kalo is stationed in Orvane. <answer>Orvane</answer>": "answer",
        '<tool_call>{"name": "search", "arguments": {"query": "Kalo"}}</tool_call>': "malformed",
        "Agent Kalo is stationed in Orvane.": "malformed",
        ('<tool_call>{"name": "lookup", "arguments": {"name": "Kalo"}}</tool_call>'
         "\nResult: Orvane"): "malformed",
    }
    for text, expected in cases.items():
        got = fn(text)
        if got != expected:
            raise ExerciseFailed(f"for {text!r} you said {got!r}, expected {expected!r}. "
                                 "Hint: parse_action(text, make_env('lookup').tools).kind")
    return (
        "a call to a tool that does not exist, and a call followed by an imagined result, are both malformed."
    )
