"""GridWorld: maps, moves, endings, anchor states and the expert."""

from __future__ import annotations

import pytest

from course_lib.envs import load_tasks, make_env
from course_lib.envs.gridworld import distances_to
from course_lib.protocol import format_answer, format_tool_call

# S . . .
# . H . .
# . . . .
# . . . G
SMALL = {"id": "small", "grid": ["S...", ".H..", "....", "...G"], "size": 4, "start": [0, 0], "goal": [3, 3],
         "shortest_path_len": 6}


def move(direction: str) -> str:
    return format_tool_call("move", {"direction": direction})


def test_maps_are_valid_and_solvable():
    train, test = load_tasks("gridworld", "train"), load_tasks("gridworld", "test")
    assert len(train) >= 200 and len(test) >= 50
    for task in train + test:
        grid, size = task["grid"], task["size"]
        assert 4 <= size <= 6 and len(grid) == size and all(len(row) == size for row in grid)
        assert set("".join(grid)) <= set("SGH.")
        assert grid[task["start"][0]][task["start"][1]] == "S" and "".join(grid).count("S") == 1
        assert grid[task["goal"][0]][task["goal"][1]] == "G" and "".join(grid).count("G") == 1
        assert distances_to(grid, tuple(task["goal"])).get(tuple(task["start"])) == task["shortest_path_len"]
    assert {t["size"] for t in test} == {4, 5, 6}


def test_train_and_test_layouts_are_disjoint_and_unique():
    train, test = load_tasks("gridworld", "train"), load_tasks("gridworld", "test")
    train_layouts, test_layouts = {tuple(t["grid"]) for t in train}, {tuple(t["grid"]) for t in test}
    assert len(train_layouts) == len(train) and len(test_layouts) == len(test)
    assert not train_layouts & test_layouts


def test_expert_solves_the_test_maps_by_a_shortest_path():
    env = make_env("gridworld")
    tasks = load_tasks("gridworld", "test")
    failed = []
    for task in tasks:
        env.reset(task)
        assert env.max_turns == 2 * task["shortest_path_len"]
        while True:
            result = env.step(env.expert_action())
            if result.done:
                break
        if result.reward != 1.0:
            failed.append(task["id"])
        assert result.reward == 0.0 or env.turn == task["shortest_path_len"]
    assert not failed, f"the expert failed {len(failed)} of {len(tasks)} test maps: {failed}"


def test_first_observation_is_the_picture():
    env = make_env("gridworld")
    obs = env.reset(SMALL)
    assert obs == "A . . .\n. H . .\n. . . .\n. . . G\nYou are at row 1, col 1. The goal is at row 4, col 4."
    assert env.state_key() == obs


def test_hole_ends_the_episode_with_zero():
    env = make_env("gridworld")
    env.reset(SMALL)
    assert not env.step(move("right")).done
    result = env.step(move("down"))
    assert result.done and result.reward == 0.0 and result.info["outcome"] == "hole"
    assert result.observation.startswith("You fell into a hole at row 2, col 2.")


def test_goal_ends_the_episode_with_one():
    env = make_env("gridworld")
    env.reset(SMALL)
    for direction in ["right", "right", "right", "down", "down"]:
        assert not env.step(move(direction)).done
    result = env.step(move("down"))
    assert result.done and result.reward == 1.0 and result.info["outcome"] == "goal"


def test_off_grid_move_stays_in_place_with_a_note():
    env = make_env("gridworld")
    start = env.reset(SMALL)
    for direction in ["up", "left"]:
        result = env.step(move(direction))
        assert not result.done
        assert result.observation == f"You hit the wall moving {direction}; you stay in place.\n{start}"
        assert env.position == (0, 0) and env.state_key() == start


def test_same_state_gives_same_observation_across_rollouts():
    a, b = make_env("gridworld"), make_env("gridworld")
    a.reset(SMALL)
    b.reset(SMALL)
    obs_a = [a.step(move(d)).observation for d in ["right", "right", "down"]]
    obs_b = [b.step(move(d)).observation for d in ["right", "right", "right", "down", "left"]]
    assert a.position == b.position == (1, 2)
    assert obs_a[-1] == obs_b[-1] and a.state_key() == b.state_key()
    assert obs_a[0] != obs_a[1]  # different cells, different pictures
    # a cell revisited later looks the same as on the first visit, in any rollout
    a.step(move("up"))
    assert a.state_key() == obs_a[1] == obs_b[1]


def test_malformed_moves_are_observations_and_keep_the_state():
    env = make_env("gridworld")
    start = env.reset(SMALL)
    for bad in [move("north"), "go right", '<tool_call>{"name": "move"}</tool_call>', move(" RIGHT ")]:
        result = env.step(bad)
        assert not result.done
        if bad != move(" RIGHT "):
            assert result.observation.startswith("Error:") and env.state_key() == start
    assert env.position == (0, 1)  # direction is case- and space-insensitive


def test_a_long_direction_is_not_echoed_whole():
    env = make_env("gridworld")
    start = env.reset(SMALL)
    result = env.step(move("north" * 40_000))  # 200,000 characters
    assert (result.observation.startswith("Error:") and "…" in result.observation
            and len(result.observation) < 250)
    assert env.state_key() == start


def test_turn_limit_and_answers_end_with_zero():
    env = make_env("gridworld", max_turns=3)
    env.reset(SMALL)
    results = [env.step(move("up")) for _ in range(3)]
    assert [r.done for r in results] == [False, False, True] and results[-1].reward == 0.0
    env.reset(SMALL)
    result = env.step(format_answer("I am at the goal"))
    assert result.done and result.reward == 0.0


def test_slip_moves_sideways():
    env = make_env("gridworld", slip=1.0, seed=0)
    env.reset(dict(SMALL, start=[2, 2], grid=["....", ".H..", "..S.", "...G"]))
    env.step(move("up"))
    assert env.position in {(2, 1), (2, 3)}


@pytest.mark.parametrize("max_turns", [None, 12])
def test_turn_limit_default_is_twice_the_shortest_path(max_turns):
    env = make_env("gridworld", max_turns=max_turns)
    env.reset(SMALL)
    assert env.max_turns == (max_turns or 12)


# A U of walls between S and G: walking straight up from S ends in its pocket at row 3, col 3.
# . . G . .
# . # # # .
# . # . # .
# . . . . .
# . . S . .
U_MAP = {"id": "u", "grid": ["..G..", ".###.", ".#.#.", ".....", "..S.."], "size": 5, "start": [4, 2],
         "goal": [0, 2], "shortest_path_len": 8}


def test_a_wall_stops_a_move_like_the_edge_and_no_path_crosses_it():
    env = make_env("gridworld")
    env.reset(U_MAP)
    env.step(move("up"))
    env.step(move("up"))
    before = env.state_key()
    result = env.step(move("up"))
    assert result.observation == f"You hit the wall moving up; you stay in place.\n{before}"
    assert env.position == (2, 2) and not result.done
    distances = distances_to(U_MAP["grid"], (0, 2))
    assert distances[(4, 2)] == 8 and (1, 2) not in distances


def test_the_view_shows_the_window_around_the_agent_then_the_status_line():
    env = make_env("gridworld")
    obs = env.reset(dict(U_MAP, view=1))
    assert obs == ". . .\n. A .\n# # #\nYou are at row 5, col 3. The goal is at row 1, col 3."
    env.reset(dict(U_MAP, view=2))
    env.step(move("right"))
    assert env.state_key() == ("# . # . #\n. . . . #\n. S A . #\n# # # # #\n# # # # #\n"
                               "You are at row 5, col 4. The goal is at row 1, col 3.")
    env.step(move("up"))
    env.step(move("left"))
    env.step(move("up"))  # in the pocket, where the window is the whole map
    assert env.state_key() == (". . G . .\n. # # # .\n. # A # .\n. . . . .\n. . S . .\n"
                               "You are at row 3, col 3. The goal is at row 1, col 3.")


def test_the_view_keeps_one_picture_per_cell_whatever_the_history():
    a, b = make_env("gridworld"), make_env("gridworld")
    a.reset(dict(U_MAP, view=2))
    b.reset(dict(U_MAP, view=2))
    for direction in ["left", "up", "right"]:
        a.step(move(direction))
    for direction in ["up", "up", "up", "down", "left", "right", "right", "left"]:  # a bump on the way
        b.step(move(direction))
    assert a.position == b.position == (3, 2) and a.state_key() == b.state_key()
    assert a.state_key().endswith("You are at row 4, col 3. The goal is at row 1, col 3.")


def test_each_turn_records_its_cells_and_the_goal_distances():
    env = make_env("gridworld")
    env.reset(U_MAP)
    info = env.step(move("up")).info
    assert info["cell_before"] == [4, 2] and info["cell_after"] == [3, 2]
    assert info["goal_distance"] == {"path": [8, 7], "line": [4, 3]}
    env.step(move("up"))
    assert env.step(move("up")).info["goal_distance"] == {"path": [8, 8], "line": [2, 2]}  # the bump
    assert env.step("go up").info["goal_distance"]["path"] == [8, 8]  # a malformed action moves nothing
    env.reset(SMALL)
    env.step(move("right"))
    hole = env.step(move("down"))
    assert hole.done and hole.info["goal_distance"] == {"path": [5, 7], "line": [5, 4]}  # farthest + 1
