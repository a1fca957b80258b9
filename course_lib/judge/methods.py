"""The judging methods: each way of asking the judge, registered here once by name (as credit methods are
in `course_lib.credit`), so that no other module compares a method's name.

    group      the whole group in one prompt, each trajectory scored beside the others
               (`scoring.score_group`; turns: `turns.score_turns`). Its scores can depend on the order the
               group is read in, so judge quality reads every group in two orders.
    pointwise  each trajectory alone, its score P(yes) (`scoring.score_pointwise`; turns:
               `turns.score_turns_pointwise`). It reads no order and shows no reference answer.

The trainer picks one with `RewardConfig.judge_method` (`course_lib.rewards`), judge quality with
`judge_agreement(method=...)` (`course_lib.judge.quality`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from course_lib.judge.scoring import score_group, score_pointwise
from course_lib.judge.turns import score_turns, score_turns_pointwise


@dataclass(frozen=True)
class JudgingMethod:
    """How one judging method scores a group of trajectories and the turns of one trajectory."""

    name: str
    score_group: Callable  # (trajectories, rubric, *, judge, metrics, ...) -> GroupScores
    score_turns: Callable  # (trajectory, rubric, *, judge, ...) -> TurnScores
    takes_reference: bool  # can show the judge the task's reference answer (info["reference"])
    reads_an_order: bool  # a trajectory's score can depend on where it sits in the group


JUDGING_METHODS: dict[str, JudgingMethod] = {
    "group": JudgingMethod("group", score_group, score_turns, takes_reference=True, reads_an_order=True),
    "pointwise": JudgingMethod("pointwise", score_pointwise, score_turns_pointwise, takes_reference=False,
                               reads_an_order=False),
}


def judging_method(name: str) -> JudgingMethod:
    """The registered method `name`; an unknown name is a ValueError that lists the known ones."""
    if name not in JUDGING_METHODS:
        raise ValueError(f"judge_method must be {' or '.join(map(repr, JUDGING_METHODS))}, got {name!r}")
    return JUDGING_METHODS[name]
