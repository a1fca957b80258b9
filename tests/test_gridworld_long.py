"""gridworld_long: walled maps at five horizons, seen through a window, where walking straight at the goal
mostly fails."""

from __future__ import annotations

import pytest

from course_lib.envs import load_tasks, make_env
from course_lib.envs.gridworld import distances_to, goal_distance
from course_lib.tasks import filter_tasks
from course_lib.tasks.gridworld_long import HORIZONS, VIEW, detour, line_walk


@pytest.fixture(scope="module")
def splits():
    return load_tasks("gridworld_long", "train"), load_tasks("gridworld_long", "test")


def test_maps_are_valid_solvable_and_as_long_as_labelled(splits):
    for task in splits[0] + splits[1]:
        grid, size, horizon = task["grid"], task["size"], task["horizon"]
        assert size == HORIZONS[horizon] and len(grid) == size and all(len(row) == size for row in grid)
        cells = "".join(grid)
        assert set(cells) <= set("SGH.#") and cells.count("S") == cells.count("G") == 1
        start, goal = tuple(task["start"]), tuple(task["goal"])
        assert grid[start[0]][start[1]] == "S" and grid[goal[0]][goal[1]] == "G"
        assert distances_to(grid, goal).get(start) == horizon == task["shortest_path_len"]
        assert task["view"] == VIEW and task["detour"] == detour(grid, start, goal)


def test_every_horizon_has_its_share_and_a_filter_picks_it(splits):
    train, test = splits
    for horizon in HORIZONS:
        assert len(filter_tasks(train, {"horizon": horizon})) == 80
        assert len(filter_tasks(test, {"horizon": horizon})) == 40


def test_train_and_test_layouts_are_disjoint_and_unique(splits):
    train, test = ({tuple(t["grid"]) for t in split} for split in splits)
    assert len(train) == len(splits[0]) and len(test) == len(splits[1]) and not train & test
    # the walls and holes alone never repeat either (S and G moved on the same map would be a repeat)
    plain = [{tuple(row.replace("S", ".").replace("G", ".") for row in t["grid"]) for t in split}
             for split in splits]
    assert not plain[0] & plain[1]


def test_walking_straight_at_the_goal_gets_stuck_on_most_maps(splits):
    for horizon in HORIZONS:
        tasks = filter_tasks(splits[0] + splits[1], {"horizon": horizon})
        stuck = [t for t in tasks if line_walk(t["grid"], tuple(t["start"]), tuple(t["goal"]))[-1]
                 != tuple(t["goal"])]
        assert len(stuck) >= 0.75 * len(tasks), horizon
        for task in tasks:
            if task["detour"] > 0:  # a detour: the straight walk always ends in a dead end
                assert task in stuck
                end = line_walk(task["grid"], tuple(task["start"]), tuple(task["goal"]))[-1]
                assert (goal_distance(task["grid"], tuple(task["goal"]), end, "line")
                        < goal_distance(task["grid"], tuple(task["goal"]), end, "path"))
    assert all(t["detour"] > 0 for t in filter_tasks(splits[0], {"horizon": 24}))


def test_the_expert_solves_every_test_map_in_its_horizon_within_twice_as_many_turns(splits):
    env = make_env("gridworld_long")
    for task in splits[1]:
        obs = env.reset(task)
        assert env.max_turns == 2 * task["horizon"]
        assert obs.count("\n") == 2 * VIEW + 1 and obs.splitlines()[VIEW].split()[VIEW] == "A"
        while not env.done:
            result = env.step(env.expert_action())
        assert result.reward == 1.0 and env.turn == task["horizon"], task["id"]


def test_the_instructions_name_the_walls_and_the_window():
    prompt = make_env("gridworld_long").system_prompt()
    assert "# is a wall" in prompt and "cells around you" in prompt and "move" in prompt
