"""The exercise checks of notebook 05, outcome-only credit (`notebooks/05_outcome_credit.ipynb`):
check_group_advantages, check_informative_fraction, check_dr_grpo_advantages, check_masked_token_advantages.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_group_advantages(fn: Any) -> Any:
    """Notebook 05: `fn(rewards, group_ids, eps) -> tensor [N]`, each rollout's reward against its group's:
    (R − group mean) / (group std + ε), 0 for a group with nothing to compare."""
    return graded(fn, "group_advantages",
                  "for each group, (R − the group's mean R) / (the group's std + eps); 0 in a group whose "
                  "rewards are all equal.",
                  _grade_group_advantages)


# five groups, interleaved as a batch of rollouts arrives: one success among four, partial credit, all
# successes, a single rollout, two failures
_GROUP_IDS = ["a", "b", "c", "a", "b", "d", "a", "c", "e", "b", "a", "c", "e"]
_REWARDS = [1.0, 0.5, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]


def _grade_group_advantages(fn) -> str:
    import torch

    from course_lib.credit import outcome_advantages

    eps = 1e-4
    expected = outcome_advantages(_REWARDS, _GROUP_IDS, eps=eps)
    got = torch.as_tensor(fn(list(_REWARDS), list(_GROUP_IDS), eps), dtype=torch.float32)
    if got.shape != expected.shape:
        raise ExerciseFailed(f"got shape {tuple(got.shape)}, expected {tuple(expected.shape)}: one advantage "
                             "per rollout, in the order of the rewards")
    if torch.allclose(got, expected, atol=1e-4):
        return ("one success among four gets +1.5, each failure −0.5; a group with nothing to compare "
                "gets 0, as outcome_advantages gives.")
    rows = {g: [i for i, x in enumerate(_GROUP_IDS) if x == g] for g in dict.fromkeys(_GROUP_IDS)}
    flat = [g for g, r in rows.items() if len({_REWARDS[i] for i in r}) == 1]  # all equal, or one rollout
    for g in flat:
        values = got[rows[g]]
        rewards = [_REWARDS[i] for i in rows[g]]
        if not torch.isfinite(values).all():
            raise ExerciseFailed(
                f"group {g!r} with rewards {rewards} got {values.tolist()}: its std is 0 (or undefined, "
                "for a single rollout), and you divided by it. Such a group has nothing to compare: give "
                "its rollouts A = 0 (notice it before dividing)")
        if values.abs().max().item() > 1e-4:
            raise ExerciseFailed(
                f"group {g!r} with rewards {rewards} got {_rounded(values)}, expected 0 for each. "
                + ("Its rollouts were compared with the mean of the whole batch: the baseline of a rollout "
                   "is the mean reward of its own group, the rollouts of the same task"
                   if _is_global(got) else
                   "Its rollouts were compared with rollouts of other groups. The groups are interleaved: "
                   "collect each group's rows by its id"))
    if torch.allclose(got, -expected, atol=1e-4):
        raise ExerciseFailed("your advantages have the wrong sign: a rollout whose reward is above its "
                             "group's mean must get a positive advantage, R − mean, not mean − R")
    if torch.allclose(got, outcome_advantages(_REWARDS, _GROUP_IDS, scale="none"), atol=1e-4):
        raise ExerciseFailed("you subtracted the group's mean but did not divide by the group's std + eps "
                             "(that is Dr. GRPO's variant, an exercise below)")
    biased = torch.zeros_like(expected)
    for g, r in rows.items():
        x = torch.tensor([_REWARDS[i] for i in r])
        if g not in flat:
            biased[r] = (x - x.mean()) / (x.std(correction=0) + eps)
    if torch.allclose(got, biased, atol=1e-4):
        raise ExerciseFailed("you divided by the biased std (over N): use the unbiased one (over N − 1), "
                             "torch's default and TRL's")
    raise ExerciseFailed(f"got {_rounded(got)}, expected {_rounded(expected)} for rewards {_REWARDS} in "
                         f"groups {_GROUP_IDS}. The groups are interleaved: collect each group's rows by "
                         "its id")


def _is_global(got) -> bool:
    """True when `got` is the batch's rewards centred (and perhaps scaled) by the whole batch's mean."""
    import torch

    centred = torch.tensor(_REWARDS) - torch.tensor(_REWARDS).mean()
    return any(torch.allclose(got, centred / scale, atol=1e-4)
               for scale in (1.0, centred.std() + 1e-4, centred.std(correction=0) + 1e-4))


def _rounded(values) -> list[float]:
    return [round(float(v), 3) + 0.0 for v in values]


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
