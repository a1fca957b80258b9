"""Reading a judge's answers: the JSON list a judge writes, and the score digits' probabilities it gives
at a forced position. Each either returns scores or raises `JudgeAnswerError` with a message the judge
(or its caller) can act on.

Layering: ``errors`` <- ``answers`` <- ``scoring`` (modules of `course_lib.judge`); nothing here imports
another judge module.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from course_lib.judge.errors import JudgeAnswerError

# Scores may overshoot [0, 1] by float noise only; anything larger is an error the judge must fix.
SCORE_TOLERANCE = 1e-6
# A forced read whose score digits get less probability than this fails the group (the judge would write
# something else there, so its digits are not an answer).
MIN_DIGIT_MASS = 0.5


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
        raise JudgeAnswerError(f"no score for {key} {', '.join(missing)}; "
                               f"score every one of: {', '.join(expected)}")
    return found


def expected_digit(digit_probs: list[float], min_mass: float = MIN_DIGIT_MASS) -> tuple[float, str]:
    """(score, explanation) from the probabilities of the digits 0..9 at a forced position.

    score = Σ_d d·P(d) / (9·m) with m = Σ_d P(d): the expected digit, renormalised over the digits and put
    on [0, 1]. Raises JudgeAnswerError when m < `min_mass`: the judge would mostly write something else
    there, so its digits are not its answer.
    """
    mass = sum(digit_probs)
    if not (mass >= min_mass and mass > 0):  # NaN (a model overflowing in fp16) fails too
        raise JudgeAnswerError(f"only {mass:.2f} of the probability is on the score digits "
                               f"(min_mass={min_mass})")
    top = max(range(len(digit_probs)), key=digit_probs.__getitem__)
    digit = sum(d * p for d, p in enumerate(digit_probs)) / mass
    return digit / (len(digit_probs) - 1), f"E[digit] = {digit:.2f}, top {top}, P(digits) = {mass:.2f}"
