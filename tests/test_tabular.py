"""The tabular companion: shaping rewards, advantages from course_lib.credit, the update, learning."""

import numpy as np
import pytest
from scipy import stats

from course_lib.course.tabular import (
    DIRECTIONS,
    Episode,
    _policy_gradient_step,
    paired_test,
    path_rewards,
    row_advantages,
    run_episode,
    softmax,
    train_table,
    window_mean,
)
from course_lib.credit import gae, gigpo_advantages, outcome_advantages, turn_advantages
from course_lib.envs.gridworld import GridWorldEnv

# S at the top left, G at the bottom left, a wall of holes in between except on the right.
MAP = {"id": "m", "grid": ["S..", "HH.", "G.."], "size": 3, "start": [0, 0], "goal": [2, 0],
       "shortest_path_len": 6}


def test_path_rewards_path_vs_line_disagree_next_to_a_hole():
    # down from the start: one step closer in a straight line, but into a hole (no path from there)
    ep = Episode("m", cells=[(0, 0), (1, 0)], actions=[1], states=["s"])
    assert path_rewards(ep, MAP, by="line") == [0.1]
    assert path_rewards(ep, MAP, by="path") == [-0.1]
    # right from the start: farther in a straight line, one step along the only path
    ep = Episode("m", cells=[(0, 0), (0, 1)], actions=[3], states=["s"])
    assert path_rewards(ep, MAP, by="line") == [-0.1]
    assert path_rewards(ep, MAP, by="path") == [0.1]
    with pytest.raises(ValueError, match="path' or 'line"):
        path_rewards(ep, MAP, by="manhattan")


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
    assert np.allclose(row_advantages("reinforce", eps, {"m": MAP}, gae_gamma=0.5), [0.5, 1.0, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="'ppo' is not known"):
        row_advantages("ppo", eps, {"m": MAP})
    with pytest.raises(ValueError, match="no credit method takes"):
        row_advantages("gigpo", eps, {"m": MAP}, lam=1.0)  # an option under another name than credit's


def test_every_method_is_the_trainers_maths_with_the_trainers_defaults():
    # two groups (maps) so that one of them has unequal rewards; anchors repeat inside a group
    eps = [Episode("m", states=["a", "b"], actions=[0, 1], cells=[(0, 0), (0, 1), (0, 2)], reward=1.0),
           Episode("m", states=["a", "c", "d"], actions=[3, 1, 1], cells=[(0, 0), (1, 0), (1, 0), (1, 0)]),
           Episode("n", states=["x"], actions=[0], cells=[(0, 0), (0, 0)]),
           Episode("n", states=["x", "y"], actions=[1, 1], cells=[(0, 0), (0, 0), (0, 0)])]
    tasks = {"m": MAP, "n": MAP}
    groups, trajs = ["m"] * 5 + ["n"] * 3, [0, 0, 1, 1, 1, 2, 3, 3]
    steps = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    gig = gigpo_advantages(steps, ["a", "b", "a", "c", "d", "x", "x", "y"], groups, trajs, gamma=0.95).numpy()
    assert np.allclose(row_advantages("gigpo", eps, tasks), gig)
    shaped = [r for ep in eps for r in path_rewards(ep, MAP)]
    outcome_rows = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    turn = turn_advantages(shaped, outcome_rows, groups, trajs, weight=0.5, gamma=0.95).numpy()
    assert np.allclose(row_advantages("turn_dense", eps, tasks, process="path"), turn)
    # the trainer's update skips a group whose rewards are all equal under "turn": its moves get 0 here
    assert np.allclose(row_advantages("turn", eps, tasks, process="path"), np.r_[turn[:5], [0.0] * 3])
    values = {"a": 0.5, "b": 0.8, "c": 0.1}
    critic = np.concatenate([gae(r, v, gamma=1.0, lam=0.95)[0].numpy() for r, v in
                             [([0.0, 1.0], [0.5, 0.8]), ([0.0] * 3, [0.5, 0.1, 0.0]), ([0.0], [0.0]),
                              ([0.0] * 2, [0.0, 0.0])]])
    assert np.allclose(row_advantages("critic", eps, tasks, values=values), critic)
    # REINFORCE with the trainer's γ = 1: the outcome on every move of the episode
    assert np.allclose(row_advantages("reinforce", eps, tasks), outcome_rows)


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
