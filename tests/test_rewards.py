"""The rewards of a step (`course_lib.rewards`): computed and returned beside the rolled-out groups, which
keep their verifier reward; the registries of reward sources, judging methods and turn-reward rules. The
judge here is a stand-in for `course_lib.judge`'s scoring functions (the real judge's steps are in
test_train_judge.py and test_judge.py)."""

from __future__ import annotations

import copy
import math
import types

import pytest
from conftest import make_trajectory

from course_lib import rewards
from course_lib.train.config import RewardConfig
from course_lib.trajectory import TrajectoryGroup


def _groups() -> list[TrajectoryGroup]:
    """g0: a success and a failure; g1: a failure, and an episode cut at the turn limit (unfinished)."""
    cut = make_trajectory(["s", "t"], 0.0, traj_id="g1#1", group_id="g1")
    cut.info["turn_limit"] = True
    return [TrajectoryGroup("a", "g0", [make_trajectory(["s", "t"], 1.0, traj_id="g0#0", group_id="g0"),
                                        make_trajectory([("s", "malformed"), "t"], 0.0, traj_id="g0#1",
                                                        group_id="g0")]),
            TrajectoryGroup("b", "g1", [make_trajectory(["s"], 0.0, traj_id="g1#0", group_id="g1"), cut])]


class FakeJudge:
    """A stand-in for course_lib.judge: every trajectory scores 0.8, except in group `fails` (it fails)."""

    def __init__(self, fails: str | None = None):
        self.fails, self.calls = fails, []

    def module(self, name: str = "scoring"):
        def score_group(trajectories, *, judge, metrics, rubric=None, reference=None):
            self.calls.append(("group", [t.traj_id for t in trajectories], judge, reference))
            failed = trajectories[0].group_id == self.fails
            metrics.groups += 1
            score = math.nan if failed else 0.8
            return [types.SimpleNamespace(score=score, failed=failed) for _ in trajectories]

        def score_pointwise(trajectories, *, judge, metrics, rubric=None):
            self.calls.append(("pointwise", [t.traj_id for t in trajectories], judge, None))
            return [types.SimpleNamespace(score=0.8, failed=False) for _ in trajectories]

        class Metrics:
            groups = 0

            def as_row(self):
                return {"judge_groups": self.groups}

        def judging_method(method):
            if method not in ("group", "pointwise"):
                raise ValueError(f"judge_method must be 'group' or 'pointwise', got {method!r}")
            return types.SimpleNamespace(score_group=score_group if method == "group" else score_pointwise,
                                         takes_reference=method == "group")

        return types.SimpleNamespace(JudgeMetrics=Metrics, judging_method=judging_method)


@pytest.fixture
def judge(monkeypatch):
    fake = FakeJudge()
    monkeypatch.setattr(rewards, "_judge_module", fake.module)
    return fake


def _snapshot(groups) -> list:
    return [(t.reward, t.verifier_reward, t.success, copy.deepcopy(t.info), [s.reward for s in t.steps])
            for g in groups for t in g]


def test_verifier_rewards_are_copies_and_the_groups_are_unchanged():
    groups = _groups()
    before = _snapshot(groups)
    result = rewards.assign(RewardConfig(), groups)
    assert _snapshot(groups) == before
    assert [r.reward for r in result.per_trajectory] == [1.0, 0.0, 0.0, 0.0]
    assert [r.rule for r in result.per_trajectory] == ["verifier"] * 4 and result.judge_failed == []
    assert all(c is not t for g, cg in zip(groups, result.groups) for t, c in zip(g, cg))
    assert result.metrics() == {"reward": 0.25, "verifier_reward": 0.25, "success": 0.25}
    assert result.judge_metrics == {}


def test_a_rewarded_copy_trains_on_its_reward_and_keeps_the_verifiers_success():
    (t, *_), _ = _groups()
    copy_ = rewards.rewarded(t, 0.2)
    assert (copy_.reward, copy_.steps[-1].reward, copy_.verifier_reward) == (0.2, 0.2, 1.0) and copy_.success
    assert (t.reward, t.steps[-1].reward, t.success) == (1.0, 1.0, True)
    assert copy_.steps[0] is t.steps[0]  # only the last step is replaced
    failed = make_trajectory(["s"], 0.0)
    assert not rewards.rewarded(failed, 0.9).success  # a judge's 0.9 is no verifier success


def test_reward_fn_replaces_the_verifier_and_success_stays_the_verifiers():
    groups = _groups()
    result = rewards.assign(RewardConfig(), groups, reward_fn=lambda t: 0.5)
    assert [(r.verifier, r.reward, r.rule) for r in result.per_trajectory][:2] == [(1.0, 0.5, "reward_fn"),
                                                                                  (0.0, 0.5, "reward_fn")]
    assert result.metrics()["success"] == 0.25 and result.metrics()["reward"] == 0.5


@pytest.mark.parametrize("source, w", [("judge", 1.0), ("mix", 0.25)])
def test_judge_and_mix_rewards_side_by_side(judge, source, w):
    groups = _groups()
    before = _snapshot(groups)
    judge.fails = "g1"
    result = rewards.assign(RewardConfig(source=source, mix_weight=0.25, judge_reference=True), groups,
                            judge="backend")
    assert _snapshot(groups) == before
    assert result.judge_failed == ["g1"] and result.judge_metrics == {"judge_groups": 2}
    first, second, *failed = result.per_trajectory
    assert first.reward == pytest.approx(w * 0.8 + (1 - w) * 1.0)
    assert (first.judge, first.verifier) == (0.8, 1.0)
    assert second.reward == pytest.approx(w * 0.8) and first.rule == second.rule == source
    assert [(r.judge, r.reward, r.rule) for r in failed] == [(None, 0.0, "verifier")] * 2
    assert [t.reward for t in result.groups[0]] == [first.reward, second.reward]
    assert judge.calls[0][2:] == ("backend", None)  # the judge passed by keyword; no reference in these tasks


def test_pointwise_judging_never_shows_the_reference(judge):
    groups = _groups()
    groups[0].trajectories[0].info["reference"] = "Paris"
    rewards.assign(RewardConfig(source="judge", judge_method="pointwise", judge_reference=True), groups,
                   judge="backend")
    assert [c[0] for c in judge.calls] == ["pointwise", "pointwise"]
    judge.calls.clear()
    rewards.assign(RewardConfig(source="judge", judge_reference=True), groups, judge="backend")
    assert judge.calls[0][3] == "Paris"


def test_the_unfinished_rule_overrules_every_source(judge):
    for source in ("verifier", "judge"):
        spec = RewardConfig(source=source, unfinished_reward=-0.5)
        result = rewards.assign(spec, _groups(), judge="backend")
        cut = result.per_trajectory[-1]
        assert (cut.reward, cut.rule) == (-0.5, "unfinished")
        assert result.groups[1].trajectories[1].steps[-1].reward == -0.5
        assert result.per_trajectory[0].rule == source


def test_turn_reward_rules():
    (_, malformed), _ = _groups()
    assert rewards.turn_rewards(RewardConfig(), malformed) == ([rewards.PROCESS_PENALTY, 0.0], False)
    custom = rewards.turn_rewards(RewardConfig(), malformed, turn_reward_fn=lambda t: [0.3, 0.4])
    assert custom == ([0.3, 0.4], False)
    with pytest.raises(ValueError, match="the turn reward gave 1 values for 2 turns"):
        rewards.turn_rewards(RewardConfig(), malformed, turn_reward_fn=lambda t: [0.3])
    with pytest.raises(ValueError, match="turn_reward 'proces' is not known; choose one of process, judge"):
        rewards.turn_rewards(RewardConfig(turn_reward="proces"), malformed)


def test_the_registries_check_names_and_the_judge():
    assert rewards.judge_weight(RewardConfig()) == 0.0
    assert rewards.judge_weight(RewardConfig(source="mix")) == 0.5
    assert rewards.uses_judge(RewardConfig(source="mix", turn_reward="judge")) == ["reward='mix'",
                                                                                 "turn_reward='judge'"]
    rewards.check(RewardConfig())
    with pytest.raises(ValueError, match="reward 'jduge' is not known; choose one of verifier, judge, mix"):
        rewards.check(RewardConfig(source="jduge"))
    with pytest.raises(ValueError, match="judge_method must be 'group' or 'pointwise', got 'logprob'"):
        rewards.check(RewardConfig(judge_method="logprob"))
    with pytest.raises(ValueError, match="reward='judge' needs a judge backend"):
        rewards.check(RewardConfig(source="judge"))
    rewards.check(RewardConfig(source="judge"), judge=object())
    from course_lib.judge.methods import JUDGING_METHODS

    for method in JUDGING_METHODS.values():
        assert callable(method.score_group) and callable(method.score_turns)
