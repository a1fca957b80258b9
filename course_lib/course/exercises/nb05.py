"""The exercise checks of notebook 05, outcome-only credit (`notebooks/05_outcome_credit.ipynb`):
check_informative_fraction, check_dr_grpo_advantages, check_masked_token_advantages.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_informative_fraction(fn: Any) -> Any:
    """Notebook 05: `fn(rewards_by_group) -> float`, the fraction of groups whose rewards are not all
    equal."""
    return graded(fn, "informative_fraction",
                  "return the share of groups whose rewards are not all equal.",
                  _grade_informative_fraction)


def _grade_informative_fraction(fn) -> str:
    cases = [([[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]], 1 / 3), ([[0.5, 0.5], [0.2, 0.7]], 0.5),
             ([[1, 1], [0, 0]], 0.0), ([[0, 1, 0]], 1.0)]
    for groups, expected in cases:
        got = fn(groups)
        if abs(float(got) - expected) > 1e-9:
            raise ExerciseFailed(f"for {groups} you gave {got}, expected {expected:.4f}. A group carries a "
                                 "signal when at least two of its rewards differ (len(set(rewards)) > 1).")
    return "only groups with mixed rewards move the policy; the rest cost compute and give zero advantage."


def check_dr_grpo_advantages(fn: Any) -> Any:
    """Notebook 05: `fn(rewards, group_ids) -> tensor`, the advantage without the std (Dr. GRPO)."""
    return graded(fn, "dr_grpo_advantages",
                  "return each reward minus its group's mean reward, as a tensor.",
                  _grade_dr_grpo_advantages)


def _grade_dr_grpo_advantages(fn) -> str:
    import torch

    from course_lib.credit import outcome_advantages

    rewards, groups = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0], ["a", "a", "a", "a", "b", "b", "c", "c"]
    expected = outcome_advantages(rewards, groups, scale="none")
    got = torch.as_tensor(fn(rewards, groups), dtype=torch.float32)
    if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-6):
        raise ExerciseFailed(f"got {[round(float(x), 4) for x in got]}, expected "
                             f"{[round(float(x), 4) for x in expected]}. Subtract each group's mean reward, "
                             "and do not divide by anything.")
    return "without the std, a group of one success among four gives +0.75 / −0.25 instead of +1.5 / −0.5."


def check_masked_token_advantages(fn: Any) -> Any:
    """Notebook 05: `fn(advantage, turn_index, loss_mask) -> tensor`, A on the model's tokens, 0 elsewhere."""
    return graded(fn, "masked_token_advantages",
                  "return a tensor with the advantage where loss_mask is 1, 0 elsewhere.",
                  _grade_masked_token_advantages)


def _grade_masked_token_advantages(fn) -> str:
    import torch

    turn_index = [-1, -1, -1, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    loss_mask = [0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0]
    expected = torch.tensor([0.0, 0, 0, 0.8, 0.8, 0, 0, 0, 0.8, 0.8, 0.8, 0])
    got = torch.as_tensor(fn(0.8, turn_index, loss_mask), dtype=torch.float32)
    if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-6):
        raise ExerciseFailed(
            f"got {got.tolist()}, expected {expected.tolist()}. Every token the model sampled "
            "(loss_mask 1) gets A; prompt and observation tokens get 0."
        )
    return "one number per trajectory, copied onto every token the model wrote."
