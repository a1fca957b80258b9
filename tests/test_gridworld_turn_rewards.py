"""The gridworld turn-reward rules (`rewards.path_distance_turn_rewards`, `line_distance_turn_rewards`) on
real episodes: the expert's, a walk into a dead end, and what turn credit makes of them."""

from __future__ import annotations

import pytest
import test_gridworld
from transformers import AutoTokenizer

from course_lib.course.tabular import Episode, path_rewards
from course_lib.credit import CreditInputs, advantages
from course_lib.envs import load_tasks
from course_lib.envs.gridworld import LongGridWorldEnv
from course_lib.models import resolve_model_path
from course_lib.protocol import format_tool_call
from course_lib.rewards import (
    BONUS,
    PROCESS_PENALTY,
    distance_reward,
    line_distance_turn_rewards,
    path_distance_turn_rewards,
)
from course_lib.rollout import expert_rollout
from course_lib.trajectory import TrajectoryGroup

U_MAP = dict(test_gridworld.U_MAP, view=2)  # a U of walls between S and G: straight up ends in its pocket
INTO_THE_POCKET = ["up", "up", "up"]  # two moves in, then a bump into the U's bottom
OUT_AND_AROUND = ["down", "left", "left", "up", "up", "up", "right", "right"]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m"))


def scripted(tokenizer, task, directions, name="scripted"):
    """A gridworld_long episode that plays `directions` (one move per turn), recorded as a real Trajectory."""
    script = [format_tool_call("move", {"direction": d}) if d in ("up", "down", "left", "right") else d
              for d in directions]

    class Scripted(LongGridWorldEnv):
        def __init__(self):
            super().__init__(max_turns=len(script))

        def expert_action(self):
            return script[self.turn]

    (trajectory,) = expert_rollout(tokenizer, Scripted, [task], max_turns=len(script))
    trajectory.group_id, trajectory.traj_id = "g", name
    return trajectory


def test_distance_reward_is_the_sign_of_the_progress():
    assert [distance_reward(5, 4), distance_reward(4, 5), distance_reward(4, 4)] == [BONUS, -BONUS, 0.0]
    assert distance_reward(3, 1, size=0.5) == 0.5


def test_the_expert_earns_the_path_bonus_on_every_move_and_pays_its_detour_in_line_distance(tokenizer):
    tasks = load_tasks("gridworld_long", "test")
    tasks = [next(t for t in tasks if t["horizon"] == h and t["detour"] > 0) for h in (4, 12, 24)]
    for expert, task in zip(expert_rollout(tokenizer, "gridworld_long", tasks, max_turns=60), tasks):
        assert expert.success and expert.num_turns == task["horizon"]
        assert path_distance_turn_rewards(expert) == pytest.approx([BONUS] * task["horizon"])
        line = line_distance_turn_rewards(expert)
        # h moves, d of them more than the straight-line distance h - d: h - d/2 moves closer, d/2 away
        assert line.count(-BONUS) == task["detour"] // 2
        assert line.count(BONUS) == task["horizon"] - task["detour"] // 2


def test_walking_into_the_dead_end_looks_good_only_in_a_straight_line(tokenizer):
    t = scripted(tokenizer, U_MAP, INTO_THE_POCKET + OUT_AND_AROUND)
    assert t.success and t.num_turns == 11
    assert line_distance_turn_rewards(t) == pytest.approx([BONUS, BONUS, 0.0] + [-BONUS] * 3 + [BONUS] * 5)
    assert path_distance_turn_rewards(t) == pytest.approx([BONUS, -BONUS, 0.0] + [BONUS] * 8)
    # the tabular companion reads the same distances from the same cells
    cells = [tuple(t.steps[0].info["cell_before"])] + [tuple(s.info["cell_after"]) for s in t.steps]
    episode = Episode("u", cells=cells)
    assert path_rewards(episode, U_MAP, by="path") == pytest.approx(path_distance_turn_rewards(t))
    assert path_rewards(episode, U_MAP, by="line") == pytest.approx(line_distance_turn_rewards(t))


def test_a_malformed_move_keeps_the_process_penalty(tokenizer):
    t = scripted(tokenizer, U_MAP, ["go up", "up"])
    assert path_distance_turn_rewards(t) == pytest.approx([PROCESS_PENALTY, BONUS])


def test_turn_credit_follows_the_rule_it_is_given(tokenizer):
    """Two rollouts that both run out of turns (R = 0): one into the pocket, one the long way round. With the
    path distance turn credit prefers the first move of the way round; with the line distance, the pocket."""
    pocket = scripted(tokenizer, U_MAP, INTO_THE_POCKET, "pocket")
    around = scripted(tokenizer, U_MAP, ["left", "left", "up"], "around")
    assert pocket.reward == around.reward == 0.0
    group = TrajectoryGroup("u", "g", [pocket, around])
    for rule, sign in ((path_distance_turn_rewards, -1), (line_distance_turn_rewards, 1)):
        inputs = CreditInputs.of(group.trajectories, turn_rewards=[rule(t) for t in group])
        to_pocket, to_around = advantages("turn_dense", inputs).advantages
        assert sign * (to_pocket[0] - to_around[0]) > 0, rule.__name__


def test_a_trajectory_of_another_environment_is_refused(tokenizer):
    (t,) = expert_rollout(tokenizer, "lookup", load_tasks("lookup", "test", limit=1), max_turns=3)
    with pytest.raises(ValueError, match="gridworld trajectories only"):
        path_distance_turn_rewards(t)
