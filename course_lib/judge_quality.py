"""How far to trust a judge: its agreement with a verifier, on groups whose verifier rewards differ.

    groups = verifier_groups("gridworld", 24)                  # expert demonstrations + policy rollouts
    judge_agreement("gridworld", LocalJudge(), 24, groups=groups, method="pointwise")

This module sits above `course_lib.judge` (it calls the judges); the judge never imports it.
`course_lib.evaluate` may re-export it beside the policy's own evaluation.
"""

from __future__ import annotations

import math
import random
from typing import Any

from tqdm.auto import tqdm

from course_lib.judge import (
    DEFAULT_RUBRIC,
    METHODS,
    GroupScores,
    JudgeMetrics,
    LocalJudge,
    render_messages,
    score_group,
    score_pointwise,
)
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


def verifier_groups(env_name: str, n_groups: int, *, group_size: int = 4, n_expert: int | None = None, model=None,
                    tokenizer=None, seed: int = 0, split: str = "test", max_new_tokens: int = 96,
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
              max_tokens: int, metrics: JudgeMetrics) -> list[GroupScores]:
    """The judgings of one group. group: twice, in a seeded order, then in that order reversed (two seeds
    could draw the same order); pointwise: once, as it has no order."""
    if method == "pointwise":
        return [score_pointwise(trajectories, rubric, judge, use_cache=False, metrics=metrics)]
    return [score_group(trajectories, rubric, judge, seed=seed, reverse=reverse, max_retries=max_retries,
                        use_cache=False, max_tokens=max_tokens, metrics=metrics)
            for reverse in (False, True)]


def judge_agreement(env_name: str, judge, n_groups: int, *, method: str = "group", group_size: int = 4, model=None,
                    tokenizer=None, seed: int = 0, n_expert: int | None = None, split: str = "test",
                    max_retries: int = 2, rubric: str = DEFAULT_RUBRIC, max_new_tokens: int = 96,
                    judge_max_tokens: int = 512, groups: list[list[Trajectory]] | None = None,
                    progress: bool = False) -> dict[str, Any]:
    """How well a judge agrees with a verifier, on groups that mix expert demonstrations and policy rollouts.

    Each group holds `n_expert` expert trajectories (default half) and the rest base-policy rollouts
    (temperature 1), so rewards vary inside groups (or pass `groups`, e.g. from `verifier_groups`).
    method: "group" (`score_group`: every group judged twice without the cache, in a seeded order,
    then in that order reversed) or "pointwise" (`score_pointwise`: once, there is no order). Returns:

    * pairwise ranking accuracy (pairs with different rewards; judge ties count half) and mean
      within-group Kendall τ-b (scipy's default, which corrects for the ties of a binary verifier),
      from the first judging of each group where it succeeded;
    * position_bias_rate: the share of trajectories whose score moves by more than 0.01 between the two
      orders, over groups where both judgings succeeded and that hold at least two distinct
      trajectories (a group of identical ones has a single order); NaN for pointwise (no order);
    * per group, all its judgings together: failure_rate (share of groups where any judging failed),
      tokens_per_group and seconds_per_group;
    * per judging (one `score_group` or `score_pointwise` call): failed_judgings_rate,
      tokens_per_judging, seconds_per_judging.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
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
                         max_retries=max_retries, max_tokens=judge_max_tokens, metrics=metrics)
        tally.add(trajectories, runs)
    n, judgings = max(1, len(groups)), max(1, metrics.groups)
    return {
        "env": env_name, "judge": name, "method": method, "groups": len(groups), "group_size": group_size,
        "expert_per_group": n_expert, **tally.summary(),
        "failure_rate": tally.failed / n, "tokens_per_group": metrics.tokens / n, "seconds_per_group": metrics.seconds / n,
        "failed_judgings_rate": metrics.failed_groups / judgings, "tokens_per_judging": metrics.tokens / judgings,
        "seconds_per_judging": metrics.seconds / judgings,
        "judgings_per_group": 1 if method == "pointwise" else 2, "judgings": metrics.groups,
        "failed_judgings": metrics.failed_groups, "calls": metrics.calls,
        "last_errors": metrics.errors[-3:],
    }


class _Tally:
    """The agreement counts `judge_agreement` gathers, group by group."""

    def __init__(self):
        self.agree, self.pairs, self.taus, self.moved, self.compared, self.failed = 0.0, 0, [], 0, 0, 0
        self.reward_means: list[float] = []

    def add(self, trajectories: list[Trajectory], runs: list[GroupScores]) -> None:
        from scipy.stats import kendalltau

        rewards = [t.reward for t in trajectories]
        self.reward_means.append(sum(rewards) / len(rewards))
        self.failed += any(run.failed for run in runs)
        if runs[0].failed:
            return
        scores = [s.score for s in runs[0]]
        a, p = pairwise_agreement(scores, rewards)
        self.agree, self.pairs = self.agree + a, self.pairs + p
        if len(set(rewards)) > 1 and len(set(scores)) > 1:
            self.taus.append(float(kendalltau(scores, rewards).statistic))
        distinct = len({render_messages(t.messages) for t in trajectories}) > 1
        if len(runs) > 1 and not runs[1].failed and distinct:
            self.moved += sum(abs(x.score - y.score) > 0.01 for x, y in zip(runs[0], runs[1]))
            self.compared += len(trajectories)

    def summary(self) -> dict[str, Any]:
        return {
            "mean_verifier_reward": sum(self.reward_means) / max(1, len(self.reward_means)),
            "pairwise_accuracy": self.agree / self.pairs if self.pairs else math.nan, "pairs": self.pairs,
            "kendall_tau": sum(self.taus) / len(self.taus) if self.taus else math.nan, "tau_groups": len(self.taus),
            "position_bias_rate": self.moved / self.compared if self.compared else math.nan,
        }
