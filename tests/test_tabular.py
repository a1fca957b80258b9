"""The tabular companion: shaping rewards, advantages from course_lib.credit, the update, learning."""

import numpy as np
import pytest
from scipy import stats

from course_lib.credit import outcome_advantages
from course_lib.envs.gridworld import GridWorldEnv
from course_lib.tabular import (
    DIRECTIONS,
    Episode,
    _policy_gradient_step,
    paired_test,
    process_rewards,
    row_advantages,
    run_episode,
    softmax,
    train_table,
    window_mean,
)

# S at the top left, G at the bottom left, a wall of holes in between except on the right.
MAP = {"id": "m", "grid": ["S..", "HH.", "G.."], "size": 3, "start": [0, 0], "goal": [2, 0], "shortest_path_len": 6}


def test_process_rewards_path_vs_line_disagree_next_to_a_hole():
    # down from the start: one step closer in a straight line, but into a hole (no path from there)
    ep = Episode("m", cells=[(0, 0), (1, 0)], actions=[1], states=["s"])
    assert process_rewards(ep, MAP, by="line") == [0.1]
    assert process_rewards(ep, MAP, by="path") == [-0.1]
    # right from the start: farther in a straight line, one step along the only path
    ep = Episode("m", cells=[(0, 0), (0, 1)], actions=[3], states=["s"])
    assert process_rewards(ep, MAP, by="line") == [-0.1]
    assert process_rewards(ep, MAP, by="path") == [0.1]
    with pytest.raises(ValueError, match="path' or 'line"):
        process_rewards(ep, MAP, by="manhattan")


def test_run_episode_follows_the_table_through_the_real_environment():
    env, rng = GridWorldEnv(), np.random.default_rng(0)
    expert: dict[str, np.ndarray] = {}
    env.reset(MAP)
    while not env.done:  # a table that puts (almost) all mass on the expert's move in every state
        logits = np.full(len(DIRECTIONS), -50.0)
        move = env.expert_action().split('"direction": "')[1].split('"')[0]
        logits[DIRECTIONS.index(move)] = 50.0
        expert[env.state_key()] = logits
        env.step(env.expert_action())
    episode = run_episode(env, MAP, expert, rng)
    assert episode.reward == 1.0 and episode.moves == MAP["shortest_path_len"]
    assert episode.cells[0] == (0, 0) and episode.cells[-1] == (2, 0)


def test_outcome_rows_are_the_group_normalised_reward_on_every_move():
    eps = [Episode("m", states=["a", "b"], actions=[0, 1], reward=1.0),
           Episode("m", states=["a"], actions=[2], reward=0.0),
           Episode("m", states=["a", "c", "d"], actions=[0, 0, 0], reward=0.0)]
    per_episode = outcome_advantages([1.0, 0.0, 0.0], ["m"] * 3).numpy()
    rows = row_advantages("outcome", eps, {"m": MAP})
    assert np.allclose(rows, np.repeat(per_episode, [2, 1, 3]))
    # with no baseline, every move of a failed episode gets 0 and the winner's moves its discounted return
    assert np.allclose(row_advantages("reinforce", eps, {"m": MAP}, gamma=0.5), [0.5, 1.0, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="unknown method"):
        row_advantages("ppo", eps, {"m": MAP})


def test_policy_gradient_step_moves_probability_toward_positive_advantage():
    table = {"s": np.zeros(4)}
    ep = Episode("m", states=["s", "s"], actions=[0, 1])
    _policy_gradient_step(table, [ep], np.array([1.0, -1.0]), lr=1.0)
    probs = softmax(table["s"])
    assert probs[0] > 0.25 > probs[1]
    # the exact update: θ += lr · Σ A (onehot − π) with π uniform
    assert np.allclose(table["s"], [1.0, -1.0, 0.0, 0.0])


def test_paired_test_matches_scipy_and_drops_nan_pairs():
    a, b = [1.0, 2.0, 3.5, np.nan, 2.0], [0.5, 2.5, 2.0, 1.0, 1.0]
    out = paired_test(a, b)
    assert out["n"] == 4
    assert out["p"] == pytest.approx(stats.ttest_rel([1.0, 2.0, 3.5, 2.0], [0.5, 2.5, 2.0, 1.0]).pvalue)
    assert out["low"] < out["mean_diff"] < out["high"]
    with pytest.raises(ValueError, match="at least two"):
        paired_test([1.0], [2.0])


def test_outcome_credit_learns_on_a_small_map():
    history = train_table("outcome", [MAP], seed=0, updates=40, group_size=8)
    assert history[0]["success"] < 0.3  # the uniform start
    assert window_mean(history, "success", 30) > 0.8
