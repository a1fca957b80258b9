"""The exercise checks of notebook 09, LLM-as-a-judge reward (`notebooks/09_llm_judge.ipynb`):
check_pairwise_accuracy, check_position_bias_rate, check_group_rewards.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_pairwise_accuracy(fn: Any) -> Any:
    """Notebook 09: `fn(scores, rewards) -> float`, judge-verifier pairwise accuracy (judge ties count
    half)."""
    return graded(fn, "my_pairwise_accuracy",
                  "over pairs with different rewards, count the judge's agreements (a tie counts half).",
                  _grade_pairwise_accuracy)


def _grade_pairwise_accuracy(fn) -> str:
    import math

    # (scores, rewards, accuracy): agreements / pairs over the pairs with different rewards
    cases = [
        ([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0], 4 / 4),
        ([0.9, 0.3, 0.4, 0.1], [1, 1, 0, 0], 3 / 4),
        ([0.5, 0.5, 0.5], [1, 0, 0], 1 / 2),
        ([0.1, 0.7, 0.4], [0.0, 1.0, 0.5], 3 / 3),
        ([0.3, 0.9], [1, 1], math.nan),
    ]
    for scores, rewards, expected in cases:
        got = float(fn(scores, rewards))
        if math.isnan(expected) != math.isnan(got) or (
            not math.isnan(expected) and abs(got - expected) > 1e-9
        ):
            raise ExerciseFailed(
                f"for scores {scores} and rewards {rewards} you gave {got}, expected {expected}. "
                "Skip pairs with equal rewards, count a judge tie as 0.5, return nan with no pairs."
            )
    return "0.5 is a coin flip, and also what a judge that scores everything equal gets."


def check_position_bias_rate(fn: Any) -> Any:
    """Notebook 09: `fn(first, second, tol=0.01) -> float`, the share of scores that moved between two
    orders."""
    return graded(fn, "my_position_bias_rate",
                  "return the share of scores that moved by more than tol (nan if any score is NaN).",
                  _grade_position_bias_rate)


def _grade_position_bias_rate(fn) -> str:
    import math

    nan = float("nan")
    cases = [
        (([0.9, 0.5, 0.1], [0.9, 0.5, 0.1]), 0.0),
        (([1.0, 0.5, 0.0], [0.0, 0.5, 1.0]), 2 / 3),
        (([0.50, 0.2], [0.505, 0.3]), 0.5),
        (([0.4, nan], [0.4, nan]), nan),
        (([0.4, 0.3], [0.1, nan]), nan),
    ]
    for (first, second), expected in cases:
        got = float(fn(first, second))
        if math.isnan(expected) != math.isnan(got) or (
            not math.isnan(expected) and abs(got - expected) > 1e-9
        ):
            raise ExerciseFailed(
                f"for {first} and {second} you gave {got}, expected {expected}. Count |a - b| > tol "
                "pairwise, divide by the group size; a NaN (failed run) anywhere gives nan."
            )
    return "a fair judge moves no score when only the order changes."


def check_group_rewards(fn: Any) -> Any:
    """Notebook 09: `fn(scores: list[JudgeScore]) -> list[float] | None`, None for a failed group."""
    return graded(fn, "my_group_rewards",
                  "return the scores as floats, or None when any score failed.",
                  _grade_group_rewards)


def _grade_group_rewards(fn) -> str:
    import math

    from course_lib.judge.scoring import JudgeScore

    good = [JudgeScore(0.0, "bad"), JudgeScore(1.0, "good"), JudgeScore(0.25, "meh")]
    got = fn(good)
    if got is None or [float(x) for x in got] != [0.0, 1.0, 0.25]:
        raise ExerciseFailed(
            f"for valid scores 0.0, 1.0, 0.25 you gave {got}: a real 0.0 is a reward, keep it."
        )
    failed = [JudgeScore(math.nan, "judge failed", failed=True) for _ in range(3)]
    got = fn(failed)
    if got is not None:
        raise ExerciseFailed(f"for a failed group you gave {got}; return None so the caller skips the group "
                             "(zeros would punish trajectories nobody judged, NaN would poison the loss).")
    return "a failed judgement is skipped, never turned into a reward."
