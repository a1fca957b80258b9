"""The exercise checks of notebook 01, the agentic setting (`notebooks/01_agentic_setting.ipynb`):
check_wilson_interval, check_episodes_needed, check_classify_action.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_wilson_interval(fn: Any) -> Any:
    """Notebook 01: `fn(successes, n) -> (low, high)`, the 95% Wilson score interval."""
    return graded(fn, "my_wilson",
                  "return (low, high), the 95% Wilson score interval for successes out of n.",
                  _grade_wilson_interval)


def _grade_wilson_interval(fn) -> str:
    from course_lib import wilson_interval

    for successes, n in [(0, 10), (5, 10), (10, 10), (37, 100), (1, 3)]:
        got, expected = fn(successes, n), wilson_interval(successes, n)
        if any(abs(float(g) - e) > 1e-6 for g, e in zip(got, expected)):
            raise ExerciseFailed(f"for {successes}/{n} you gave ({got[0]:.4f}, {got[1]:.4f}), expected "
                                 f"({expected[0]:.4f}, {expected[1]:.4f}). Centre (p + z²/2n)/(1 + z²/n), "
                                 "half-width z·sqrt(p(1−p)/n + z²/4n²)/(1 + z²/n), z = 1.96.")
    return "your interval matches course_lib.wilson_interval, including at 0/n and n/n."


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
