"""The hand-written search_qa turn rewards of notebook 07, on real expert and scripted trajectories."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from course_lib.credit import CreditInputs, advantages, groups_to_train
from course_lib.envs import load_tasks
from course_lib.envs.search_qa import SearchQAEnv
from course_lib.models import resolve_model_path
from course_lib.protocol import format_answer, format_tool_call
from course_lib.rewards import (
    BONUS,
    PROCESS_PENALTY,
    answer_evidence_turn_rewards,
    evidence_turn_rewards,
    question_echo_turn_rewards,
)
from course_lib.rollout import expert_rollout
from course_lib.train.batch import make_batch
from course_lib.train.config import Hooks, TrainConfig
from course_lib.trajectory import TrajectoryGroup


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m"))


@pytest.fixture(scope="module")
def task():
    return next(t for t in load_tasks("search_qa", "train") if t["hops"] == 2)


def scripted(tokenizer, task, script):
    """A search_qa episode that plays `script` (one action text per turn), recorded as a real Trajectory."""

    class Scripted(SearchQAEnv):
        def __init__(self):
            super().__init__(max_turns=len(script))

        def expert_action(self):
            return script[self.turn]

    (trajectory,) = expert_rollout(tokenizer, Scripted, [task], max_turns=len(script))
    return trajectory


def test_the_expert_earns_the_evidence_bonus_on_each_hop_and_echo_only_on_the_first(tokenizer, task):
    (expert,) = expert_rollout(tokenizer, "search_qa", [task], max_turns=4)
    assert expert.success and expert.num_turns == 3  # search the person, search the city, answer
    assert evidence_turn_rewards(expert) == pytest.approx([BONUS, BONUS, 0.0])
    # the question names the person, not the city: the misaligned reward pays the first hop only
    assert question_echo_turn_rewards(expert) == pytest.approx([BONUS, 0.0, 0.0])


def test_repeating_a_search_earns_the_echo_bonus_again_but_no_new_evidence(tokenizer, task):
    person = task["chain"][0]
    search = format_tool_call("search", {"query": person})
    t = scripted(tokenizer, task, [search, search, format_answer("unknown")])
    assert evidence_turn_rewards(t) == pytest.approx([BONUS, 0.0, 0.0])
    assert question_echo_turn_rewards(t) == pytest.approx([BONUS, BONUS, 0.0])


def test_the_answer_evidence_reward_pays_the_second_hop_and_charges_searching_on(tokenizer, task):
    (expert,) = expert_rollout(tokenizer, "search_qa", [task], max_turns=4)
    assert answer_evidence_turn_rewards(expert) == pytest.approx([0.0, BONUS, 0.0])
    person, city = task["chain"]
    first, second = format_tool_call("search", {"query": person}), format_tool_call("search", {"query": city})
    t = scripted(tokenizer, task, [first, second, second, first])  # the answer in view at turn 1, never given
    assert answer_evidence_turn_rewards(t) == pytest.approx([0.0, BONUS, -BONUS, -BONUS])
    group = failed_group(tokenizer, task)
    inputs = CreditInputs.of(group.trajectories,
                             turn_rewards=[answer_evidence_turn_rewards(t) for t in group])
    second_hop, one_search, repeat = advantages("turn_dense", inputs).advantages
    assert second_hop[1] > 0 > repeat[1] and second_hop[0] > one_search[0]


def test_malformed_turns_keep_the_process_penalty(tokenizer, task):
    t = scripted(tokenizer, task, [f"search for {task['chain'][0]}", format_answer("unknown")])
    assert evidence_turn_rewards(t)[0] == pytest.approx(PROCESS_PENALTY)
    assert question_echo_turn_rewards(t)[0] == pytest.approx(PROCESS_PENALTY)


def failed_group(tokenizer, task):
    """Three rollouts of one two-hop task that all fail (R = 0), in one group: one takes the second hop and
    answers wrongly, one answers after the first search, one repeats the first search."""
    person, city = task["chain"]
    first, second = format_tool_call("search", {"query": person}), format_tool_call("search", {"query": city})
    scripts = {"second_hop": [first, second, format_answer(city)],
               "one_search": [first, format_answer(city)],
               "repeat": [first, first, format_answer(city)]}
    trajectories = []
    for name, script in scripts.items():
        t = scripted(tokenizer, task, script)
        assert t.reward == 0.0  # the city is not the region asked for: every rollout fails
        t.group_id, t.traj_id = "g", name
        trajectories.append(t)
    return TrajectoryGroup(task_id=str(task["id"]), group_id="g", trajectories=trajectories)


def test_turn_dense_trains_an_all_failed_group_that_turn_skips(tokenizer, task):
    group = failed_group(tokenizer, task)
    inputs = CreditInputs.of(group.trajectories, turn_rewards=[evidence_turn_rewards(t) for t in group])
    turn, dense = advantages("turn", inputs), advantages("turn_dense", inputs)
    for a, b in zip(turn.advantages, dense.advantages):  # the same numbers: only the skip rule differs
        assert torch.equal(a, b)
    assert groups_to_train("turn", inputs, turn) == []  # equal outcome rewards: no signal for "turn"
    assert groups_to_train("turn_dense", inputs, dense) == ["g"]
    second_hop, one_search, repeat = dense.advantages
    assert second_hop[1] > 0 > repeat[1]  # at turn 1: the search that found the city's page, not the repeat
    assert second_hop[0] > one_search[0] > repeat[0]  # turn 0, the same search: credited by what followed it


def test_the_echo_reward_credits_the_repeated_search_instead(tokenizer, task):
    group = failed_group(tokenizer, task)
    inputs = CreditInputs.of(group.trajectories, turn_rewards=[question_echo_turn_rewards(t) for t in group])
    second_hop, _, repeat = advantages("turn_dense", inputs).advantages
    assert repeat[1] > 0 > second_hop[1]


def test_make_batch_keeps_the_all_failed_group_only_under_turn_dense(tokenizer, task):
    group = failed_group(tokenizer, task)
    hooks = Hooks(turn_reward_fn=evidence_turn_rewards)
    for method, trained in (("turn", 0), ("turn_dense", 3)):
        batch = make_batch([group], [], TrainConfig(credit=method), hooks)
        assert len(batch.trajectories) == trained
        assert batch.skipped["no_signal"] == ([] if trained else ["g"])
    assert any(bool((a != 0).any()) for a in batch.advantages)  # turn_dense: per-token advantages, not all 0
