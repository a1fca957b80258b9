"""How far to trust a judge: its agreement with a verifier, on groups whose verifier rewards differ.

    groups = verifier_groups("gridworld", 24)                  # expert demonstrations + policy rollouts
    judge_agreement("gridworld", LocalJudge(), 24, groups=groups, method="pointwise")

This module sits above `course_lib.judge.scoring` (it calls the judges); the judge never imports it.
`course_lib.evaluate` may re-export it beside the policy's own evaluation.
"""

from __future__ import annotations

import math
import random
from typing import Any

from tqdm.auto import tqdm

from course_lib import wilson_interval
from course_lib.judge.backends import LocalJudge
from course_lib.judge.methods import judging_method
from course_lib.judge.prompts import DEFAULT_RUBRIC, render_messages
from course_lib.judge.scoring import GroupScores, JudgeMetrics, score_group
from course_lib.trajectory import Trajectory


def pairwise_agreement(scores: list[float], rewards: list[float]) -> tuple[float, int]:
    """(judge agreements, pairs) over the pairs with different verifier rewards; a judge tie counts half.

    A pair (a, b) agrees when (s_a − s_b)(R_a − R_b) > 0; accuracy = agreements / pairs, so a judge that
    gives everyone the same score gets exactly 0.5.
    """
    agree, pairs = 0.0, 0
    for a in range(len(scores)):
        for b in range(a + 1, len(scores)):
            if rewards[a] == rewards[b]:
                continue
            pairs += 1
            d = (scores[a] - scores[b]) * (rewards[a] - rewards[b])
            agree += 1.0 if d > 0 else 0.5 if d == 0 else 0.0
    return agree, pairs


def verifier_groups(env_name: str, n_groups: int, *, group_size: int = 4, n_expert: int | None = None,
                    model=None, tokenizer=None, seed: int = 0, split: str = "test", max_new_tokens: int = 96,
                    progress: bool = False, judge=None) -> list[list[Trajectory]]:
    """Groups with verifier rewards that vary: `n_expert` expert demonstrations (default half) plus
    base-policy rollouts (temperature 1) of the same task. Reusable across judges.

    Without `model` and `tokenizer`, a `LocalJudge`'s model rolls out (`judge`), else the embedded one.
    """
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


def _judgings(trajectories: list[Trajectory], judge, method: str, *, seed: int, rubric: str, max_retries: int,
              max_tokens: int, metrics: JudgeMetrics, references: bool = True) -> list[GroupScores]:
    """The judgings of one group. group: twice, in a seeded order, then in that order reversed (two seeds
    could draw the same order), reference-guided when `references` and the group's trajectories carry one
    (``info["reference"]``); pointwise: once, as it has no order."""
    if not judging_method(method).reads_an_order:  # pointwise: one judging
        return [judging_method(method).score_group(trajectories, rubric, judge=judge, use_cache=False,
                                                   metrics=metrics)]
    reference = trajectories[0].info.get("reference") if references else None
    return [score_group(trajectories, rubric, judge=judge, seed=seed, reverse=reverse,
                        max_retries=max_retries, reference=reference, use_cache=False, max_tokens=max_tokens,
                        metrics=metrics)
            for reverse in (False, True)]


def judge_agreement(env_name: str, judge, n_groups: int, *, method: str = "group", group_size: int = 4,
                    model=None, tokenizer=None, seed: int = 0, n_expert: int | None = None,
                    split: str = "test", max_retries: int = 2, rubric: str = DEFAULT_RUBRIC,
                    max_new_tokens: int = 96, judge_max_tokens: int = 512,
                    groups: list[list[Trajectory]] | None = None, references: bool = True,
                    progress: bool = False) -> dict[str, Any]:
    """How well a judge agrees with a verifier, on groups that mix expert demonstrations and policy rollouts.

    Each group holds `n_expert` expert trajectories (default half) and the rest base-policy rollouts
    (temperature 1), so rewards vary inside groups (or pass `groups`, e.g. from `verifier_groups`).
    method: "group" (`score_group`: every group judged twice without the cache, in a seeded order,
    then in that order reversed) or "pointwise" (`score_pointwise`: once, there is no order).
    references: group judgings are reference-guided where the trajectories carry the task's answer
    (``info["reference"]``, set by `rollout` and `expert_rollout`); False hides it. Returns:

    * pairwise ranking accuracy (pairs with different rewards; judge ties count half) and mean
      within-group Kendall τ-b (scipy's default), from the first judging of each group where it
      succeeded. τ-b = (C − D) / sqrt((n0 − n_s)(n0 − n_R)), n0 = n(n−1)/2 pairs, n_s and n_R the pairs
      tied in the scores and in the rewards. A binary verifier ties most pairs, so even a perfect judge
      stays below 1: one success among four trajectories gives at most 3 / sqrt(6 · 3) = 0.71, two
      among four 4 / sqrt(6 · 4) = 0.82. Pairwise accuracy has no such ceiling: read it first;
    * policy_pairwise_accuracy (and policy_pairs): the same over the pairs of two policy rollouts alone
      (trajectories with ``info["source"] == "policy"``, as `judge_warm_start.labelled_groups` marks
      them): without the expert, whose demonstration is easy to tell from a failure; NaN when no group
      has two policy rollouts with different rewards;
    * position_bias_rate: the share of trajectories whose score moves by more than 0.01 between the two
      orders, over groups where both judgings succeeded and that hold at least two distinct
      trajectories (a group of identical ones has a single order); NaN for pointwise (no order).
      position_shift: the mean |score change| between the two orders over the same trajectories (a
      judge reading digit probabilities almost always moves by 0.01; how far is the question);
    * a 95% interval for each (``<name>_ci``): pairwise accuracies, τ-b, position bias and shift by a
      percentile bootstrap over groups (2000 resamples, seeded), the failure rate by Wilson's interval;
    * per group, all its judgings together: failure_rate (share of groups where any judging failed),
      tokens_per_group and seconds_per_group;
    * per judging (one `score_group` or `score_pointwise` call): failed_judgings_rate,
      tokens_per_judging, seconds_per_judging.
    """
    judging_method(method)  # an unknown method fails here, before any rollout
    n_expert = group_size // 2 if n_expert is None else n_expert
    if groups is None:
        groups = verifier_groups(env_name, n_groups, group_size=group_size, n_expert=n_expert, model=model,
                                 tokenizer=tokenizer, seed=seed, split=split, max_new_tokens=max_new_tokens,
                                 progress=progress, judge=judge)
    metrics, tally = JudgeMetrics(), _Tally()
    name = getattr(judge, "name", type(judge).__name__)
    for k, trajectories in enumerate(tqdm(groups, desc=f"judging ({name}, {method})", disable=not progress,
                                          leave=False)):
        runs = _judgings(trajectories, judge, method, seed=seed * 1000 + k * 2, rubric=rubric,
                         max_retries=max_retries, max_tokens=judge_max_tokens, metrics=metrics,
                         references=references)
        tally.add(trajectories, runs)
    n, judgings = max(1, len(groups)), max(1, metrics.groups)
    return {
        "env": env_name, "judge": name, "method": method, "groups": len(groups), "group_size": group_size,
        "expert_per_group": n_expert, **tally.summary(),
        "failure_rate": tally.failed / n, "tokens_per_group": metrics.tokens / n,
        "seconds_per_group": metrics.seconds / n,
        "failed_judgings_rate": metrics.failed_groups / judgings,
        "tokens_per_judging": metrics.tokens / judgings,
        "seconds_per_judging": metrics.seconds / judgings,
        "judgings_per_group": 2 if judging_method(method).reads_an_order else 1, "judgings": metrics.groups,
        "failed_judgings": metrics.failed_groups, "calls": metrics.calls,
        "last_errors": metrics.errors[-3:],
    }


class _Tally:
    """The agreement counts `judge_agreement` gathers, one record per group, so that every rate gets a
    95% interval by resampling groups (a group's pairs are not independent of each other)."""

    def __init__(self):
        self.groups: list[dict[str, Any]] = []

    def add(self, trajectories: list[Trajectory], runs: list[GroupScores]) -> None:
        from scipy.stats import kendalltau

        rewards = [t.reward for t in trajectories]
        row: dict[str, Any] = {"reward_mean": sum(rewards) / len(rewards),
                               "failed": any(run.failed for run in runs), "agree": 0.0, "pairs": 0,
                               "policy_agree": 0.0, "policy_pairs": 0, "tau": None,
                               "moved": 0, "compared": 0, "shift": 0.0}
        self.groups.append(row)
        if runs[0].failed:
            return
        scores = [s.score for s in runs[0]]
        row["agree"], row["pairs"] = pairwise_agreement(scores, rewards)
        policy = [k for k, t in enumerate(trajectories) if t.info.get("source") == "policy"]
        row["policy_agree"], row["policy_pairs"] = pairwise_agreement([scores[k] for k in policy],
                                                                      [rewards[k] for k in policy])
        if len(set(rewards)) > 1 and len(set(scores)) > 1:
            row["tau"] = float(kendalltau(scores, rewards).statistic)
        distinct = len({render_messages(t.messages) for t in trajectories}) > 1
        if len(runs) > 1 and not runs[1].failed and distinct:
            row["moved"] = sum(abs(x.score - y.score) > 0.01 for x, y in zip(runs[0], runs[1]))
            row["shift"] = sum(abs(x.score - y.score) for x, y in zip(runs[0], runs[1]))
            row["compared"] = len(trajectories)

    @property
    def failed(self) -> int:
        return sum(g["failed"] for g in self.groups)

    def summary(self, n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
        g = self.groups
        taus = [x["tau"] for x in g if x["tau"] is not None]
        agree, pairs = [x["agree"] for x in g], [x["pairs"] for x in g]
        policy_agree, policy_pairs = [x["policy_agree"] for x in g], [x["policy_pairs"] for x in g]
        moved, shift, compared = [x["moved"] for x in g], [x["shift"] for x in g], [x["compared"] for x in g]
        return {
            "mean_verifier_reward": sum(x["reward_mean"] for x in g) / max(1, len(g)),
            "pairwise_accuracy": _ratio(agree, pairs), "pairs": sum(pairs),
            "pairwise_accuracy_ci": bootstrap_interval(agree, pairs, n_boot=n_boot, seed=seed),
            "policy_pairwise_accuracy": _ratio(policy_agree, policy_pairs), "policy_pairs": sum(policy_pairs),
            "policy_pairwise_accuracy_ci": bootstrap_interval(policy_agree, policy_pairs, n_boot=n_boot,
                                                              seed=seed),
            "kendall_tau": sum(taus) / len(taus) if taus else math.nan, "tau_groups": len(taus),
            "kendall_tau_ci": bootstrap_interval(taus, [1] * len(taus), n_boot=n_boot, seed=seed),
            "position_bias_rate": _ratio(moved, compared),
            "position_bias_rate_ci": bootstrap_interval(moved, compared, n_boot=n_boot, seed=seed),
            "position_shift": _ratio(shift, compared),
            "position_shift_ci": bootstrap_interval(shift, compared, n_boot=n_boot, seed=seed),
            "failure_rate_ci": wilson_interval(self.failed, len(g)),
        }


def _ratio(numerators: list[float], denominators: list[float]) -> float:
    return sum(numerators) / sum(denominators) if sum(denominators) else math.nan


def bootstrap_interval(numerators: list[float], denominators: list[float], *, n_boot: int = 2000,
                       seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of Σ numerators / Σ denominators, resampling groups (index i holds
    group i's two sums) with replacement `n_boot` times. For a mean over groups pass denominators of 1.
    (nan, nan) when no group has a denominator; resamples whose denominators sum to 0 are left out."""
    import numpy as np

    num, den = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    if len(den) == 0 or den.sum() == 0:
        return math.nan, math.nan
    picks = np.random.default_rng(seed).integers(0, len(den), size=(n_boot, len(den)))
    sums = den[picks].sum(1)
    ratios = num[picks].sum(1)[sums > 0] / sums[sums > 0]
    tail = (1 - level) / 2 * 100
    return float(np.percentile(ratios, tail)), float(np.percentile(ratios, 100 - tail))
