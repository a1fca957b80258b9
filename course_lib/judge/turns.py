"""The turn judge: a score for every turn of one trajectory, the same two ways `course_lib.judge.scoring`
judges a group.

* `score_turns` (``method == "group"``): all turns in one call, a JSON answer with checked turn numbers
  and bounded re-asks, like `score_group`'s JSON answers;
* `score_turns_pointwise` (``method == "pointwise"``): one P(yes) question per turn, like
  `score_pointwise`: for turn t the judge reads the task and turns 1..t.

Both return `TurnScores` (NaN everywhere and ``failed=True`` when the judging failed) and count their
cost in a `JudgeMetrics`. This module imports `course_lib.judge.scoring` (never the reverse).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from course_lib.judge.backends import ChatBackend, YesNoBackend
from course_lib.judge.errors import JudgeRequestRejected
from course_lib.judge.prompts import TURN_RUBRIC, trajectory_turns, turn_pointwise_prompt, turn_prompt
from course_lib.judge.scoring import JudgeMetrics, _ask, _check_chats, _check_reads_yes_no, _pointwise_score
from course_lib.trajectory import Trajectory

__all__ = ["score_turns", "score_turns_pointwise", "TurnScores"]


class TurnScores(list):
    """One score per turn (a list of floats), with `failed`, `explanations`, `method` and `metrics` attached.

    When the judge failed, every score is NaN and `failed` is True.
    """

    def __init__(self, scores: Iterable[float], explanations: list[str], failed: bool = False, *,
                 method: str = "group", metrics: JudgeMetrics | None = None):
        super().__init__(scores)
        self.explanations = explanations
        self.failed = failed
        self.method, self.metrics = method, metrics if metrics is not None else JudgeMetrics()


def score_turns(trajectory: Trajectory | list[dict[str, str]], rubric: str = TURN_RUBRIC, *,
                judge: ChatBackend, max_retries: int = 2, max_tokens: int = 512,
                metrics: JudgeMetrics | None = None) -> TurnScores:
    """Score every turn of one trajectory in one judge call: was this action useful given what was known?
    One float per turn (``method == "group"``: all turns judged together, in one JSON answer).

    judge: a `ChatBackend` (keyword only). Same protocol as `score_group` (JSON, checked turn numbers,
    bounded re-asks). On failure (a rejected request included) the result has ``failed=True`` and NaN
    scores, and its metrics count it.
    """
    _check_chats(judge, "turn judging")
    context, turns = trajectory_turns(trajectory)
    own = JudgeMetrics()
    if turns:
        own.turn_calls += 1
        expected = [str(k) for k in range(1, len(turns) + 1)]
        found, why = _ask(judge, turn_prompt(context, turns, rubric), expected, key="turn",
                          max_retries=max_retries, max_tokens=max_tokens, metrics=own)
        scored = None if found is None else [found[k] for k in expected]
    else:
        scored, why = [], ""
    return _turns_returned(scored, why, len(turns), "group", own, metrics)


def score_turns_pointwise(trajectory: Trajectory | list[dict[str, str]], rubric: str = TURN_RUBRIC, *,
                          judge: YesNoBackend, metrics: JudgeMetrics | None = None) -> TurnScores:
    """Score every turn of one trajectory on its own: for turn t the judge reads the task and turns 1..t,
    and the score is P(yes) for "was the last action a useful, well-formed next step?"
    (``method == "pointwise"``). One backend question per turn.

    judge: a `YesNoBackend` (keyword only; `LocalJudge`). The rubric is the system message (without
    the JSON answer format, which does not apply). A rejected prompt fails the trajectory (NaN scores,
    ``failed=True``, counted).
    """
    _check_reads_yes_no(judge)
    context, turns = trajectory_turns(trajectory)
    own = JudgeMetrics()
    scored, why = [], ""
    if turns:
        own.turn_calls += 1
        own.pointwise += 1
        try:
            for k in range(len(turns)):
                messages = turn_pointwise_prompt(context, turns[:k + 1], rubric)
                scored.append(_pointwise_score(judge, messages, own))
        except JudgeRequestRejected as exc:
            own.record_error(str(exc))
            scored, why = None, f"judge refused the request: {exc}"
    return _turns_returned(scored, why, len(turns), "pointwise", own, metrics)


def _turns_returned(scored: list[tuple[float, str]] | None, why: str, n_turns: int, method: str,
                    own: JudgeMetrics, total: JudgeMetrics | None) -> TurnScores:
    """The TurnScores of a judging: the (score, explanation) per turn, or NaN everywhere when it failed."""
    if scored is None:
        own.failed_turn_calls += 1
        result = TurnScores([math.nan] * n_turns, [why] * n_turns, failed=True, method=method, metrics=own)
    else:
        result = TurnScores([s for s, _ in scored], [e for _, e in scored], method=method, metrics=own)
    if total is not None:
        total.add(own)
    return result
