"""LLM-as-a-judge rewards: score a whole group of trajectories relative to each other in one call.

Two ways to judge, and the caller picks one by name (nothing swaps them behind its back):

* **group** (`score_group`, the idea of OpenPipe's RULER, with its known weaknesses fixed): the judge
  reads the whole group at once. The messages all trajectories share (system prompt, task) are sent
  once, then each trajectory's remainder under a short id that depends on its content, not its
  position. The order is shuffled (seeded) against position bias; ``two_orders=True`` scores the group
  a second time in reversed order and averages; ``reverse=True`` reads it in the reversed order alone;
  the result records the order(s) read (``orders``, ``positions``). The answer is read one of two ways:

  - **forced** (``method == "group_forced"``, the default for a backend that gives next-token
    probabilities: `LocalJudge`, or an endpoint with the completions API's logprobs): the judge
    writes nothing. Its answer is forced to start ``Scores:\nid t3f2 (2 actions, last: ...): `` (each line
    recalls its trajectory's ending, `score_line`) and the score is the expected
    digit under its next-token distribution, score = Σ_d d·P(d) / (9·Σ_d P(d)) over d = 0..9, read for
    every id (each line straight after the header, see `LocalJudge.forced_scores`). A read whose
    digits get less than `min_mass` of the probability fails the group: the judge was not answering.
  - **json** (``method == "group_json"``): the judge writes ``[{"id", "explanation", "score"}]``
    and scores are matched **by id**: for endpoint models that write JSON reliably.
* **pointwise** (`score_pointwise`): each distinct trajectory alone, scored by P(yes) for "did the
  agent complete the task?", read from the backend's next-token distribution with the rubric as the
  system message. Always a valid number and free of position bias by construction, but absolute, not
  relative: a fair chance for a judge too small to write the group JSON (the embedded 135M model).

`score_turns` and `score_turns_pointwise` are the same two ways for the turns of one trajectory, in
`course_lib.judge.turns` (which imports this module).

For both:

* an answer that cannot be used (no JSON, a missing or unknown id, a score outside [0, 1]) is sent
  back with the error and re-asked at most ``max_retries`` times; after that every score of the group
  is NaN with ``failed=True`` and the failure is counted: a failed group is never silently dropped or
  scored 0, the trainer skips it (a forced read has nothing to re-ask: too little mass on the digits
  fails at once);
* a request the judge rejects (HTTP 400, 413, 422: a prompt too long for it) fails its group the same
  way, at once, instead of stopping the run; 401, 403 and 404 are configuration mistakes and raise;
* identical trajectories are scored once (all identical: no call at all, every score 0.5);
* results are cached on disk by a hash of (method, rubric, judge name, order, contents); the judge's
  name names its model, so two judge models never share cached answers;
* every call returns its own `JudgeMetrics` (calls, retries, tokens, seconds, cache hits, failures,
  and how many judgings were pointwise) on the result's ``metrics``; pass ``metrics=`` to add them
  to a total you keep. There is no module-wide counter.

Every function takes its backend as the keyword-only ``judge=`` and checks, before asking, that it has
what the judging needs (the Protocols of `course_lib.judge.backends`: `ChatBackend`, `YesNoBackend`,
`ForcedBackend`); one that lacks it raises TypeError naming the judging that would work.

Around it: the rubrics and prompts are in `course_lib.judge.prompts`, reading answers (JSON, forced
digits) in `course_lib.judge.answers`, the backends (`LocalJudge`, `OpenAIJudge`) and their contract in
`course_lib.judge.backends`, the errors in `course_lib.judge.errors`, and the measurement against a
verifier in `course_lib.judge.quality`, which imports this module (never the reverse).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from course_lib.judge.answers import MIN_DIGIT_MASS, expected_digit, parse_scores
from course_lib.judge.backends import ChatBackend, ForcedBackend, ForcingCheck, UsageBackend, YesNoBackend
from course_lib.judge.errors import JudgeAnswerError, JudgeRequestRejected
from course_lib.judge.prompts import (
    DEFAULT_RUBRIC,
    SCORES_HEADER,
    as_conversation,
    forced_group_prompt,
    group_prompt,
    pointwise_prompt,
    render_messages,
    score_line,
    shared_prefix,
    short_ids,
)
from course_lib.trajectory import Trajectory

__all__ = [
    # the judges
    "GROUP_ANSWERS", "group_layout", "score_group", "score_pointwise",
    # what they return
    "JudgeScore", "GroupScores", "JudgeMetrics",
]

# How a group judging's answer is read: "forced" (digits' probabilities at forced positions), "json" (the
# judge writes a JSON list), "auto" (forced when the backend can, else json).
GROUP_ANSWERS = ("auto", "forced", "json")


@dataclass
class JudgeScore:
    """One trajectory's judged score. A failed score is NaN, so it can never pass for a real 0."""

    score: float
    explanation: str
    failed: bool = False


@dataclass
class JudgeMetrics:
    """What judging cost and how often it failed. Each judging returns its own; add them up with `add`."""

    groups: int = 0  # groups asked for (score_group and score_pointwise)
    # judgings (of a group or of turns) made pointwise: P(yes) one trajectory or turn at a time
    pointwise: int = 0
    failed_groups: int = 0  # groups whose answers stayed unusable after all retries, or were refused
    trajectories: int = 0
    calls: int = 0  # backend calls, retries included
    retries: int = 0  # re-asks after an unusable answer
    cache_hits: int = 0  # groups answered from the disk cache
    skipped_identical: int = 0  # groups with one distinct trajectory: no call
    turn_calls: int = 0  # per-turn judgings asked for (score_turns and score_turns_pointwise)
    failed_turn_calls: int = 0
    tokens: int = 0  # prompt + completion tokens, as the backend reports them (0 from one that reports none)
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)  # the last few unusable-answer errors

    def record_error(self, message: str) -> None:
        self.errors = (self.errors + [message])[-10:]

    def add(self, other: JudgeMetrics) -> None:
        """Add another judging's counts to these (errors: the last ten of both)."""
        for f in fields(self):
            if f.name != "errors":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        self.errors = (self.errors + other.errors)[-10:]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["failure_rate"] = self.failed_groups / max(1, self.groups)
        return out

    def as_row(self) -> dict[str, float]:
        """The counts a training step logs, as ``judge_<name>`` entries. The failures are not among them:
        the trainer counts failed groups itself (``judge_failed_groups``, group and turn judgings)."""
        skip = {"errors", "failed_groups", "failed_turn_calls"}
        return {f"judge_{f.name}": getattr(self, f.name) for f in fields(self) if f.name not in skip}


class GroupScores(list):
    """One `JudgeScore` per trajectory, in input order, with how they were judged attached.

    method: "group_forced", "group_json" or "pointwise"; metrics: this judging's own `JudgeMetrics`;
    failed: whether the judging failed (then every score is NaN). ids: each trajectory's content id
    (identical trajectories share one). orders: for group judging, the ids in the order the judge read
    them, one list per order read (two with ``two_orders``; none when no call was needed: all
    trajectories identical); positions: each trajectory's place (0 = first) in the first order read.
    """

    def __init__(self, scores: Iterable[JudgeScore], method: str, metrics: JudgeMetrics, *,
                 ids: list[str] | None = None, orders: list[list[str]] | None = None):
        super().__init__(scores)
        self.method, self.metrics = method, metrics
        self.ids, self.orders = ids or [], orders or []

    @property
    def failed(self) -> bool:
        return any(s.failed for s in self)

    @property
    def positions(self) -> list[int | None]:
        """Where each trajectory stood in the first order the judge read (None: no order was read)."""
        first = self.orders[0] if self.orders else []
        return [first.index(i) if i in first else None for i in self.ids]


# ----- asking with bounded retries ------------------------------------------------------------------


def _call(judge: ChatBackend, messages: list[dict[str, str]], *, max_tokens: int,
          metrics: JudgeMetrics) -> str:
    """One chat call to the backend, counted in `metrics` (a refused call too). Raises
    JudgeRequestRejected."""
    t0 = time.perf_counter()
    try:
        if isinstance(judge, UsageBackend):
            text, prompt_tokens, completion_tokens = judge.complete_with_usage(
                messages, max_tokens=max_tokens, temperature=0.0)
            metrics.tokens += prompt_tokens + completion_tokens
            return text
        return judge.complete(messages, max_tokens=max_tokens, temperature=0.0)  # a backend without usage
    finally:
        metrics.calls += 1
        metrics.seconds += time.perf_counter() - t0


def _ask(judge: ChatBackend, messages: list[dict[str, str]], expected: list[str], *, key: str,
         max_retries: int, max_tokens: int,
         metrics: JudgeMetrics) -> tuple[dict[str, tuple[float, str]] | None, str]:
    """Ask, and re-ask with the error at most `max_retries` times: (scores, "") or (None, why it failed).

    A request the judge rejects (`JudgeRequestRejected`) is not re-asked.
    """
    conversation = list(messages)
    error = "?"
    for attempt in range(max_retries + 1):
        metrics.retries += attempt > 0
        try:
            answer = _call(judge, conversation, max_tokens=max_tokens, metrics=metrics)
        except JudgeRequestRejected as exc:
            metrics.record_error(str(exc))
            return None, f"judge refused the request: {exc}"
        try:
            return parse_scores(answer, expected, key=key), ""
        except JudgeAnswerError as exc:
            error = str(exc)
            metrics.record_error(error)
            conversation = conversation + [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": f"That answer could not be used: {exc}. Answer again with the "
                                            f"JSON list only, one entry per {key}: {', '.join(expected)}."},
            ]
    return None, f"judge failed after {max_retries + 1} tries: {error}"


def _yes_no(judge: YesNoBackend, messages: list[dict[str, str]], metrics: JudgeMetrics) -> float:
    """One pointwise question to the backend: P(yes), counted in `metrics`. Raises JudgeRequestRejected."""
    t0 = time.perf_counter()
    try:
        verdict = judge.yes_probability(messages)
        metrics.tokens += verdict.prompt_tokens
        return verdict.p_yes
    finally:
        metrics.calls += 1
        metrics.seconds += time.perf_counter() - t0


def _ask_forced(judge: ForcedBackend, messages: list[dict[str, str]],
                shown: dict[str, list[dict[str, str]]], *, min_mass: float,
                metrics: JudgeMetrics) -> tuple[dict[str, tuple[float, str]] | None, str]:
    """One forced-position read of a group (`shown`: {id: remainder} in the order read; each line recalls its
    trajectory's ending, see `score_line`): ({id: (score, explanation)}, "") or (None, why it failed).

    Nothing is re-asked: the same prompt would give the same probabilities.
    """
    t0 = time.perf_counter()
    ids = list(shown)
    try:
        read = judge.forced_scores(messages, SCORES_HEADER, [score_line(i, r) for i, r in shown.items()])
        metrics.tokens += read.tokens
        found = {}
        for i, probs in zip(ids, read.digit_probs):
            try:
                found[i] = expected_digit(probs, min_mass)
            except JudgeAnswerError as exc:
                raise JudgeAnswerError(f"id {i}: {exc}") from None
        return found, ""
    except JudgeRequestRejected as exc:
        metrics.record_error(str(exc))
        return None, f"judge refused the request: {exc}"
    except JudgeAnswerError as exc:
        metrics.record_error(str(exc))
        return None, f"forced read failed: {exc}"
    finally:
        metrics.calls += 1
        metrics.seconds += time.perf_counter() - t0


# ----- the group judge and the pointwise judge ----------------------------------------------------


def _hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _default_cache_dir() -> Path:
    from course_lib.models import cache_dir

    return cache_dir() / "judge"


def _cache_path(cache_dir: str | Path | None, key: str) -> Path:
    return Path(cache_dir or _default_cache_dir()) / f"{key}.json"


def _write_cache(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)  # atomic: a half-written entry is never read


# What a way of judging does with one group: (prefix, {id: remainder}) -> ({id: (score, why)}, "") or
# (None, why).
Asker = Callable[[list[dict[str, str]], dict[str, list[dict[str, str]]]],
                 tuple[dict[str, tuple[float, str]] | None, str]]


def group_layout(conversations: list[list[dict[str, str]]]
                 ) -> tuple[list[dict[str, str]], dict[str, list[dict[str, str]]], list[str]]:
    """How a group judging lays a group out: (the messages all share, {id: the rest of each distinct
    trajectory} in input order, each trajectory's id in input order). Identical trajectories share one id;
    the ids depend on the set of contents only (`short_ids` over them sorted), as the cache key does.
    `course_lib.judge.warm_start` trains a judge on exactly these prompts."""
    n_prefix = shared_prefix(conversations)
    texts = [render_messages(c[n_prefix:]) for c in conversations]
    contents = sorted(set(texts))
    id_of = dict(zip(contents, short_ids(contents)))
    remainders = {id_of[t]: c[n_prefix:] for t, c in zip(texts, conversations)}
    return conversations[0][:n_prefix], remainders, [id_of[t] for t in texts]


def _judge_distinct(trajectories: Iterable[Trajectory | list[dict[str, str]]], ask: Asker, cache_key: tuple,
                    *, cache_dir: str | Path | None, use_cache: bool,
                    metrics: JudgeMetrics) -> tuple[list[JudgeScore], list[str]]:
    """What both ways of judging a group share: the shared prefix, one id per distinct trajectory, the
    disk cache, and NaN scores with ``failed=True`` when `ask` fails.

    Returns one JudgeScore per trajectory and each trajectory's id (input order both).
    """
    conversations = [as_conversation(t) for t in trajectories]
    if not conversations:
        return [], []
    metrics.groups += 1
    metrics.trajectories += len(conversations)
    prefix, remainders, ids = group_layout(conversations)
    if len(remainders) == 1:
        metrics.skipped_identical += 1
        return [JudgeScore(0.5, "all trajectories are identical: nothing to compare")
                for _ in conversations], ids

    contents = sorted(render_messages(r) for r in remainders.values())
    path = _cache_path(cache_dir, _hash(*cache_key, render_messages(prefix), contents))
    if use_cache and path.exists():
        cached = json.loads(path.read_text())
        metrics.cache_hits += 1
        return [JudgeScore(*cached[i]) for i in ids], ids

    found, why = ask(prefix, remainders)
    if found is None:
        metrics.failed_groups += 1
        return [JudgeScore(math.nan, why, failed=True) for _ in conversations], ids
    if use_cache:
        _write_cache(path, {i: list(v) for i, v in found.items()})
    return [JudgeScore(*found[i]) for i in ids], ids


def _returned(scores: list[JudgeScore], method: str, own: JudgeMetrics, total: JudgeMetrics | None, *,
              ids: list[str] | None = None, orders: list[list[str]] | None = None) -> GroupScores:
    if total is not None:
        total.add(own)
    return GroupScores(scores, method, own, ids=ids, orders=orders)


def _reading_orders(ids: list[str], seed: int, reverse: bool, two_orders: bool) -> list[list[str]]:
    """The orders a group judging reads its distinct ids in: a seeded shuffle of `ids` (reversed with
    `reverse`), then, with `two_orders`, that order reversed."""
    order = list(dict.fromkeys(ids))
    random.Random(seed).shuffle(order)
    if reverse:
        order.reverse()
    return [order, order[::-1]] if two_orders else [order]


def _named(judge: object) -> str:
    """The backend's name for an error message (its repr when it has none)."""
    return repr(getattr(judge, "name", judge))


def _reads_forced(judge: ChatBackend | ForcedBackend, answer: str) -> bool:
    """Whether a group judging reads forced positions: `answer` "forced" or "json", or "auto" (forced when
    the backend is a `ForcedBackend` and, if it is a `ForcingCheck`, says it can). Raises TypeError for a
    backend that cannot give the answer asked for."""
    if answer not in GROUP_ANSWERS:
        raise ValueError(f"answer must be one of {', '.join(GROUP_ANSWERS)}, got {answer!r}")
    can = answer != "json" and isinstance(judge, ForcedBackend) and (
        not isinstance(judge, ForcingCheck) or judge.can_force())  # "json": the backend is not asked
    if answer == "forced" and not can:
        raise TypeError(f"judge {_named(judge)} cannot give next-token probabilities: "
                        "use answer='json' (or 'auto')")
    if not can:
        _check_chats(judge, "group judging with a JSON answer")
    return can


def _check_chats(judge: object, judging: str) -> None:
    """Raise TypeError unless `judge` answers chat prompts (`ChatBackend`), naming what would work instead."""
    if not isinstance(judge, ChatBackend):
        raise TypeError(f"judge {_named(judge)} cannot answer chat prompts ({judging} needs a backend with "
                        "name and complete(messages, *, max_tokens, temperature) -> str, see "
                        "course_lib.judge.backends.ChatBackend): use a LocalJudge or an OpenAIJudge")


def score_group(trajectories: Iterable[Trajectory | list[dict[str, str]]], rubric: str = DEFAULT_RUBRIC, *,
                judge: ChatBackend | ForcedBackend, seed: int = 0, two_orders: bool = False,
                reverse: bool = False, answer: str = "auto", min_mass: float = MIN_DIGIT_MASS,
                max_retries: int = 2, reference: str | None = None, cache_dir: str | Path | None = None,
                use_cache: bool = True, max_tokens: int = 512,
                metrics: JudgeMetrics | None = None) -> GroupScores:
    """Score a group of trajectories relative to each other, the judge reading the whole group at once:
    one JudgeScore per trajectory, in input order.

    trajectories: `Trajectory` objects (or plain chat-message lists) of one task.
    judge: a backend (keyword only): a `ForcedBackend` (forced reads) or a `ChatBackend` (JSON answers),
    see `course_lib.judge.backends`.
    answer: "forced" (``method == "group_forced"``: the judge's answer is forced to
    ``Scores:\nid <id> (recap): `` and each score is the expected digit 0..9 at that position, divided by 9;
    see `expected_digit`),
    "json" (``method == "group_json"``: the judge writes a JSON list, re-asked at most `max_retries`
    times, each answer at most `max_tokens` long), or "auto": forced when the backend can read
    next-token probabilities (`LocalJudge`, an endpoint with completions logprobs), else json.
    min_mass: a forced read whose digits get less probability than this fails the group.
    reference: the task's known answer, shown before the trajectories (a reference-guided judging), or None.
    seed: shuffles the order the judge reads the trajectories in (ids do not change with it).
    two_orders: also score in the reversed order and average both (twice the cost, less order bias).
    reverse: read the trajectories in the reversed order of the one `seed` draws: a second judging whose
    order surely differs when there are two or more distinct trajectories (`judge_agreement` uses it).
    The result's ``orders`` and ``positions`` say which order(s) were read, for measuring position bias.
    On failure (unusable answers, too little mass on the digits, or a request the judge rejected, e.g. a
    prompt too long) every score is NaN with ``failed=True`` and the reason as explanation, and the
    result's metrics count it (as does `metrics`, when given). A `JudgeUnavailable` from the backend is
    raised, not counted: an unreachable endpoint or a wrong key is a configuration problem, not a bad group.
    """
    forced = _reads_forced(judge, answer)
    own = JudgeMetrics()

    def ask(prefix, remainders):
        results = []
        for order in _reading_orders(list(remainders), seed, reverse, two_orders):
            shown = {i: remainders[i] for i in order}
            if forced:
                result, why = _ask_forced(judge, forced_group_prompt(prefix, shown, rubric, reference), shown,
                                          min_mass=min_mass, metrics=own)
            else:
                result, why = _ask(judge, group_prompt(prefix, shown, rubric, reference), order, key="id",
                                   max_retries=max_retries, max_tokens=max_tokens, metrics=own)
            if result is None:
                return None, why
            results.append(result)
        return {i: (sum(r[i][0] for r in results) / len(results), " | ".join(r[i][1] for r in results))
                for i in results[0]}, ""

    # the method is named in the key (v4: before, a backend's mode chose it); forced reads have their own
    # (forced v2: score lines recall each trajectory's ending; the reference is part of the prompt)
    key = (("group-forced-v2", rubric, judge.name, seed, two_orders, reverse, min_mass, reference) if forced
           else ("group-v5", rubric, judge.name, seed, two_orders, reverse, reference))
    scores, ids = _judge_distinct(trajectories, ask, key, cache_dir=cache_dir, use_cache=use_cache,
                                  metrics=own)
    orders = _reading_orders(ids, seed, reverse, two_orders) if len(set(ids)) > 1 else []
    return _returned(scores, "group_forced" if forced else "group_json", own, metrics, ids=ids, orders=orders)


def score_pointwise(trajectories: Iterable[Trajectory | list[dict[str, str]]],
                    rubric: str = DEFAULT_RUBRIC, *, judge: YesNoBackend, cache_dir: str | Path | None = None,
                    use_cache: bool = True, metrics: JudgeMetrics | None = None) -> GroupScores:
    """Score each distinct trajectory of a group alone: score = P(yes) for "did the agent complete the task
    correctly?" (``method == "pointwise"``), one JudgeScore per trajectory, in input order.

    judge: a `YesNoBackend` (keyword only): ``yes_probability(messages) -> YesNo`` and ``name``
    (`LocalJudge`). The rubric is the system message of every question. No JSON to write, so no re-asks:
    a score is always a number in [0, 1], unless the backend rejects a prompt (too long), which fails the
    group (NaN, ``failed=True``, counted). There is no order, hence no position bias; but nothing is
    compared either: the scores are absolute, which a weak judge bunches near one value.
    """
    _check_reads_yes_no(judge)
    own = JudgeMetrics(pointwise=1)

    def ask(prefix, remainders):
        try:
            return {i: _pointwise_score(judge, pointwise_prompt(prefix, r, rubric), own)
                    for i, r in remainders.items()}, ""
        except JudgeRequestRejected as exc:
            own.record_error(str(exc))
            return None, f"judge refused the request: {exc}"

    key = ("pointwise-v1", rubric, judge.name)
    scores, ids = _judge_distinct(trajectories, ask, key, cache_dir=cache_dir, use_cache=use_cache,
                                  metrics=own)
    return _returned(scores, "pointwise", own, metrics, ids=ids)


def _check_reads_yes_no(judge: object) -> None:
    if not isinstance(judge, YesNoBackend):
        raise TypeError(f"judge {_named(judge)} cannot read P(yes) from its next-token "
                        "distribution (a served model answers text only): judge it with score_group / "
                        "score_turns, or use a LocalJudge")


def _pointwise_score(judge: YesNoBackend, messages: list[dict[str, str]],
                     metrics: JudgeMetrics) -> tuple[float, str]:
    p = _yes_no(judge, messages, metrics)
    return p, f"P(yes) = {p:.3f}"
