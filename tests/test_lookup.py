"""Lookup, the built-in toy: the expert, the tool's errors and the verifier."""

from __future__ import annotations

from course_lib.envs import load_tasks, make_env
from course_lib.protocol import format_answer, format_tool_call


def test_expert_solves_the_test_tasks():
    env = make_env("lookup")
    for task in load_tasks("lookup", "test"):
        env.reset(task)
        while True:
            result = env.step(env.expert_action())
            if result.done:
                break
        assert result.reward == 1.0, task["id"]


def test_an_unknown_name_is_an_error_that_echoes_a_short_excerpt():
    env = make_env("lookup")
    env.reset(load_tasks("lookup", "test")[0])
    result = env.step(format_tool_call("lookup", {"name": "Nobody"}))
    assert result.observation.startswith("Error:") and "no agent named 'Nobody'" in result.observation
    result = env.step(format_tool_call("lookup", {"name": "x" * 200_000}))
    assert "…" in result.observation and len(result.observation) < 250 and not result.done


def test_answers_are_compared_without_case_and_final_period():
    task = load_tasks("lookup", "test")[0]
    env = make_env("lookup")
    env.reset(task)
    assert env.step(format_answer(task["answer"].upper() + ".")).reward == 1.0
    env.reset(task)
    assert env.step(format_answer("Nowhere")).reward == 0.0
