"""Hand-written turn rewards for search_qa: two that agree with the verifier, one that only looks like it.

Both start from the course's default process reward (`credit.process_reward`: −0.1 for a malformed action
or a tool error) and add a bonus for turns that look like progress:

    evidence_turn_rewards       +bonus when a search shows, for the first time in the episode, a sentence
                                the answer needs (one of the task's evidence sentences). Aligned: every
                                hop of the question has to find its sentence.
    answer_evidence_turn_rewards  +bonus for the search that first shows the sentence holding the answer,
                                −bonus for every search after it. Aligned, and answering is never the
                                costlier choice once the answer is in view.
    question_echo_turn_rewards  +bonus when a search's query repeats a word of the question ("stay on
                                topic"). Misaligned: the first hop's name is in the question, the second
                                hop's city is not, so it pays for searching the person again and nothing
                                for the search that answers a two-hop question.

Pass either to training as `train(config, turn_reward_fn=evidence_turn_rewards)` with credit="turn", or with
credit="turn_dense" to let the turn rewards alone train groups whose rollouts all failed (notebook 07's
sparse setting, where that is where the difference between the two rewards shows). Each returns one reward
per turn of a search_qa `Trajectory`.
"""

from __future__ import annotations

import re
from functools import lru_cache

from course_lib.credit import process_reward
from course_lib.envs import load_tasks
from course_lib.envs.search_qa import SearchQAEnv, load_index
from course_lib.protocol import parse_action
from course_lib.trajectory import Trajectory

BONUS = 0.1


@lru_cache(maxsize=1)
def _tasks_by_id() -> dict[str, dict]:
    return {t["id"]: t for split in ("train", "test") for t in load_tasks("search_qa", split)}


@lru_cache(maxsize=4096)
def _evidence_texts(task_id: str) -> tuple[str, ...]:
    texts = {d["id"]: d["text"] for d in load_index().docs}
    return tuple(texts[doc_id] for doc_id in _tasks_by_id()[task_id]["evidence"])


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def _query(step) -> str | None:
    action = parse_action(step.action_text, SearchQAEnv.tools)
    return str(action.arguments.get("query", "")) if action.kind == "tool_call" else None


def evidence_turn_rewards(trajectory: Trajectory, bonus: float = BONUS) -> list[float]:
    """r_t = process_reward(step_t) + bonus if turn t's search results show an evidence sentence of the task
    that no earlier turn showed, else process_reward(step_t)."""
    evidence, seen, rewards = _evidence_texts(trajectory.task_id), set(), []
    for step in trajectory.steps:
        found = {e for e in evidence if e in step.observation_text} - seen if _query(step) is not None else set()
        seen |= found
        rewards.append(process_reward(step) + (bonus if found else 0.0))
    return rewards


def answer_evidence_turn_rewards(trajectory: Trajectory, bonus: float = BONUS) -> list[float]:
    """r_t = process_reward(step_t) + bonus on the first search whose results show the sentence that holds the
    answer (the task's last evidence sentence), − bonus on every search after it, else process_reward(step_t).

    Aligned, and it does not make answering costly: once the answer is in view, only answering helps the
    verifier, so a further search is charged; the first hop (which the warm start already takes) earns nothing.
    """
    answer_sentence, in_view, rewards = _evidence_texts(trajectory.task_id)[-1], False, []
    for step in trajectory.steps:
        is_search, extra = _query(step) is not None, 0.0
        if is_search and in_view:
            extra = -bonus
        elif is_search and answer_sentence in step.observation_text:
            in_view, extra = True, bonus
        rewards.append(process_reward(step) + extra)
    return rewards


def question_echo_turn_rewards(trajectory: Trajectory, bonus: float = BONUS) -> list[float]:
    """r_t = process_reward(step_t) + bonus if turn t is a search whose query shares a word (of 3+ letters)
    with the question, else process_reward(step_t)."""
    question = {w for w in _words(_tasks_by_id()[trajectory.task_id]["question"]) if len(w) >= 3}
    rewards = []
    for step in trajectory.steps:
        query = _query(step)
        echo = query is not None and bool(question & _words(query))
        rewards.append(process_reward(step) + (bonus if echo else 0.0))
    return rewards
