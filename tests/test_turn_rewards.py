"""The hand-written search_qa turn rewards of notebook 07, on real expert and scripted trajectories."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from course_lib.credit import PROCESS_PENALTY
from course_lib.envs import load_tasks
from course_lib.envs.search_qa import SearchQAEnv
from course_lib.models import resolve_model_path
from course_lib.protocol import format_answer, format_tool_call
from course_lib.rollout import expert_rollout
from course_lib.turn_rewards import BONUS, evidence_turn_rewards, question_echo_turn_rewards


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


def test_malformed_turns_keep_the_process_penalty(tokenizer, task):
    t = scripted(tokenizer, task, [f"search for {task['chain'][0]}", format_answer("unknown")])
    assert evidence_turn_rewards(t)[0] == pytest.approx(PROCESS_PENALTY)
    assert question_echo_turn_rewards(t)[0] == pytest.approx(PROCESS_PENALTY)
