"""LLM-as-a-judge rewards: score a whole group of trajectories relative to each other in one call.

The group judge (RULER's idea, with its known weaknesses fixed):

* one judge call per group: the messages all trajectories share (system prompt, task) are sent once,
  then each trajectory's remainder under a short id that depends on its content, not its position;
* the judge answers JSON ``[{"id", "explanation", "score"}]`` and scores are matched **by id**;
* the order is shuffled (seeded) against position bias; ``two_orders=True`` scores the group a second
  time in reversed order and averages; ``reverse=True`` reads it in the reversed order alone;
* an answer that cannot be used (no JSON, a missing or unknown id, a score outside [0, 1]) is sent
  back with the error and re-asked at most ``max_retries`` times; after that every score of the group
  is NaN with ``failed=True``, counted in :data:`JUDGE_METRICS`: a failed group is never silently
  dropped or scored 0, the trainer skips it;
* a request the judge rejects (HTTP 400, 413, 422: a prompt too long for it) fails its group the same
  way, at once, instead of stopping the run; 401, 403 and 404 are configuration mistakes and raise;
* identical trajectories are scored once (all identical: no call at all, every score 0.5);
* results are cached on disk by a hash of (rubric, judge name, order seed and direction, contents); the
  judge's name names its model, so two judge models never share cached answers.

Backends share one method, ``complete(messages, *, max_tokens, temperature) -> str``, and a ``name``
(part of the cache key): :class:`LocalJudge` (transformers, e.g. the embedded SmolLM2-135M) and
:class:`OpenAIJudge` (any OpenAI-compatible endpoint, e.g. vLLM, Ollama, or
``python -m course_lib.judge_server``).

A 135M model rarely writes valid group JSON. ``LocalJudge(mode="logprob")`` gives a weak judge a fair
chance: each distinct trajectory is scored alone by P(yes) for "did the agent reach the goal?", read
from the next-token distribution, with the rubric as the system message. It always returns a valid
score and has no position bias by construction, but it is pointwise, not relative.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from course_lib.trajectory import Trajectory

DEFAULT_RUBRIC = """\
Judge how well each agent trajectory accomplished the task, compared with the others in the group.
- An agent that reached the goal (a correct final answer, the target reached) must score clearly
  higher than any agent that did not.
- Among agents that reached the goal, the one that got there with fewer wasted steps (no repeated,
  malformed or useless tool calls) scores higher.
- Among agents that did not reach the goal, give partial credit for real progress: useful tool
  calls, relevant information found, getting closer to the target.
- Make the gaps between scores reflect the gaps in quality: near-equal work gets near-equal
  scores, very different work gets very different scores.
Scores are numbers from 0 (useless) to 1 (perfect)."""

TURN_RUBRIC = """\
Judge each turn of one agent trajectory on its own: given only what the agent knew at that moment
(the task and the earlier observations), was this action a useful next step?
- 1: a well-formed action that clearly moves toward the goal (the right search, the right move, a
  correct final answer).
- about 0.5: a reasonable action that helps little (a redundant search, a detour).
- 0: a malformed action, a repeated useless call, or a wrong or unsupported final answer.
Scores are numbers from 0 to 1."""

# Scores may overshoot [0, 1] by float noise only; anything larger is an error the judge must fix.
SCORE_TOLERANCE = 1e-6
# Characters of one message shown to the judge; long tool outputs are cut in the middle.
MAX_MESSAGE_CHARS = 1500


class JudgeUnavailable(RuntimeError):
    """The judge endpoint could not be reached (refused, timed out) after bounded retries."""


class JudgeAnswerError(ValueError):
    """A judge answer that cannot be used; its message is sent back to the judge on a retry."""


class JudgeRequestRejected(ValueError):
    """The judge refused this one request (HTTP 400, 413, 422; a prompt that cannot fit): its group fails,
    the run goes on. Not re-asked: the re-ask would be longer still."""


@dataclass
class JudgeScore:
    """One trajectory's judged score. A failed score is NaN, so it can never pass for a real 0."""

    score: float
    explanation: str
    failed: bool = False


@dataclass
class JudgeMetrics:
    """Running counts of what judging cost and how often it failed (the trainer logs these)."""

    groups: int = 0  # groups asked for
    failed_groups: int = 0  # groups whose answers stayed unusable after all retries
    trajectories: int = 0
    calls: int = 0  # backend calls, retries included
    retries: int = 0  # re-asks after an unusable answer
    cache_hits: int = 0  # groups answered from the disk cache
    skipped_identical: int = 0  # groups with one distinct trajectory: no call
    turn_calls: int = 0  # per-turn judgements asked for
    failed_turn_calls: int = 0
    tokens: int = 0  # prompt + completion tokens, as the backend reports them
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)  # the last few unusable-answer errors

    def record_error(self, message: str) -> None:
        self.errors = (self.errors + [message])[-10:]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["failure_rate"] = self.failed_groups / max(1, self.groups)
        return out

    def reset(self) -> None:
        for name, value in asdict(JudgeMetrics()).items():
            setattr(self, name, value)


# Module-level totals, updated by every call of score_group and score_turns.
JUDGE_METRICS = JudgeMetrics()


# ----- rendering trajectories for the judge ---------------------------------------------------------


def _clip_text(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} [... {len(text) - limit} characters cut ...] {text[-half:]}"


def render_messages(messages: list[dict[str, str]]) -> str:
    """Chat messages as plain text, one block per message: ``[role]`` then the content."""
    return "\n".join(f"[{m['role']}]\n{_clip_text(str(m.get('content', '')))}" for m in messages)


def shared_prefix(conversations: list[list[dict[str, str]]]) -> int:
    """How many leading messages all conversations have in common."""
    n = min(len(c) for c in conversations)
    for i in range(n):
        if any(c[i] != conversations[0][i] for c in conversations[1:]):
            return i
    return n


def _hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _short_ids(contents: list[str]) -> list[str]:
    """A short random-looking id per distinct content ("t3f"), derived from the content, not the position.

    Deriving the id from the content (not from the seed) means a second order shows the judge the
    same ids: only the positions change, which is what the position-bias meter needs. When two
    contents share a hash prefix the later one gets a longer id, so pass the contents sorted: then
    the ids depend only on the set of contents, as the cache key does.
    """
    ids: list[str] = []
    for content in contents:
        digest = hashlib.sha256(content.encode()).hexdigest()
        for width in range(2, 12):
            candidate = "t" + digest[:width]
            if candidate not in ids:
                ids.append(candidate)
                break
    return ids


def _as_conversation(item: Trajectory | list[dict[str, str]]) -> list[dict[str, str]]:
    return item.messages if isinstance(item, Trajectory) else item


# ----- reading the judge's answer ------------------------------------------------------------------


def _entries(data: Any) -> Any:
    """The list of score entries: a dict wrapping one list (``{"scores": [...]}``) is unwrapped, a lone
    entry becomes a list of one."""
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        return lists[0] if len(lists) == 1 else [data]
    return data


def _looks_like_scores(value: Any, key: str) -> bool:
    """A list of objects carrying "score" or `key`, or a dict wrapping one. A lone entry does not count
    here: prose often quotes the format ("like {"id": ..., "score": 0.0}") before the real list."""
    if isinstance(value, dict):
        lists = [v for v in value.values() if isinstance(v, list)]
        value = lists[0] if len(lists) == 1 else None
    return (isinstance(value, list) and bool(value) and all(isinstance(e, dict) for e in value)
            and any("score" in e or key in e for e in value))


def extract_json(text: str, key: str = "id") -> Any:
    """The judge's JSON answer in a chatty text (code fences and text around are ignored).

    Fenced blocks are read first, then the whole text. The first array or object shaped like scores
    wins: a list of objects carrying "score" or `key`, or a dict wrapping such a list, so JSON-looking
    prose before it ("scores are in [0, 1]", a quoted example entry) is skipped. When nothing has that
    shape, the first JSON array or object is returned (a lone entry, or something the caller can say
    is wrong). Raises JudgeAnswerError when there is no JSON at all.
    """
    fenced = re.findall(r"```(?:json)?\s*(.*?)```", text, flags=re.DOTALL)
    decoder = json.JSONDecoder()
    first = None
    for candidate in fenced + [text]:
        for match in re.finditer(r"[\[{]", candidate):
            try:
                value, _ = decoder.raw_decode(candidate, match.start())
            except json.JSONDecodeError:
                continue
            if _looks_like_scores(value, key):
                return value
            if first is None and (isinstance(value, list) or (isinstance(value, dict) and value)):
                first = value
    if first is None:
        raise JudgeAnswerError("no JSON list found in the answer")
    return first


def _as_score(value: Any, where: str) -> float:
    if isinstance(value, bool):  # float(True) is 1.0, but "score": true is not a score
        raise JudgeAnswerError(f"{where}: score {json.dumps(value)} is not a number")
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise JudgeAnswerError(f"{where}: score {value!r} is not a number") from None
    if math.isnan(score) or not (-SCORE_TOLERANCE <= score <= 1 + SCORE_TOLERANCE):
        raise JudgeAnswerError(f"{where}: score {value!r} is outside [0, 1]")
    return min(1.0, max(0.0, score))  # only float noise is clipped


def parse_scores(text: str, expected: list[str], key: str = "id") -> dict[str, tuple[float, str]]:
    """Parse ``[{key, explanation, score}, ...]`` into {id: (score, explanation)}, checking every id.

    Missing, unknown or repeated ids and scores that are not numbers in [0, 1] (``true`` is not 1)
    raise JudgeAnswerError with a message the judge can act on. A dict wrapping the list
    (``{"scores": [...]}``) is accepted; JSON in the prose before the list is skipped (`extract_json`).
    """
    found: dict[str, tuple[float, str]] = {}
    for item in _entries(extract_json(text, key)):
        if not isinstance(item, dict) or key not in item or "score" not in item:
            raise JudgeAnswerError(f'every entry needs "{key}" and "score"; got {json.dumps(item)[:100]}')
        item_id = str(item[key]).strip()
        if item_id not in expected:
            raise JudgeAnswerError(f"unknown {key} {item_id!r}; the {key}s are: {', '.join(expected)}")
        if item_id in found:
            raise JudgeAnswerError(f"{key} {item_id!r} is scored twice")
        found[item_id] = (_as_score(item["score"], f"{key} {item_id}"), str(item.get("explanation", "")))
    missing = [i for i in expected if i not in found]
    if missing:
        raise JudgeAnswerError(f"no score for {key} {', '.join(missing)}; score every one of: {', '.join(expected)}")
    return found


# ----- asking with bounded retries ------------------------------------------------------------------


def _ask(judge, messages: list[dict[str, str]], expected: list[str], *, key: str, max_retries: int,
         max_tokens: int, metrics: list[JudgeMetrics]) -> tuple[dict[str, tuple[float, str]] | None, str]:
    """Ask, and re-ask with the error at most `max_retries` times: (scores, "") or (None, why it failed).

    A request the judge rejects (`JudgeRequestRejected`) is not re-asked.
    """
    conversation = list(messages)
    error = "?"
    for attempt in range(max_retries + 1):
        tokens_before = getattr(judge, "tokens_used", 0)
        t0 = time.perf_counter()
        rejected = None
        try:
            answer = judge.complete(conversation, max_tokens=max_tokens, temperature=0.0)
        except JudgeRequestRejected as exc:
            rejected = exc
        for m in metrics:
            m.calls += 1
            m.retries += attempt > 0
            m.seconds += time.perf_counter() - t0
            m.tokens += getattr(judge, "tokens_used", 0) - tokens_before
        if rejected is not None:
            for m in metrics:
                m.record_error(str(rejected))
            return None, f"judge refused the request: {rejected}"
        try:
            return parse_scores(answer, expected, key=key), ""
        except JudgeAnswerError as exc:
            error = str(exc)
            for m in metrics:
                m.record_error(error)
            conversation = conversation + [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": f"That answer could not be used: {exc}. Answer again with the "
                                            f"JSON list only, one entry per {key}: {', '.join(expected)}."},
            ]
    return None, f"judge failed after {max_retries + 1} tries: {error}"


# ----- the group judge ----------------------------------------------------------------------------


def group_prompt(prefix: list[dict[str, str]], remainders: dict[str, list[dict[str, str]]],
                 rubric: str) -> list[dict[str, str]]:
    """The judge's messages: rubric and answer format (system), shared context once, then each trajectory by id."""
    ids = list(remainders)
    example = ", ".join(f'{{"id": "{i}", "explanation": "...", "score": 0.0}}' for i in ids[:2])
    system = (f"You are a strict, fair judge of AI agent trajectories.\n\n{rubric}\n\n"
              f"Answer with a JSON list only, one entry per trajectory id, like [{example}, ...]. "
              f"Write the explanation (one short sentence) before the score.")
    parts = ["All trajectories start from this shared context:", "<context>", render_messages(prefix), "</context>", ""]
    for i in ids:
        parts += [f'<trajectory id="{i}">', render_messages(remainders[i]) or "(no further messages)",
                  "</trajectory>", ""]
    parts.append(f"Score every trajectory id: {', '.join(ids)}.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(parts)}]


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


def score_group(trajectories: Iterable[Trajectory | list[dict[str, str]]], rubric: str = DEFAULT_RUBRIC,
                judge=None, *, seed: int = 0, two_orders: bool = False, reverse: bool = False,
                max_retries: int = 2, cache_dir: str | Path | None = None, use_cache: bool = True,
                max_tokens: int = 512, metrics: JudgeMetrics | None = None) -> list[JudgeScore]:
    """Score a group of trajectories relative to each other: one JudgeScore per trajectory, in input order.

    trajectories: `Trajectory` objects (or plain chat-message lists) of one task.
    judge: a backend with ``complete(messages, *, max_tokens, temperature) -> str`` and ``name``;
    a judge with ``mode == "logprob"`` is asked per trajectory instead, with the rubric as the system
    message of each question (see `LocalJudge`).
    seed: shuffles the order the judge reads the trajectories in (ids do not change with it).
    two_orders: also score in the reversed order and average both (twice the cost, less order bias).
    reverse: read the trajectories in the reversed order of the one `seed` draws: a second judging whose
    order surely differs when there are two or more distinct trajectories (`judge_agreement` uses it).
    On failure (answers unusable after all tries, or a request the judge rejected, e.g. a prompt too
    long) every score is NaN with ``failed=True`` and the reason as explanation; `JUDGE_METRICS` (and
    `metrics`) count it. A `JudgeUnavailable` from the backend is raised, not counted: an unreachable
    endpoint or a wrong key is a configuration problem, not a bad group.
    """
    if judge is None:
        raise ValueError("pass a judge backend, e.g. judge=LocalJudge() or judge=OpenAIJudge()")
    conversations = [_as_conversation(t) for t in trajectories]
    if not conversations:
        return []
    sinks = [JUDGE_METRICS] + ([metrics] if metrics is not None else [])
    for m in sinks:
        m.groups += 1
        m.trajectories += len(conversations)

    n_prefix = shared_prefix(conversations)
    prefix = conversations[0][:n_prefix]
    texts = [render_messages(c[n_prefix:]) for c in conversations]
    distinct = list(dict.fromkeys(texts))  # identical trajectories are judged once
    if len(distinct) == 1:
        for m in sinks:
            m.skipped_identical += 1
        return [JudgeScore(0.5, "all trajectories are identical: nothing to compare") for _ in conversations]

    contents = sorted(distinct)  # ids and cache key depend on the set of contents, not the input order
    ids = _short_ids(contents)
    id_of = dict(zip(contents, ids))
    remainder_of = {id_of[t]: c[n_prefix:] for t, c in zip(texts, conversations)}
    mode = getattr(judge, "mode", "group")
    # v2: v1 entries stored scores under ids that could depend on the input order (two contents sharing a hash prefix)
    # v3: logprob questions show the rubric; the order can be reversed
    key = _hash("group-v3", rubric, judge.name, mode, seed, two_orders, reverse, render_messages(prefix), contents)
    path = _cache_path(cache_dir, key)
    if use_cache and path.exists():
        cached = json.loads(path.read_text())
        for m in sinks:
            m.cache_hits += 1
        return [JudgeScore(*cached[id_of[t]]) for t in texts]

    found: dict[str, tuple[float, str]] | None = None
    why = ""
    if mode == "logprob":
        try:
            found = _score_pointwise(judge, prefix, remainder_of, rubric, sinks)
        except JudgeRequestRejected as exc:
            why = f"judge refused the request: {exc}"
    else:
        order = [id_of[t] for t in distinct]  # input order, then the seeded shuffle
        random.Random(seed).shuffle(order)
        if reverse:
            order.reverse()
        orders = [order, order[::-1]] if two_orders else [order]
        results = []
        for o in orders:
            prompt = group_prompt(prefix, {i: remainder_of[i] for i in o}, rubric)
            result, why = _ask(judge, prompt, o, key="id", max_retries=max_retries, max_tokens=max_tokens,
                               metrics=sinks)
            if result is None:
                break
            results.append(result)
        if len(results) == len(orders):
            found = {i: (sum(r[i][0] for r in results) / len(results),
                         " | ".join(r[i][1] for r in results)) for i in ids}
    if found is None:
        for m in sinks:
            m.failed_groups += 1
        return [JudgeScore(math.nan, why, failed=True) for _ in conversations]
    if use_cache:
        _write_cache(path, {i: list(v) for i, v in found.items()})
    return [JudgeScore(*found[id_of[t]]) for t in texts]


# ----- the per-turn judge -----------------------------------------------------------------------------


class TurnScores(list):
    """One score per turn (a list of floats), with `failed` and `explanations` attached.

    When the judge failed, every score is NaN and `failed` is True.
    """

    def __init__(self, scores: Iterable[float], explanations: list[str], failed: bool = False):
        super().__init__(scores)
        self.explanations = explanations
        self.failed = failed


def _turns(trajectory: Trajectory | list[dict[str, str]]) -> tuple[list[dict[str, str]], list[tuple[str, str]]]:
    """(the messages before the first action, [(action, observation) per turn])."""
    messages = _as_conversation(trajectory)
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    if isinstance(trajectory, Trajectory) and trajectory.steps:
        return messages[:first], [(s.action_text, s.observation_text) for s in trajectory.steps]
    turns: list[tuple[str, str]] = []
    for m in messages[first:]:
        if m["role"] == "assistant":
            turns.append((m["content"], ""))
        elif turns:
            turns[-1] = (turns[-1][0], (turns[-1][1] + "\n" + m["content"]).strip())
    return messages[:first], turns


def turn_prompt(context: list[dict[str, str]], turns: list[tuple[str, str]], rubric: str) -> list[dict[str, str]]:
    system = (f"You are a strict, fair judge of the steps of an AI agent.\n\n{rubric}\n\n"
              'Answer with a JSON list only, one entry per turn, like [{"turn": 1, "explanation": "...", '
              '"score": 0.0}, ...]. Write the explanation (one short sentence) before the score.')
    parts = ["<context>", render_messages(context), "</context>", ""]
    for k, (action, observation) in enumerate(turns, 1):
        parts += [f'<turn number="{k}">', f"[action]\n{_clip_text(action)}",
                  f"[observation]\n{_clip_text(observation) or '(the episode ended)'}", "</turn>", ""]
    parts.append(f"Score every turn: {', '.join(str(k) for k in range(1, len(turns) + 1))}.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(parts)}]


def score_turns(trajectory: Trajectory | list[dict[str, str]], rubric: str = TURN_RUBRIC, judge=None, *,
                max_retries: int = 2, max_tokens: int = 512, metrics: JudgeMetrics | None = None) -> TurnScores:
    """Score every turn of one trajectory: was this action useful given what was known? One float per turn.

    Same protocol as `score_group` (JSON, checked turn numbers, bounded re-asks). A judge with
    ``mode == "logprob"`` scores each turn by P(yes) for "was this a useful step?", with the rubric as
    the system message (without the JSON answer format, which does not apply). On failure (a
    rejected request included) the result has ``failed=True`` and NaN scores, and the metrics count it.
    """
    if judge is None:
        raise ValueError("pass a judge backend, e.g. judge=LocalJudge() or judge=OpenAIJudge()")
    context, turns = _turns(trajectory)
    sinks = [JUDGE_METRICS] + ([metrics] if metrics is not None else [])
    if not turns:
        return TurnScores([], [])
    for m in sinks:
        m.turn_calls += 1
    expected = [str(k) for k in range(1, len(turns) + 1)]
    if getattr(judge, "mode", "group") == "logprob":
        scores = []
        try:
            for k in range(len(turns)):
                question = ("Was the last action a useful, well-formed next step toward the goal, given what the "
                            "agent knew? Answer yes or no.")
                # the rubric without the system's JSON request, which does not apply
                prompt = [{"role": "system", "content": rubric}] + turn_prompt(context, turns[:k + 1], rubric)[1:]
                prompt[-1]["content"] += "\n" + question
                scores.append(_yes_probability(judge, prompt, sinks))
            return TurnScores(scores, ["P(yes) of the local judge"] * len(turns))
        except JudgeRequestRejected as exc:
            found, why = None, f"judge refused the request: {exc}"
    else:
        found, why = _ask(judge, turn_prompt(context, turns, rubric), expected, key="turn",
                          max_retries=max_retries, max_tokens=max_tokens, metrics=sinks)
    if found is None:
        for m in sinks:
            m.failed_turn_calls += 1
        return TurnScores([math.nan] * len(turns), [why] * len(turns), failed=True)
    return TurnScores([found[k][0] for k in expected], [found[k][1] for k in expected])


# ----- pointwise scoring for weak judges ----------------------------------------------------------------


def _yes_probability(judge, messages: list[dict[str, str]], sinks: list[JudgeMetrics]) -> float:
    tokens_before = judge.tokens_used
    t0 = time.perf_counter()
    p = judge.yes_probability(messages)
    for m in sinks:
        m.calls += 1
        m.seconds += time.perf_counter() - t0
        m.tokens += judge.tokens_used - tokens_before
    return p


def _score_pointwise(judge, prefix: list[dict[str, str]], remainders: dict[str, list[dict[str, str]]],
                     rubric: str, sinks: list[JudgeMetrics]) -> dict[str, tuple[float, str]]:
    """Each trajectory alone, the rubric as system message: score = P(yes) for "did the agent reach the
    goal?". Always valid."""
    out = {}
    for i, remainder in remainders.items():
        text = (f"{render_messages(prefix)}\n{render_messages(remainder)}\n\n"
                "Question: did the agent complete the task correctly? Answer yes or no.")
        p = _yes_probability(judge, [{"role": "system", "content": rubric}, {"role": "user", "content": text}], sinks)
        out[i] = (p, f"P(yes) = {p:.3f}")
    return out


# ----- backends ---------------------------------------------------------------------------------------


class LocalJudge:
    """A judge run in-process with transformers (greedy decoding by default).

    name: any `load_policy` name ("smollm2-135m", the default, a checkpoint folder, a hub id); with
    `model` and `tokenizer` already loaded, the name of that model (default: its ``name_or_path``).
    The name is part of `self.name`, hence of the cache key: give weights that share a
    ``name_or_path`` (a policy being trained) a name of their own. mode: "group" (JSON answers, the
    main protocol) or "logprob" (score each trajectory by P(yes) from the next-token distribution, the
    rubric as the system message: cheap, always valid, meant for tiny judges that cannot write the JSON).

    max_prompt_tokens: a longer prompt is shortened in the middle of its longest non-system message
    (the trajectories of a group prompt, see `_fit_prompt`), so the rubric and the answer format
    survive; when even that cannot fit, `JudgeRequestRejected` fails the group.
    """

    def __init__(self, name: str | None = None, model=None, tokenizer=None, *, mode: str = "group",
                 device: str | None = None, max_prompt_tokens: int = 6000):
        if mode not in ("group", "logprob"):
            raise ValueError(f"mode must be 'group' or 'logprob', got {mode!r}")
        if model is None or tokenizer is None:
            from course_lib.models import EMBEDDED, load_policy

            name = name or EMBEDDED
            model, tokenizer = load_policy(name, device=device)
        self.model, self.tokenizer, self.mode = model, tokenizer, mode
        # The model's name is in the cache key: two judge models must never share cached answers.
        self.name = f"local:{name or getattr(model, 'name_or_path', '') or type(model).__name__}:{mode}"
        self.max_prompt_tokens = max_prompt_tokens
        self.tokens_used = 0
        self._lock = threading.Lock()  # one generate at a time (the server answers from threads)

    def _prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _fit_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt's token ids, at most `max_prompt_tokens` of them.

        A longer prompt loses tokens in the middle of its longest message that is not the system's: in
        a group prompt that is the trajectories, so the rubric and the answer format (the system
        message), the task (the start of the user message) and the list of ids to score (its end) are
        kept; a middle trajectory may be cut away. (Cutting from the left, as before, lost the rubric.)
        Raises `JudgeRequestRejected` naming the token counts when the rest alone does not fit.
        """
        ids = self._prompt_ids(messages)
        for _ in range(3):  # re-tokenizing the cut text can move a few tokens: check again
            excess = len(ids) - self.max_prompt_tokens
            if excess <= 0:
                return ids
            cuttable = [i for i, m in enumerate(messages) if m["role"] != "system"]
            longest = max(cuttable, key=lambda i: len(messages[i]["content"]), default=None)
            content = [] if longest is None else \
                self.tokenizer(messages[longest]["content"], add_special_tokens=False)["input_ids"]
            keep = len(content) - excess - 32  # 32: room for the marker below
            if keep < 0:
                break
            head, tail = content[:keep // 2], content[len(content) - (keep - keep // 2):]
            cut = (f"{self.tokenizer.decode(head)}\n[... {len(content) - keep} tokens cut: the judge reads at "
                   f"most {self.max_prompt_tokens} ...]\n{self.tokenizer.decode(tail)}")
            messages = messages[:longest] + [{**messages[longest], "content": cut}] + messages[longest + 1:]
            ids = self._prompt_ids(messages)
        raise JudgeRequestRejected(
            f"the judge prompt has {len(ids)} tokens and cutting its trajectories cannot bring it to "
            f"max_prompt_tokens={self.max_prompt_tokens}: the instructions alone take about {len(ids) - len(content)}; "
            "raise max_prompt_tokens or shorten the rubric")

    def _encode(self, messages: list[dict[str, str]]):
        import torch

        return torch.tensor([self._fit_prompt(messages)], device=self.model.device)

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int = 512, temperature: float = 0.0) -> str:
        return self.complete_with_usage(messages, max_tokens=max_tokens, temperature=temperature)[0]

    def complete_with_usage(self, messages: list[dict[str, str]], *, max_tokens: int = 512,
                            temperature: float = 0.0) -> tuple[str, int, int]:
        """(answer, prompt tokens, completion tokens) of this call alone, whatever other threads do meanwhile."""
        import torch

        from course_lib.models import autocast_context, end_of_turn_id

        input_ids = self._encode(messages)
        sample = temperature > 0
        with self._lock, torch.no_grad(), autocast_context(self.model.device, getattr(self.model, "course_autocast", None)):
            out = self.model.generate(
                input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_tokens,
                do_sample=sample, temperature=temperature if sample else None, top_p=None, top_k=None,
                eos_token_id=end_of_turn_id(self.tokenizer), pad_token_id=self.tokenizer.pad_token_id,
            )
            prompt_tokens, completion_tokens = int(input_ids.shape[1]), int(out.shape[1] - input_ids.shape[1])
            self.tokens_used += prompt_tokens + completion_tokens  # under the lock: += is not atomic across threads
        return self.tokenizer.decode(out[0, prompt_tokens:], skip_special_tokens=True), prompt_tokens, completion_tokens

    def yes_probability(self, messages: list[dict[str, str]]) -> float:
        """P(yes) / (P(yes) + P(no)) for the first token of the answer (both capitalisations)."""
        import torch

        input_ids = self._encode(messages)
        with self._lock, torch.no_grad():
            logits = self.model(input_ids=input_ids).logits[0, -1].float()
            self.tokens_used += int(input_ids.shape[1])
        probs = torch.softmax(logits, dim=-1)

        def mass(words: list[str]) -> float:
            ids = {self.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in words}
            return float(sum(probs[i] for i in ids))

        yes, no = mass(["yes", "Yes", " yes", " Yes"]), mass(["no", "No", " no", " No"])
        return yes / (yes + no) if yes + no > 0 else 0.5


class OpenAIJudge:
    """A judge behind any OpenAI-compatible chat-completions endpoint (needs `pip install openai`).

    Unset arguments come from $COURSE_JUDGE_BASE_URL, $COURSE_JUDGE_MODEL and $COURSE_JUDGE_API_KEY;
    without a model name the endpoint's first listed model is used. Connection errors, timeouts, rate
    limits and 5xx answers are retried `max_retries` times with exponential backoff, then raise
    `JudgeUnavailable` naming the URL. A request rejected with 400, 413 or 422 (e.g. a prompt too long)
    raises `JudgeRequestRejected`, which fails only its group; other 4xx answers (401, 403, 404: a
    wrong key, model or URL) raise `JudgeUnavailable` with a hint.
    """

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                 timeout: float = 30, max_retries: int = 3, backoff: float = 0.5):
        try:
            import openai
        except ImportError:
            raise ImportError("OpenAIJudge needs the openai client: pip install 'course_lib[openai]' "
                              "(or pip install openai)") from None
        self._openai = openai
        self.base_url = base_url or os.environ.get("COURSE_JUDGE_BASE_URL") or "https://api.openai.com/v1"
        self.model = model or os.environ.get("COURSE_JUDGE_MODEL")
        api_key = api_key or os.environ.get("COURSE_JUDGE_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
        self.max_retries, self.backoff = max_retries, backoff
        # The client's own retries are off: ours are bounded, counted and end in a clear error.
        self.client = openai.OpenAI(base_url=self.base_url, api_key=api_key, timeout=timeout, max_retries=0)
        self.tokens_used = 0

    @property
    def name(self) -> str:
        return f"openai:{self.base_url}:{self._model()}"

    def _retrying(self, call):
        retryable = (self._openai.APIConnectionError, self._openai.APITimeoutError, self._openai.RateLimitError,
                     self._openai.InternalServerError)
        for attempt in range(self.max_retries + 1):
            try:
                return call()
            except retryable as exc:
                if attempt == self.max_retries:
                    raise JudgeUnavailable(
                        f"judge endpoint {self.base_url} is unavailable after {attempt + 1} tries "
                        f"({type(exc).__name__}: {exc}); is the server running? "
                        "(e.g. python -m course_lib.judge_server --port 8011)") from exc
                time.sleep(self.backoff * 2 ** attempt)
            except self._openai.APIStatusError as exc:
                raise self._refusal(exc) from exc

    def _refusal(self, exc) -> Exception:
        """The error for a 4xx answer: this request only (400, 413, 422) or the configuration (the rest)."""
        status = exc.status_code
        if status in (400, 413, 422):
            return JudgeRequestRejected(f"judge endpoint {self.base_url} rejected the request ({exc})")
        hint = {401: "check the API key ($COURSE_JUDGE_API_KEY or api_key=...)",
                403: "check that the API key may use this model",
                404: f"check base_url (it usually ends in /v1) and the model name {self.model!r}"}
        return JudgeUnavailable(f"judge endpoint {self.base_url} refused the request ({exc}); "
                                f"{hint.get(status, 'check the endpoint and its settings')}")

    def _model(self) -> str:
        if self.model is None:
            models = self._retrying(lambda: self.client.models.list())
            if not models.data:
                raise JudgeUnavailable(f"judge endpoint {self.base_url} lists no models; pass model=...")
            self.model = models.data[0].id
        return self.model

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int = 512, temperature: float = 0.0) -> str:
        model = self._model()
        response = self._retrying(lambda: self.client.chat.completions.create(
            model=model, messages=messages, max_tokens=max_tokens, temperature=temperature))
        if response.usage is not None:
            self.tokens_used += int(response.usage.total_tokens or 0)
        return response.choices[0].message.content or ""


# ----- judge quality against a verifier ---------------------------------------------------------------


def _pairwise_accuracy(scores: list[float], rewards: list[float]) -> tuple[float, int]:
    """(judge agreements, pairs) over pairs with different verifier rewards; a judge tie counts half."""
    agree, pairs = 0.0, 0
    for a in range(len(scores)):
        for b in range(a + 1, len(scores)):
            if rewards[a] == rewards[b]:
                continue
            pairs += 1
            d = (scores[a] - scores[b]) * (rewards[a] - rewards[b])
            agree += 1.0 if d > 0 else 0.5 if d == 0 else 0.0
    return agree, pairs


def verifier_groups(env_name: str, n_groups: int, *, group_size: int = 4, n_expert: int | None = None, model=None,
                    tokenizer=None, seed: int = 0, split: str = "test", max_new_tokens: int = 96,
                    progress: bool = False, judge=None) -> list[list[Trajectory]]:
    """Groups with verifier rewards that vary: `n_expert` expert demonstrations (default half) plus
    base-policy rollouts (temperature 1) of the same task. Reusable across judges."""
    from course_lib.envs import load_tasks
    from course_lib.rollout import expert_rollout, rollout

    if model is None or tokenizer is None:
        if isinstance(judge, LocalJudge):
            model, tokenizer = judge.model, judge.tokenizer
        else:
            from course_lib.models import load_policy

            model, tokenizer = load_policy()
    n_expert = group_size // 2 if n_expert is None else n_expert
    tasks = load_tasks(env_name, split)
    tasks = random.Random(seed).sample(tasks, min(n_groups, len(tasks)))
    experts = expert_rollout(tokenizer, env_name, tasks)
    if group_size <= n_expert:
        return [[e] * group_size for e in experts]
    policy = rollout(model, tokenizer, env_name, tasks, group_size=group_size - n_expert,
                     max_new_tokens=max_new_tokens, temperature=1.0, seed=seed, progress=progress)
    return [[e] * n_expert + list(g) for e, g in zip(experts, policy)]


def judge_agreement(env_name: str, judge, n_groups: int, *, group_size: int = 4, model=None, tokenizer=None,
                    seed: int = 0, n_expert: int | None = None, split: str = "test", max_retries: int = 2,
                    rubric: str = DEFAULT_RUBRIC, max_new_tokens: int = 96, judge_max_tokens: int = 512,
                    groups: list[list[Trajectory]] | None = None, progress: bool = False) -> dict[str, Any]:
    """How well a judge agrees with a verifier, on groups that mix expert demonstrations and policy rollouts.

    Each group holds `n_expert` expert trajectories (default half) and the rest base-policy rollouts
    (temperature 1), so rewards vary inside groups. Every group is judged twice without the cache: in a
    seeded order, then in that order reversed. Returns:

    * pairwise ranking accuracy (pairs with different rewards; judge ties count half) and mean
      within-group Kendall τ (scipy), from the first judging of each group where it succeeded;
    * position_bias_rate: the share of trajectories whose score moves by more than 0.01 between the two
      orders, over groups where both judgings succeeded and that hold at least two distinct
      trajectories (a group of identical ones has a single order, so it cannot show position bias);
    * per group, both judgings together: failure_rate (share of groups where either judging failed),
      tokens_per_group and seconds_per_group (the cost of judging a group both ways);
    * per judging (one `score_group` call, two per group): failed_judgings_rate, tokens_per_judging,
      seconds_per_judging.
    """
    from scipy.stats import kendalltau

    n_expert = group_size // 2 if n_expert is None else n_expert
    if groups is None:
        groups = verifier_groups(env_name, n_groups, group_size=group_size, n_expert=n_expert, model=model,
                                 tokenizer=tokenizer, seed=seed, split=split, max_new_tokens=max_new_tokens,
                                 progress=progress, judge=judge)

    metrics = JudgeMetrics()
    agree, pairs, taus, moved, compared, failed, reward_mean = 0.0, 0, [], 0, 0, 0, []
    for k, trajectories in enumerate(tqdm(groups, desc=f"judging ({getattr(judge, 'name', type(judge).__name__)})", disable=not progress,
                                          leave=False)):
        rewards = [t.reward for t in trajectories]
        reward_mean.append(sum(rewards) / len(rewards))
        # The second judging reverses the first one's order: two seeds could draw the same order.
        runs = [score_group(trajectories, rubric, judge, seed=seed * 1000 + k * 2, reverse=reverse,
                            max_retries=max_retries, use_cache=False, max_tokens=judge_max_tokens, metrics=metrics)
                for reverse in (False, True)]
        failed += any(run[0].failed for run in runs)
        if runs[0][0].failed:
            continue
        scores = [s.score for s in runs[0]]
        a, p = _pairwise_accuracy(scores, rewards)
        agree, pairs = agree + a, pairs + p
        if len(set(rewards)) > 1 and len(set(scores)) > 1:
            taus.append(float(kendalltau(scores, rewards).statistic))
        if not runs[1][0].failed and len({render_messages(t.messages) for t in trajectories}) > 1:
            moved += sum(abs(x.score - y.score) > 0.01 for x, y in zip(runs[0], runs[1]))
            compared += len(trajectories)
    n, judgings = max(1, len(groups)), max(1, metrics.groups)
    return {
        "env": env_name, "judge": judge.name, "groups": len(groups), "group_size": group_size,
        "expert_per_group": n_expert, "mean_verifier_reward": sum(reward_mean) / max(1, len(reward_mean)),
        "pairwise_accuracy": agree / pairs if pairs else math.nan, "pairs": pairs,
        "kendall_tau": sum(taus) / len(taus) if taus else math.nan, "tau_groups": len(taus),
        "position_bias_rate": moved / compared if compared else math.nan,
        "failure_rate": failed / n, "tokens_per_group": metrics.tokens / n, "seconds_per_group": metrics.seconds / n,
        "failed_judgings_rate": metrics.failed_groups / judgings, "tokens_per_judging": metrics.tokens / judgings,
        "seconds_per_judging": metrics.seconds / judgings,
        "judgings_per_group": 2, "calls": metrics.calls, "last_errors": metrics.errors[-3:],
    }
