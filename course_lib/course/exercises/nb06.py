"""The exercise checks of notebook 06, GiGPO (`notebooks/06_gigpo.ipynb`): check_discounted_returns,
check_shared_step_fraction, check_omega_for_grpo.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_discounted_returns(fn: Any) -> Any:
    """Notebook 06: `fn(rewards, gamma) -> list`, G_t = r_t + γ·G_{t+1} for one trajectory."""
    return graded(fn, "discounted",
                  "walk backwards from the last step with G = r_t + γ·G.",
                  _grade_discounted_returns)


def _grade_discounted_returns(fn) -> str:
    from course_lib.credit import discounted_returns

    for rewards, gamma in [([0, 0, 0, 1], 0.95), ([0, 0, 1], 0.5), ([-0.1, 0, 1], 0.9), ([1], 0.95)]:
        expected = discounted_returns(rewards, [0] * len(rewards), gamma=gamma).tolist()
        got = [float(x) for x in fn(rewards, gamma)]
        if len(got) != len(expected) or any(abs(g - e) > 1e-5 for g, e in zip(got, expected)):
            raise ExerciseFailed(f"for rewards {rewards}, γ={gamma} you gave {[round(g, 4) for g in got]}, "
                                 f"expected {[round(e, 4) for e in expected]}. Walk backwards from the last "
                                 "step: G = r_t + γ·G.")
    return "the same final reward is worth less the further a step is from it."


def check_shared_step_fraction(fn: Any) -> Any:
    """Notebook 06: `fn(anchors, group_ids) -> float`, the fraction of rows whose step group has ≥ 2 rows."""
    return graded(fn, "shared_step_fraction",
                  "return the share of rows whose (group id, anchor) occurs at least twice.",
                  _grade_shared_step_fraction)


def _grade_shared_step_fraction(fn) -> str:
    cases = [(["a", "b", "a", "c"], [0, 0, 0, 0], 0.5), (["a", "a", "a", "a"], [0, 0, 1, 1], 1.0),
             (["a", "b", "c"], [0, 0, 0], 0.0), (["a", "a", "b", "b", "c"], [0, 1, 0, 0, 0], 0.4)]
    for anchors, groups, expected in cases:
        got = fn(anchors, groups)
        if abs(float(got) - expected) > 1e-9:
            raise ExerciseFailed(
                f"for anchors {anchors} in groups {groups} you gave {got}, expected {expected}. "
                "Rows share a step group only when both the task (group id) and the anchor match."
            )
    return "a row in a step group of one gets no step-level signal."


def check_omega_for_grpo(omega: Any) -> Any:
    """Notebook 06: the ω that turns GiGPO into outcome-only credit on any input."""
    return graded(omega, "omega",
                  "set omega to the ω that makes gigpo_advantages equal outcome-only credit.",
                  _grade_omega_for_grpo)


def _grade_omega_for_grpo(omega: float) -> str:
    if float(omega) != 0.0:
        raise ExerciseFailed(
            f"ω = {omega} still adds ω·A_step. Which ω removes the step term whatever the anchors?"
        )
    return (
        "ω = 0 drops A_step; with the same normalisation, what remains is the episode-level GRPO advantage."
    )
