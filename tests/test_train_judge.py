"""The trainer with a judge: a failed per-turn judging skips only its group, and a judge reward without a
judge backend is refused before anything loads. The judges are real backends whose answers the test writes."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from conftest import TEST_DEVICE

from course_lib.checkpoint import read_metrics
from course_lib.envs import load_tasks
from course_lib.rewards import assign
from course_lib.rollout import expert_rollout
from course_lib.train.batch import make_batch
from course_lib.train.config import Hooks, TrainConfig, check
from course_lib.train.critic import turn_values
from course_lib.train.loop import Run, rl_step, train
from course_lib.trajectory import TrajectoryGroup
from course_lib.value_head import ValueHead


class FailsOneTrajectory:
    """A turn judge that answers in JSON, except for the first trajectory it is shown: that one gets
    garbage on every try, so its judging fails (NaN scores, `failed=True`)."""

    name = "fails-one-trajectory"

    def __init__(self):
        self.first = None

    def complete(self, messages, *, max_tokens=512, temperature=0.0):
        trajectory = messages[1]["content"]  # re-asks append messages: this one stays the trajectory
        self.first = self.first or trajectory
        if trajectory == self.first:
            return "Every turn looks fine to me."
        turns = len(re.findall(r'<turn number="', trajectory))
        return json.dumps([{"turn": k, "explanation": "ok", "score": 0.5} for k in range(1, turns + 1)])


def _two_groups(tokenizer):
    """Expert episodes of four lookup tasks in two groups of two: g0 (judged first) and g1."""
    trajs = expert_rollout(tokenizer, "lookup", load_tasks("lookup", "train")[:4])
    for i, t in enumerate(trajs):
        t.group_id, t.traj_id = f"g{i // 2}", f"t{i}"
    return trajs


def _finite(advantages) -> list[bool]:
    return [bool(torch.isfinite(a).all()) for a in advantages]


def test_a_failed_turn_judging_does_not_reach_the_other_groups_advantages(policy):
    """Turn judging happens once, before any advantage: the group with the failed judging is left out and
    named, and the other group's advantages are finite."""
    model, tokenizer = policy
    trajs = _two_groups(tokenizer)
    trajs[3].reward = trajs[3].steps[-1].reward = 0.0  # mixed rewards in g1: a signal to train on
    groups = [TrajectoryGroup("lookup", g, [t for t in trajs if t.group_id == g]) for g in ("g0", "g1")]
    config = TrainConfig(credit="turn", reward=dict(turn_reward="judge"))
    batch = make_batch(groups, [], config, Hooks(judge=FailsOneTrajectory()))
    assert batch.skipped["turn_judge_failed"] == ["g0"]
    assert ([t.traj_id for t in batch.trajectories] == ["t2", "t3"]
            and _finite(batch.advantages) == [True, True])

    # The critic whitens over the whole batch: the failed group's NaN must not spread through it.
    value_head = ValueHead(model.config.hidden_size).to(TEST_DEVICE)

    def values_of(ts):
        return turn_values(model, value_head, ts, token_budget=2048, device=torch.device(TEST_DEVICE),
                           autocast_dtype=None)

    batch = make_batch(groups, [], TrainConfig(credit="critic", reward=dict(turn_reward="judge"),
                                   credit_options={"whiten": True}),
                       Hooks(judge=FailsOneTrajectory()), values_of=values_of)
    assert batch.skipped["turn_judge_failed"] == ["g0"] and len(batch.trajectories) == 2
    assert _finite(batch.advantages) == [True, True] and _finite(batch.returns) == [True, True]


@pytest.mark.parametrize("credit", ["turn", "critic"])
def test_a_failed_turn_judging_skips_and_counts_its_group_and_the_others_train(tmp_path, credit):
    """One RL step, two groups; the judge fails on one trajectory of the first group: that group is skipped
    and counted, the update on the other group happens and is finite (before: a NaN loss, no update)."""
    config = TrainConfig(env="lookup", run_dir=str(tmp_path / "run"), steps=1, tasks_per_step=2, group_size=2,
                         rollout=dict(max_turns=1, max_new_tokens=8), eval_every=0, eval_tasks=0,
                         checkpoint_every=0, progress=False, credit=credit, reward=dict(turn_reward="judge"))
    train(config, judge=FailsOneTrajectory(),
          reward_fn=lambda t: 1.0 if t.traj_id.endswith("#0") else 0.0)  # signal in every group
    (row,) = [r for r in read_metrics(config.run_dir) if r["kind"] == "train"]
    assert row["judge_failed_groups"] == 1 and row["skipped_groups"] == 1
    assert not row.get("skipped_update") and row["nonfinite"] is False and math.isfinite(row["loss"])
    assert math.isfinite(row["advantage_mean"])


@pytest.mark.parametrize("credit, reward, name", [
    ("outcome", {"source": "judge"}, "reward='judge'"),
    ("outcome", {"source": "mix"}, "reward='mix'"),
    ("turn", {"turn_reward": "judge"}, "turn_reward='judge'"),
])
def test_a_judge_reward_without_a_judge_is_refused_before_the_model_loads(credit, reward, name, monkeypatch):
    import course_lib.train.loop as train_module

    monkeypatch.setattr(train_module, "load_policy", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ValueError, match=re.escape(f"{name} needs a judge backend")) as error:
        train(TrainConfig(credit=credit, reward=reward, progress=False))
    assert "LocalJudge() with judge_method='pointwise'" in str(error.value)
    check(TrainConfig(credit=credit, reward=reward), judge=FailsOneTrajectory())  # with a judge: fine
    with pytest.raises(ValueError, match="judge_method must be 'group' or 'pointwise'"):
        wrong = TrainConfig(credit=credit, reward={**reward, "judge_method": "logprob"})
        check(wrong, judge=FailsOneTrajectory())


def test_the_command_line_has_no_judge_option_and_says_how_to_get_one(capsys, monkeypatch):
    """A judge is a Python object: `--judge local` used to reach the trainer as a string and crash there."""
    import course_lib.__main__ as cli

    monkeypatch.setattr(cli, "load_policy", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.setattr(cli, "train", lambda *a, **k: pytest.fail("training started"))
    for argv, message in ((["train", "--judge", "local"], "unrecognized arguments: --judge local"),
                          (["train", "--reward", "judge"], "reward='judge' needs a judge backend")):
        with pytest.raises(SystemExit) as stop:
            cli.main(argv)
        assert stop.value.code == 2 and message in capsys.readouterr().err


class RecordsPrompts:
    """A group judge that keeps every prompt it is shown and scores every id 5 (forced reads)."""

    name = "records-prompts"

    def __init__(self):
        self.prompts: list[str] = []

    def forced_scores(self, messages, header, lines):
        from course_lib.judge.backends import ForcedScores

        self.prompts.append(messages[1]["content"])
        return ForcedScores([[1.0 if d == 5 else 0.0 for d in range(10)] for _ in lines], 10)


@pytest.mark.parametrize("judge_reference", [False, True])
def test_the_trainer_shows_the_task_reference_to_the_group_judge_only_when_asked(tokenizer, judge_reference,
                                                                                 tmp_path, monkeypatch):
    """expert_rollout (as rollout) keeps each task's answer in info["reference"], never in the messages;
    reward="judge" with judge_reference=True passes it to the group judge, which shows it after the context.
    The judge's disk cache is a fresh folder: an answer cached by an earlier run would skip the call."""
    import course_lib.judge.scoring

    monkeypatch.setattr(course_lib.judge.scoring, "_default_cache_dir", lambda: tmp_path)

    tasks = load_tasks("search_qa", "train")[:2]
    trajs = expert_rollout(tokenizer, "search_qa", tasks)
    assert [t.info["reference"] for t in trajs] == [t["answer"] for t in tasks]
    assert all(t["answer"] not in m["content"] for t, tr in zip(tasks, trajs) for m in tr.messages[:2])
    wrong = [dict(m) for m in trajs[0].messages]
    wrong[-1] = {"role": "assistant", "content": "<answer>Nowhere</answer>"}
    other = type(trajs[0])(trajs[0].task_id, "g0", "g0#1", wrong, [], reward=0.0, info=dict(trajs[0].info))
    trajs[0].group_id = "g0"
    judge = RecordsPrompts()
    config = TrainConfig(env="search_qa", reward=dict(source="judge", judge_reference=judge_reference))
    rewards = assign(config.reward, [TrajectoryGroup(trajs[0].task_id, "g0", [trajs[0], other])], judge=judge)
    assert rewards.judge_failed == [] and len(judge.prompts) == 1
    assert (f"(a correct final answer): {tasks[0]['answer']}" in judge.prompts[0]) is judge_reference
    assert [t.reward for t in rewards.groups[0]] == [pytest.approx(5 / 9)] * 2
    assert (trajs[0].reward, other.reward) == (1.0, 0.0)  # the rolled-out trajectories keep the verifier's


@pytest.mark.parametrize("reward", ["judge", "verifier"])
def test_unfinished_reward_overrules_the_judge_for_episodes_cut_at_the_turn_limit(tokenizer, reward, tmp_path,
                                                                                 monkeypatch):
    """The hard rule outside the judge (notebook 09): an episode the environment cut at its turn limit gets
    `unfinished_reward` whatever the judge (or verifier) gave it; a finished episode keeps its score. Without
    the rule the judge's score stands. The cut episode is the expert's, stopped after its first search."""
    import course_lib.judge.scoring

    monkeypatch.setattr(course_lib.judge.scoring, "_default_cache_dir", lambda: tmp_path)
    task = load_tasks("search_qa", "train")[:1]
    finished = expert_rollout(tokenizer, "search_qa", task)[0]
    cut = expert_rollout(tokenizer, "search_qa", task, max_turns=1)[0]
    assert cut.unfinished and cut.num_turns == 1 and not finished.unfinished and finished.success
    cut.traj_id = "cut"
    for rule in (None, -0.25):
        group = TrajectoryGroup(finished.task_id, "g0", [finished, cut])
        config = TrainConfig(env="search_qa", reward=dict(source=reward, unfinished_reward=rule))
        rewards = assign(config.reward, [group], judge=RecordsPrompts())
        expected = (5 / 9, 5 / 9) if reward == "judge" else (1.0, 0.0)
        rewarded_finished, rewarded_cut = rewards.groups[0]
        assert rewards.judge_failed == [] and rewarded_finished.reward == pytest.approx(expected[0])
        assert rewarded_cut.reward == pytest.approx(expected[1] if rule is None else rule)
        assert rewarded_cut.steps[-1].reward == rewarded_cut.reward
        assert [r.rule for r in rewards.per_trajectory] == [reward, reward if rule is None else "unfinished"]
        assert (finished.reward, cut.reward) == (1.0, 0.0)  # the rolled-out trajectories are unchanged


def test_a_judged_step_changes_no_field_of_the_rolled_out_trajectories(tmp_path, monkeypatch):
    """A step rewarded by a mix of judge and verifier, with the unfinished rule: every rolled-out trajectory
    keeps its reward, step rewards, info and success; the batch trains on rewarded copies; the metrics row
    has the training reward beside the verifier's success and reward."""
    import copy

    import course_lib.judge.scoring
    import course_lib.rewards
    import course_lib.train.loop as loop
    from course_lib.models import load_policy

    monkeypatch.setattr(course_lib.judge.scoring, "_default_cache_dir", lambda: tmp_path / "judge-cache")
    rolled_out, snapshots, assigned = [], [], []
    rollout, assign_rewards = loop.rollout, course_lib.rewards.assign

    def recorded_rollout(*args, **kwargs):
        groups = rollout(*args, **kwargs)
        rolled_out.extend(t for g in groups for t in g)
        snapshots.extend((t.reward, t.success, [s.reward for s in t.steps], copy.deepcopy(t.info))
                         for g in groups for t in g)
        return groups

    def recorded_assign(*args, **kwargs):
        assigned.append(assign_rewards(*args, **kwargs))
        return assigned[-1]

    monkeypatch.setattr(loop, "rollout", recorded_rollout)
    monkeypatch.setattr(course_lib.rewards, "assign", recorded_assign)
    model, tok = load_policy("smollm2-135m", device=TEST_DEVICE)  # its own copy: the step updates it
    config = TrainConfig(env="lookup", run_dir=str(tmp_path / "run"), tasks_per_step=2, group_size=2,
                         progress=False, rollout=dict(max_turns=1, max_new_tokens=6),
                         reward=dict(source="mix", mix_weight=0.5, unfinished_reward=-1.0))
    run = Run(config, model, tok, model.device, None, None, torch.optim.AdamW(model.parameters(), lr=1e-5))
    batch = rl_step(run, 1, load_tasks("lookup", "train"), hooks=Hooks(judge=RecordsPrompts()))
    assert len(rolled_out) == 4
    assert [(t.reward, t.success, [s.reward for s in t.steps], t.info) for t in rolled_out] == snapshots
    assert all(t.reward == t.verifier_reward for t in rolled_out)
    assert not {id(t) for t in batch.trajectories} & {id(t) for t in rolled_out}  # trained on copies
    (rewards,) = assigned
    for t, r in zip(rolled_out, rewards.per_trajectory):
        assert (r.traj_id, r.verifier, r.success) == (t.traj_id, t.reward, t.success)
        assert r.judge in (5 / 9, 0.5)  # the judge's 5 of 9, or 0.5 for a group of identical episodes
        assert r.reward == pytest.approx(-1.0 if t.unfinished else 0.5 * r.judge + 0.5 * t.reward)
    row = batch.metrics
    assert row["reward"] == pytest.approx(sum(r.reward for r in rewards.per_trajectory) / 4)
    assert row["success"] == sum(t.success for t in rolled_out) / 4
    assert row["verifier_reward"] == pytest.approx(sum(t.reward for t in rolled_out) / 4)
