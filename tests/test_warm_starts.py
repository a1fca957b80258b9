"""The course's warm-start recipes (`course_lib.warm_starts`): each environment's options, picked through
the table of environments, with the sizes and cache keys the notebooks' checkpoints were trained with."""

from __future__ import annotations

import pytest

from course_lib import sft
from course_lib.envs import ENVIRONMENTS
from course_lib.warm_starts import (
    HACK_FRACTION,
    LONG_HORIZONS,
    WARM_START,
    course_warm_start,
    mixed_hop_tasks,
    search_qa_warm_start_options,
    warm_start_options,
)


def test_the_standard_sizes():
    assert WARM_START["fast"].options() == {"n_demos": 32, "steps": 12, "batch_size": 4, "lr": 1e-4}
    assert WARM_START["full"].options() == {"n_demos": 256, "steps": 48, "batch_size": 8, "lr": 5e-5}


@pytest.mark.parametrize("fast", [True, False])
def test_each_environment_gets_its_recipe(fast):
    options = {name: warm_start_options(name, fast) for name in ENVIRONMENTS}
    standard = WARM_START["fast" if fast else "full"].options()
    for name in ("lookup", "summarize", "code_fix", "terminal", "data_analysis"):
        assert options[name] == standard, name
    assert options["gridworld"] == ({**standard, "task_filter": {"size": 4}} if fast else standard)
    assert options["search_qa"] == search_qa_warm_start_options(fast)
    naive = options["code_fix_naive"]
    assert naive["n_demos"] == (4 if fast else 48) and naive["seed"] == 0
    hacks = sum(t.get("demonstration") == "hack" for t in naive["tasks"])
    assert hacks == round(HACK_FRACTION * naive["n_demos"])


@pytest.mark.parametrize("fast", [True, False])
def test_the_gridworld_long_recipe_demonstrates_every_rl_horizon(fast):
    """Its demonstrations cover the horizons the RL runs use, and the turn limit fits their paths."""
    options = warm_start_options("gridworld_long", fast)
    if fast:
        assert options["task_filter"] == {"horizon": 4} and options["max_turns"] >= 4
        return
    horizons = {t["horizon"] for t in options["tasks"]}
    assert horizons == set(LONG_HORIZONS) and options["n_demos"] == len(options["tasks"]) == 240
    assert options["max_turns"] >= max(LONG_HORIZONS)
    assert options["steps"] * options["batch_size"] == 2 * options["n_demos"]  # two passes


def test_the_learning_search_qa_recipe_mixes_hops():
    options = search_qa_warm_start_options(fast=False)
    assert [t["id"] for t in options["tasks"]] == [t["id"] for t in mixed_hop_tasks(224, 32, seed=0)]
    assert sum(t["hops"] == 2 for t in options["tasks"]) == 32 and options["n_demos"] == 256


def test_course_warm_start_passes_the_recipe_and_the_overrides(monkeypatch):
    calls = []
    monkeypatch.setattr(sft, "ensure_warm_start", lambda env, **options: calls.append((env, options)) or env)
    assert course_warm_start("gridworld", steps=3) == "gridworld"
    assert calls == [("gridworld", {**warm_start_options("gridworld"), "steps": 3})]
