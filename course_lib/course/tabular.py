"""A controlled companion to the LLM runs of notebooks 06 to 08: the same credit functions driving a
table of logits on the same gridworld.

An LLM run on a 2-core CPU affords a handful of seeds; a mechanism of credit assignment (does GiGPO's
step grouping shorten paths? does a process reward speed learning up, or mislead it? does a critic cut
the variance of the advantages?) is easier to see over twenty seeds. Here the policy is a softmax
over the four moves with one row of logits per state, π(a | s) = softmax(θ_s)_a, where the state s is
the environment's own anchor string (`GridWorldEnv.state_key()`). Episodes run in the real
`GridWorldEnv`, their advantages come from `credit.advantages` (the trainer's dispatch, with the trainer's
defaults: a method here computes what it computes for the LLM), and the update is the tabular policy
gradient

    θ_s ← θ_s + (lr / n_episodes) · Σ_{rows at s} A_row · (onehot(a_row) − π(· | s)),

which is what `policy_loss` does to a model's logits, without the model. A run takes seconds, so the
functions below are called with many seeds from notebooks and from `benchmarks/tabular_credit.py`.
The table cannot generalise to maps it never saw, so everything here is measured on the maps it
trains on: it shows a mechanism, never a held-out result.

    run_episode        one episode of a table policy in the real environment
    path_rewards       per-move shaping: +0.1 closer to the goal, −0.1 farther (by path or by straight line)
    episode_credit     advantages of episodes through `credit.advantages`: the trainer's methods and defaults
    train_table        updates of one credit method on a set of maps; per-update metrics
    paired_test        mean difference, its 95% interval and p-value over seeds (paired t-test)
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy import stats

from course_lib import credit
from course_lib.envs.gridworld import MOVES, GridWorldEnv, goal_distance
from course_lib.protocol import format_tool_call
from course_lib.rewards import distance_reward

DIRECTIONS = tuple(MOVES)  # up, down, left, right: column k of a row of logits is DIRECTIONS[k]
_ACTION_TEXT = {d: format_tool_call("move", {"direction": d}) for d in DIRECTIONS}


@dataclass
class Episode:
    """One finished episode: the anchor state before each move, the move taken, the cell after it."""

    task_id: str
    states: list[str] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    cells: list[tuple[int, int]] = field(default_factory=list)  # cells[0] is the start, then one per move
    reward: float = 0.0

    @property
    def moves(self) -> int:
        return len(self.actions)


def softmax(logits: np.ndarray) -> np.ndarray:
    """π = exp(θ − max θ) / Σ exp(θ − max θ), along the last axis."""
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def run_episode(env: GridWorldEnv, task: dict[str, Any], table: dict[str, np.ndarray],
                rng: np.random.Generator) -> Episode:
    """Sample moves from π(· | s) = softmax(table[s]) until the episode ends (goal, hole or turn limit).

    Unseen states start at logits 0 (uniform). The moves go through `env.step` as the model's tool calls
    would, so the environment's rules, its turn limit and its verifier are the ones the LLM meets.
    """
    env.reset(task)
    state = env.state_key()
    episode = Episode(task["id"], cells=[tuple(task["start"])])
    while True:
        probs = softmax(table.setdefault(state, np.zeros(len(DIRECTIONS))))
        action = int(rng.choice(len(DIRECTIONS), p=probs))
        episode.states.append(state)
        episode.actions.append(action)
        result = env.step(_ACTION_TEXT[DIRECTIONS[action]])
        episode.cells.append(env.position)
        if result.done:
            episode.reward = result.reward
            return episode
        state = env.state_key()


def path_rewards(
    episode: Episode, task: dict[str, Any], *, by: str = "path", size: float = 0.1
) -> list[float]:
    """One path-shaping reward per move: +size if the move brought the agent closer to the goal, −size if
    farther, 0 if neither (a bump into the wall). (Not `rewards.process_rewards`, the trainer's rule for
    malformed actions and tool errors: a gridworld move is always well formed.)

    by="path": distance = fewest moves around the holes and walls; aligned with the task, since a move
    that lowers it is a move of some shortest path. by="line": distance = |Δrow| + |Δcol|, which ignores
    them; it is misaligned: it can pay a step toward the goal that walks into a hole or a dead end.
    Stepping into a hole counts as "farther" with by="path" (the hole has no path distance). The distance
    is `envs.gridworld.goal_distance` and the rule `rewards.distance_reward`, which the LLM trainer's
    gridworld rules (`rewards.path_distance_turn_rewards`, `line_distance_turn_rewards`) read too.
    """
    goal = tuple(task["goal"])
    distances = [goal_distance(task["grid"], goal, cell, by) for cell in episode.cells]
    return [distance_reward(before, after, size) for before, after in zip(distances, distances[1:])]


def credit_inputs(
    episodes: Sequence[Episode],
    tasks: dict[str, dict[str, Any]],
    *,
    process: str | None = None,
    values: dict[str, float] | None = None,
) -> credit.CreditInputs:
    """The numbers `credit.advantages` reads, for tabular episodes (an Episode is not a Trajectory):

        group_ids, traj_ids   the episode's task (its map), its index
        rewards               R: 1 at the goal, else 0
        step_rewards          0 on every move, R on the last (the environment's own rewards)
        anchors               the anchor state before each move (GiGPO's step groups)
        turn_rewards          `path_rewards(by=process)` per move, or 0 on every move with process=None
        values                V(s) of the state before each move (0 for a state the critic never saw)
    """
    values = values or {}
    return credit.CreditInputs(
        group_ids=[ep.task_id for ep in episodes], traj_ids=list(range(len(episodes))),
        rewards=[float(ep.reward) for ep in episodes],
        step_rewards=[[0.0] * (ep.moves - 1) + [float(ep.reward)] for ep in episodes],
        anchors=[list(ep.states) for ep in episodes],
        turn_rewards=[path_rewards(ep, tasks[ep.task_id], by=process) if process else [0.0] * ep.moves
                      for ep in episodes],
        values=[[values.get(s, 0.0) for s in ep.states] for ep in episodes])


def episode_credit(method: str, episodes: Sequence[Episode], tasks: dict[str, dict[str, Any]], *,
                   process: str | None = None, values: dict[str, float] | None = None,
                   **options: Any) -> credit.CreditResult:
    """Per-move advantages of `method` through `credit.advantages`, the trainer's one dispatch: the same
    maths and the same defaults (options: the method's own, named as `credit` names them, e.g. gamma,
    turn_weight, gae_gamma, gae_lambda). The groups the trainer's update would skip
    (`credit.groups_to_train`) get advantage 0 on every move, which is what skipping them does to a
    tabular policy-gradient step."""
    inputs = credit_inputs(episodes, tasks, process=process, values=values)
    result = credit.advantages(method, inputs, **options)
    trained = set(credit.groups_to_train(method, inputs, result))
    result.advantages = [a if g in trained else torch.zeros_like(a)
                         for a, g in zip(result.advantages, inputs.group_ids)]
    return result


def row_advantages(method: str, episodes: Sequence[Episode], tasks: dict[str, dict[str, Any]], *,
                   process: str | None = None, values: dict[str, float] | None = None,
                   **options: Any) -> np.ndarray:
    """One advantage per move row (episodes concatenated in order): `episode_credit` flattened.

    outcome     R normalised within the task's group, on every move (GRPO)
    gigpo       + ω · step advantage over moves made from the same state (γ = 0.95)
    turn        outcome + turn_weight · turn-level advantage of the path rewards (`process`)
    turn_dense  the same advantages, and groups whose rollouts all got one reward still train
    critic      GAE(γ = 1, λ = 0.95) with V(s) from the table `values`
    reinforce   the return of each move (γ = 1), no baseline
    """
    result = episode_credit(method, episodes, tasks, process=process, values=values, **options)
    return torch.cat(result.advantages).numpy()


def _policy_gradient_step(table: dict[str, np.ndarray], episodes: Sequence[Episode], advantages: np.ndarray,
                          lr: float) -> None:
    """θ_s += lr/n · Σ A · (onehot(a) − π(·|s)), with π taken before the update (one on-policy step)."""
    grads: dict[str, np.ndarray] = {}
    rows = ((s, a) for ep in episodes for s, a in zip(ep.states, ep.actions))
    for (state, action), adv in zip(rows, advantages):
        g = grads.setdefault(state, np.zeros(len(DIRECTIONS)))
        onehot = np.zeros(len(DIRECTIONS))
        onehot[action] = 1.0
        g += adv * (onehot - softmax(table[state]))
    for state, g in grads.items():
        table[state] += lr * g / len(episodes)


def _fit_values(
    values: dict[str, float], episodes: Sequence[Episode], returns: Sequence[Any], lr: float
) -> None:
    """V(s) ← V(s) + lr · (return_t − V(s)) for every visit: a tabular critic regressed on the value targets
    the credit method returns (the trainer's value-loss targets, `CreditResult.returns`)."""
    for ep, targets in zip(episodes, returns):
        for state, target in zip(ep.states, targets):
            v = values.get(state, 0.0)
            values[state] = v + lr * (float(target) - v)


def train_table(
    method: str,
    tasks: Sequence[dict[str, Any]],
    *,
    seed: int,
    updates: int = 60,
    group_size: int = 8,
    lr: float = 8.0,
    process: str | None = None,
    value_lr: float = 0.1,
    **options: Any,
) -> list[dict[str, float]]:
    """Train one table from uniform logits with `method` for `updates` updates; one row of metrics per update.

    Each update samples `group_size` episodes per task (the tasks are the maps), computes the
    advantages of every move with `episode_credit` (the credit method's own options, the trainer's defaults
    unless given in `options`; `process`: the path rewards that turn methods read) and takes one
    policy-gradient step. A method that learns values (the critic) fits V after the step on the same
    episodes, toward the returns the method gives. The metrics of update k describe the episodes sampled
    with the table as it was before update k: success rate, mean moves of the successful episodes (NaN
    when none), the variance of the advantages, and the share of move rows whose advantage is 0 (no signal).
    """
    learns_values = "values" in credit.credit_method_named(method).needs
    rng = np.random.default_rng(seed)
    env = GridWorldEnv()
    by_id = {t["id"]: t for t in tasks}
    table: dict[str, np.ndarray] = {}
    values: dict[str, float] = {}
    history = []
    for update in range(updates):
        episodes = [run_episode(env, task, table, rng) for task in tasks for _ in range(group_size)]
        result = episode_credit(method, episodes, by_id, process=process, values=values, **options)
        adv = torch.cat(result.advantages).numpy()
        wins = [ep.moves for ep in episodes if ep.reward > 0]
        history.append(
            {
                "update": update,
                "success": len(wins) / len(episodes),
                "moves_when_solved": float(np.mean(wins)) if wins else math.nan,
                "advantage_var": float(np.var(adv)),
                "zero_share": float(np.mean(np.abs(adv) < 1e-9)),
            }
        )
        _policy_gradient_step(table, episodes, adv, lr)
        if learns_values:
            _fit_values(values, episodes, result.returns, value_lr)
    return history


def pick_maps(tasks: Sequence[dict[str, Any]], size: int, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """`n` maps of side `size` drawn (seeded) from `tasks`."""
    same = [t for t in tasks if t["size"] == size]
    if len(same) < n:
        raise ValueError(f"only {len(same)} maps of size {size}; asked for {n}")
    return random.Random(seed).sample(same, n)


def paired_test(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Paired comparison over seeds: d_i = a_i − b_i; mean d, its 95% t interval, and the two-sided
    p-value of the paired t-test (H0: mean d = 0). NaN pairs are dropped."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    keep = ~np.isnan(a - b)
    a, b = a[keep], b[keep]
    d, n = a - b, int(keep.sum())
    if n < 2:
        raise ValueError("a paired test needs at least two seeds with both values")
    mean, sem = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n))
    half = float(stats.t.ppf(0.975, n - 1)) * sem
    p = float(stats.ttest_rel(a, b).pvalue) if sem > 0 else (1.0 if mean == 0 else 0.0)
    return {"mean_diff": mean, "low": mean - half, "high": mean + half, "p": p, "n": n}


def window_mean(history: Sequence[dict[str, float]], key: str, start: int, stop: int | None = None) -> float:
    """Mean of `key` over updates [start, stop), ignoring NaN (for "success over updates 151-200")."""
    vals = np.array([row[key] for row in history[start:stop]], float)
    return float(np.nanmean(vals)) if np.any(~np.isnan(vals)) else math.nan
