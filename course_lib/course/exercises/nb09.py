"""The exercise checks of notebook 09, LLM-as-a-judge reward (`notebooks/09_llm_judge.ipynb`):
check_pairwise_accuracy, check_position_bias_rate, check_group_rewards.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_pairwise_accuracy(fn: Any) -> Any:
    """Notebook 09: `fn(scores, rewards) -> float`, the share of the pairs with different verifier rewards
    that the judge's scores order the same way (a judge tie counts half; nan when there is no such pair)."""
    return graded(fn, "my_pairwise_accuracy",
                  "over pairs with different rewards, count the judge's agreements (a tie counts half).",
                  _grade_pairwise_accuracy)


# (scores, rewards): each case shows one typical mistake and hides the others
_PAIRWISE_CASES = [
    ([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0]),  # a perfect judge: 4 pairs, 4 agreements
    ([0.9, 0.3, 0.4, 0.1], [1, 1, 0, 0]),  # one swap: 3 of 4
    ([0.9, 0.9, 0.9, 0.1], [1, 1, 0, 0]),  # two ties among the 4 pairs: 3 of 4
    ([0.2, 0.6, 0.9], [0.0, 1.0, 0.5]),  # partial credit: 2 of 3 pairs in the verifier's order
    ([0.3, 0.9], [1, 1]),  # nothing to compare: nan
]


def _grade_pairwise_accuracy(fn) -> str:
    import math

    from course_lib.judge.quality import pairwise_agreement

    for scores, rewards in _PAIRWISE_CASES:
        agree, pairs = pairwise_agreement(scores, rewards)
        expected = agree / pairs if pairs else math.nan
        try:
            got = float(fn(list(scores), list(rewards)))
        except ZeroDivisionError:
            raise ExerciseFailed(f"for rewards {rewards}, all equal, your function divided by zero: no pair "
                                 "has different rewards, so there is nothing to measure; return "
                                 "float('nan')") from None
        if math.isnan(expected) and math.isnan(got) or abs(got - expected) <= 1e-9:
            continue
        said = f"for scores {scores} and rewards {rewards} you gave {got:.4g}, expected {expected:.4g}. "
        raise ExerciseFailed(said + _pairwise_hint(scores, rewards, got, expected))
    return ("0.5 is a coin flip, and also what a judge that scores everything equal gets; only the pairs the "
            "verifier separates count.")


def _pairwise_hint(scores: list[float], rewards: list[float], got: float, expected: float) -> str:
    """What the mistake behind a wrong accuracy most likely is, from the case it failed on."""
    import math

    if math.isnan(expected):
        return ("every reward is equal: no pair has different rewards, so there is nothing to measure; "
                "return float('nan'), not a number that looks like a verdict")
    n = len(scores)
    all_pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    separated = [(a, b) for a, b in all_pairs if rewards[a] != rewards[b]]
    ties = sum(scores[a] == scores[b] for a, b in separated)
    agree = sum((scores[a] - scores[b]) * (rewards[a] - rewards[b]) > 0 for a, b in separated)
    if ties and abs(got - agree / len(separated)) < 1e-9:
        return "a judge tie on a pair the verifier separates counts as 0.5, not 0: count a judge tie as 0.5"
    if ties and abs(got - (agree + ties) / len(separated)) < 1e-9:
        return "a judge tie counts as 0.5, not as an agreement (use > 0, and a separate case for ==)"
    if abs(got - (1 - expected)) < 1e-9:
        return ("your agreements are the disagreements: a pair agrees when (s_a − s_b)·(R_a − R_b) > 0, the "
                "judge ordering it the way the verifier does")
    return ("count only the pairs whose rewards differ, by any amount (0.5 against 1.0 is such a pair; two "
            "equal rewards are not); a pair agrees when (s_a − s_b)·(R_a − R_b) > 0, a judge tie is 0.5, and "
            "the accuracy is the agreements over the number of those pairs")


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
    """Notebook 09: `fn(readings, ids, min_mass=0.5) -> list[float] | None`, the rewards of a group from the
    judge's forced reads: per reading (one order) and id, score = Σ_d d·P(d) / (9·Σ_d P(d)); each id's scores
    averaged over the readings; one reward per trajectory in input order, by its id; None when any read put
    less than min_mass on the digits."""
    return graded(fn, "my_group_rewards",
                  "per reading and id, the expected digit over the renormalised digit probabilities, divided "
                  "by 9; average each id over the readings; hand each trajectory its id's score; None when a "
                  "read has less than min_mass on the digits.",
                  _grade_group_rewards)


def _probs(mass: float, weights: list[float]) -> list[float]:
    """Ten digit probabilities summing to `mass`, shaped by `weights` (digit d gets weights[d])."""
    return [mass * w / sum(weights) for w in weights]


# A group of four trajectories, two of them identical (they share the id "t1"), read in two orders. The
# judge puts 0.8 or 0.9 of its probability on the digits, the rest on other tokens; t2's most likely digit
# is not its expected digit; t3 moves with the order.
_IDS = ["t1", "t2", "t1", "t3"]
_READINGS = [
    {"t2": _probs(0.8, [0, 0, 0, 0, 0, 0, 4, 1, 3, 2]), "t3": _probs(0.9, [0, 1, 6, 2, 1, 0, 0, 0, 0, 0]),
     "t1": _probs(0.9, [0, 0, 0, 0, 0, 1, 1, 2, 4, 2])},
    {"t1": _probs(0.8, [0, 0, 0, 0, 0, 0, 1, 2, 4, 3]), "t3": _probs(0.9, [0, 0, 1, 2, 4, 2, 1, 0, 0, 0]),
     "t2": _probs(0.8, [0, 0, 0, 0, 0, 0, 4, 1, 3, 2])},
]
# the same group, where one read of t3 puts only 0.3 on the digits: the judge was not answering with a score
_FAILED = [_READINGS[0], {**_READINGS[1], "t3": _probs(0.3, [0, 0, 1, 2, 4, 2, 1, 0, 0, 0])}]


def _score(probs: list[float], *, divisor: float = 9.0, renormalise: bool = True, top: bool = False) -> float:
    """One read's score, or a typical mistake of it (the most likely digit; no renormalising; / 10)."""
    if top:
        return max(range(10), key=probs.__getitem__) / divisor
    mass = sum(probs) if renormalise else 1.0
    return sum(d * p for d, p in enumerate(probs)) / mass / divisor


def _rewards(readings, ids, **mistake) -> list[float]:
    """Each id's score averaged over `readings`, handed to the trajectories by id."""
    by_id = {i: sum(_score(r[i], **mistake) for r in readings) / len(readings) for i in readings[0]}
    return [by_id[i] for i in ids]


def _rewards_of_mean_probs() -> list[float]:
    """The mistake of averaging the readings' probabilities before reading a score."""
    mean = {i: [sum(r[i][d] for r in _READINGS) / len(_READINGS) for d in range(10)] for i in _READINGS[0]}
    return [_score(mean[i]) for i in _IDS]


def _grade_group_rewards(fn) -> str:
    import math

    from course_lib.judge.answers import expected_digit

    # the library's read of each id in each order (`expected_digit`), averaged over the orders as
    # score_group(two_orders=True) does
    scores = [{i: expected_digit(p, 0.5)[0] for i, p in r.items()} for r in _READINGS]
    expected = [sum(s[i] for s in scores) / len(scores) for i in _IDS]
    got = fn([dict(r) for r in _READINGS], list(_IDS), 0.5)
    if got is None:
        raise ExerciseFailed("you returned None for a group whose reads all put at least 0.8 of their "
                             "probability on the digits: only a read below min_mass fails the group")
    got = [float(x) for x in got]
    if len(got) != len(_IDS):
        raise ExerciseFailed(f"got {len(got)} rewards for ids {_IDS}: one reward per trajectory, in input "
                             "order, not one per id. Two identical trajectories share the id t1, and each "
                             "gets its score: look every trajectory's score up by its id")
    if not all(abs(g - e) < 1e-6 for g, e in zip(got, expected)):
        said = f"for ids {_IDS} read in two orders you gave {_rounded(got)}, expected {_rounded(expected)}. "
        raise ExerciseFailed(said + _rewards_hint(got))
    for readings, min_mass, why in (
            (_FAILED, 0.5, "one read of t3 puts only 0.3 of its probability on the digits"),
            (_READINGS, 0.95, "with min_mass=0.95 every read of this group (0.8 or 0.9 on the digits) "
                              "is short")):
        failed = fn([dict(r) for r in readings], list(_IDS), min_mass)
        if failed is None:
            continue
        values = [float(x) for x in failed]
        if all(v == 0 for v in values) or any(math.isnan(v) for v in values):
            raise ExerciseFailed(f"{why}, and you returned {'zeros' if values[0] == 0 else 'NaN'}: the "
                                 "group failed, so return None and the trainer skips it. Zeros would punish "
                                 "trajectories nobody judged, NaN would poison the loss")
        raise ExerciseFailed(f"{why}, and you returned scores {_rounded(values)}: a read with less than "
                             "min_mass on the digits is not a score (the judge would mostly write something "
                             "else there). Compare each read's Σ_d P(d) with the min_mass you are given, and "
                             "return None for the group")
    return ("the digits' expected value, renormalised and averaged over both orders, reaches each trajectory "
            "by its id; a read that is not an answer skips the group instead of scoring it 0.")


def _rewards_hint(got: list[float]) -> str:
    """What the mistake behind wrong rewards most likely is."""
    def near(values):
        return all(abs(g - v) < 1e-6 for g, v in zip(got, values))

    if near(_rewards(_READINGS, _IDS, top=True)):
        return ("you took the most likely digit: the score is the expected digit Σ_d d·P(d), which keeps how "
                "sure the judge was")
    if near(_rewards(_READINGS, _IDS, renormalise=False)):
        return ("divide by the digits' mass m = Σ_d P(d): the rest of the probability went to other tokens, "
                "and without renormalising the score shrinks with it")
    if near(_rewards(_READINGS, _IDS, divisor=10.0)):
        return "the digits run from 0 to 9: divide the expected digit by 9, so that a sure 9 scores 1.0"
    if near(_rewards_of_mean_probs()):
        return ("you averaged the two readings' probabilities, then read one score: score each reading on "
                "its own (each renormalised by its own mass), then average the scores")
    if near(_rewards(_READINGS[:1], _IDS)):
        return "you used the first reading only: average each id's score over every reading (both orders)"
    return ("per reading and id: score = Σ_d d·P(d) / (9·Σ_d P(d)); average each id over the readings; then "
            "each trajectory gets the score of its id")


def _rounded(values) -> list[float]:
    return [round(float(v), 3) + 0.0 for v in values]
