"""`course_lib.envs.ENVIRONMENTS` is the one list of environments: environments, task generators, data,
warm starts, turn limits and the rollout test all read it, and a name missing from it is refused with the
list of names. (The layering test checks that no other module of course_lib lists environments.)"""

from __future__ import annotations

import importlib

import pytest

from course_lib import tasks
from course_lib.envs import ENVIRONMENTS, EnvSpec, data_dir, environment, imported, load_tasks, make_env
from course_lib.envs.base import Environment
from course_lib.warm_starts import standard_warm_start_options, warm_start_options

# The course's environments in its tour order (a new environment joins the table, not this list).
TOUR = ["lookup", "search_qa", "summarize", "code_fix", "code_fix_naive", "terminal", "data_analysis",
        "gridworld"]


def test_the_table_is_in_the_course_order():
    assert [name for name in ENVIRONMENTS if name in TOUR] == TOUR
    assert all(isinstance(spec, EnvSpec) and spec.description for spec in ENVIRONMENTS.values())


@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_every_entry_names_what_exists(name):
    spec = ENVIRONMENTS[name]
    assert issubclass(imported(spec.env_class), Environment)
    assert all((data_dir() / spec.data / f"{split}.jsonl").exists() for split in ("train", "test"))
    if spec.generator is not None:
        assert spec.data == name  # a generator writes data/<its environment>/
        assert callable(importlib.import_module(spec.generator).make_tasks)
    else:
        assert ENVIRONMENTS[spec.data].generator is not None  # it plays another environment's tasks
    if spec.warm_start is not None:
        assert callable(imported(spec.warm_start))
    assert spec.rollout_turns is None or spec.rollout_turns >= 1


def test_make_env_and_load_tasks_read_the_table():
    env = make_env("code_fix_naive")
    try:
        assert type(env) is imported(ENVIRONMENTS["code_fix_naive"].env_class)
    finally:
        env.close()
    assert load_tasks("code_fix_naive", "test", limit=2) == load_tasks("code_fix", "test", limit=2)


def test_tasks_derive_their_generators_from_the_table():
    assert tasks.GENERATORS == {n: s.generator for n, s in ENVIRONMENTS.items() if s.generator is not None}
    assert tasks.ENV_NAMES == [n for n in ENVIRONMENTS if ENVIRONMENTS[n].generator is not None]
    assert tasks.generator("code_fix_naive") is tasks.generator("code_fix")


def test_the_rollout_test_covers_every_environment():
    import test_env_rollouts

    (mark,) = test_env_rollouts.test_base_model_rollouts_run_in_every_environment.pytestmark
    assert mark.args == ("env_name", list(ENVIRONMENTS))


def test_warm_starts_and_turn_limits_come_from_the_table():
    from course_lib.judge.warm_start import LIGHT_WARM_START_ENVS, ROLLOUT_TURNS, TRAIN_ENVS

    assert {name: ROLLOUT_TURNS.get(name) for name in TOUR if name in ROLLOUT_TURNS} == {
        "lookup": 3, "search_qa": 4, "gridworld": 8}  # part of the judge warm start's cache key
    assert ROLLOUT_TURNS == {n: s.rollout_turns for n, s in ENVIRONMENTS.items() if s.rollout_turns}
    assert TRAIN_ENVS == tuple(n for n, s in ENVIRONMENTS.items() if s.teaches_judge)
    assert LIGHT_WARM_START_ENVS == tuple(sorted(n for n, s in ENVIRONMENTS.items() if s.light_judge_policy))
    assert [n for n in TRAIN_ENVS if n in TOUR] == ["search_qa", "gridworld"]
    assert [n for n in LIGHT_WARM_START_ENVS if n in TOUR] == ["gridworld", "lookup"]
    for name, spec in ENVIRONMENTS.items():
        for fast in (True, False):
            if spec.warm_start is None:
                assert warm_start_options(name, fast) == standard_warm_start_options(fast)


def test_a_name_missing_from_the_table_is_refused_with_the_names():
    for call in (environment, make_env, load_tasks, lambda name: warm_start_options(name, fast=True)):
        with pytest.raises(ValueError) as error:
            call("gridwrld")
        names = ", ".join(ENVIRONMENTS)
        assert str(error.value) == f"environment 'gridwrld' does not exist; environments are: {names}"
    with pytest.raises(ValueError, match="no task generator for 'gridwrld'"):
        tasks.generator("gridwrld")


def test_a_new_entry_is_all_it_takes(monkeypatch):
    """An entry added to the table is an environment everywhere that reads the table at call time."""
    toy = EnvSpec("course_lib.envs.lookup:LookupEnv", None, "lookup", "lookup under another name",
                  warm_start="course_lib.warm_starts:gridworld_warm_start_options", rollout_turns=2)
    monkeypatch.setitem(ENVIRONMENTS, "toy", toy)
    env = make_env("toy")
    env.close()
    assert load_tasks("toy", "test", limit=1) == load_tasks("lookup", "test", limit=1)
    assert tasks.generator("toy") is tasks.generator("lookup")
    assert warm_start_options("toy", fast=True)["task_filter"] == {"size": 4}
