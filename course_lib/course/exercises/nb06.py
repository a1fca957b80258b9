"""The exercise checks of notebook 06, GiGPO (`notebooks/06_gigpo.ipynb`): check_gigpo (the key idea:
anchor-state step groups and step advantages), check_discounted_returns, check_shared_step_fraction,
check_omega_for_grpo.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_gigpo(fn: Any) -> Any:
    """Notebook 06: `fn(step_rewards, anchors, group_ids, traj_ids, gamma, omega, eps) -> tensor [N]`, GiGPO's
    advantage of every step: A_E(τ) + ω·A_S(t), the step part compared within anchor-state step groups."""
    return graded(fn, "my_gigpo",
                  "A_E from R(τ) = Σ r_t over each task's trajectories, A_S from G_t = r_t + γ·G_{t+1} over "
                  "the steps of the same task and the same anchor, and A = A_E + ω·A_S.",
                  _grade_gigpo)


# (task, rollout, anchors, step rewards). Tasks A and B name their states alike, and task C has one rollout.
# A3 bumps into a wall (−0.1) and stays on y; B1 reaches x for a partial reward.
_EPISODES = [
    ("A", "A0", ["s", "x"], [0.0, 1.0]),
    ("B", "B0", ["s", "z"], [0.0, 0.0]),
    ("A", "A1", ["s", "y", "x"], [0.0, 0.0, 1.0]),
    ("A", "A2", ["s", "y"], [0.0, 0.0]),
    ("B", "B1", ["s", "x"], [-0.1, 0.5]),
    ("A", "A3", ["s", "y", "y", "x"], [0.0, -0.1, 0.0, 1.0]),
    ("C", "C0", ["s"], [1.0]),
    ("B", "B2", ["s", "w"], [0.0, 0.0]),
]
_GAMMA, _OMEGA, _EPS = 0.9, 0.5, 1e-6  # not the defaults, so that an answer which ignores them shows it


def _gigpo_rows() -> tuple[list[float], list[str], list[str], list[str], list[int]]:
    """The batch as flat rows: step rewards, anchors, group ids, trajectory ids, turn index."""
    rows = [(r, a, g, tau, t) for g, tau, anchors, rewards in _EPISODES
            for t, (a, r) in enumerate(zip(anchors, rewards))]
    return tuple(list(column) for column in zip(*rows))


def _normalised(values, keys, eps: float, correction: int = 1):
    """(x − mean) / (std + eps) within each key, 0 for a key of one row or of equal values."""
    import torch

    out = torch.zeros_like(values)
    for key in dict.fromkeys(keys):
        rows = [i for i, k in enumerate(keys) if k == key]
        x = values[rows]
        if len(rows) > 1 and not torch.all(x == x[0]):
            out[rows] = (x - x.mean()) / (x.std(correction=correction) + eps)
    return out


def _gigpo_parts(gamma: float, *, step_key: str = "state", step_return: str = "discounted",
                 episode_over: str = "trajectories", correction: int = 1):
    """(A_E, A_S) per row, computed the right way or with one of the mistakes the check names."""
    import torch

    rewards, anchors, groups, trajs, turns = _gigpo_rows()
    r = torch.tensor(rewards)
    total = {tau: sum(x for x, t in zip(rewards, trajs) if t == tau) for tau in dict.fromkeys(trajs)}
    returns = torch.zeros_like(r)
    for tau in total:
        future = 0.0
        for i in reversed([i for i, t in enumerate(trajs) if t == tau]):
            future = rewards[i] + gamma * future
            returns[i] = {"discounted": future, "episode": total[tau], "immediate": rewards[i]}[step_return]
    if episode_over == "trajectories":
        task_of = dict(zip(trajs, groups))
        per_traj = _normalised(torch.tensor(list(total.values())), [task_of[tau] for tau in total], _EPS,
                               correction)
        episode = torch.stack([per_traj[list(total).index(tau)] for tau in trajs])
    else:  # every row counts: a long trajectory weighs more
        episode = _normalised(torch.tensor([total[tau] for tau in trajs]), groups, _EPS, correction)
    keys = {"state": list(zip(groups, anchors)), "anchor": anchors, "task": groups,
            "turn": list(zip(groups, turns))}[step_key]
    return episode, _normalised(returns, keys, _EPS, correction)


def _gigpo_mistakes() -> list[tuple[str, Any]]:
    """(the hint, the advantages that mistake gives) for each typical mistake, at γ = _GAMMA, ω = _OMEGA."""
    episode, step = _gigpo_parts(_GAMMA)

    def advantages(parts):
        return parts[0] + _OMEGA * parts[1]

    same_state = ("compare a step only with the steps of the same task from the same state: key the step "
                  "groups by (group id, anchor). ")
    return [
        (same_state + "You grouped them by turn index: two rollouts at turn 2 can stand in different "
         "states, and one state can be reached at different turns",
         advantages(_gigpo_parts(_GAMMA, step_key="turn"))),
        (same_state + "You keyed them by the anchor alone: tasks A and B both have a state named 's', yet "
         "they are different tasks", advantages(_gigpo_parts(_GAMMA, step_key="anchor"))),
        (same_state + "You compared every step of a task with all its other steps, which ranks a step by how "
         "close it is to the end, not by what it did", advantages(_gigpo_parts(_GAMMA, step_key="task"))),
        ("your step returns are not discounted: G_t = r_t + γ·G_{t+1}, so that reaching the goal in fewer "
         "steps is worth more", advantages(_gigpo_parts(1.0))),
        (f"your step returns use γ = 0.95, but the check passed gamma = {_GAMMA}: use the argument",
         advantages(_gigpo_parts(0.95))),
        ("you gave every step its trajectory's return R(τ): the step part compares G_t = r_t + γ·G_{t+1}, "
         "what followed this step, discounted", advantages(_gigpo_parts(_GAMMA, step_return="episode"))),
        ("you compared the steps' own rewards r_t: the step part compares the discounted return "
         "G_t = r_t + γ·G_{t+1}, what followed the step, not only what it earned at once",
         advantages(_gigpo_parts(_GAMMA, step_return="immediate"))),
        ("your episode part weighs a trajectory by its number of steps: compute one R(τ) per trajectory, "
         "normalise it over the task's trajectories, then copy it onto the trajectory's steps",
         advantages(_gigpo_parts(_GAMMA, episode_over="rows"))),
        ("you divided by the biased std (over N): use torch's default, the unbiased one (over N − 1)",
         advantages(_gigpo_parts(_GAMMA, correction=0))),
        ("your advantages are A_E + A_S: multiply the step part by the omega argument", episode + step),
        ("your advantages are ω·A_E + A_S: ω scales the step part, not the episode part",
         _OMEGA * episode + step),
        ("your advantages are (1 − ω)·A_E + ω·A_S: GiGPO adds the two parts, A_E + ω·A_S",
         (1 - _OMEGA) * episode + _OMEGA * step),
        ("your advantages are ω·A_S alone: the episode part A_E is missing", _OMEGA * step),
        ("your advantages are A_E alone: the step part ω·A_S is missing", episode),
        ("your advantages have the wrong sign: a return above its group's mean must give a positive "
         "advantage", -(episode + _OMEGA * step)),
    ]


def _grade_gigpo(fn) -> str:
    import torch

    from course_lib.credit import gigpo_advantages

    rewards, anchors, groups, trajs, turns = _gigpo_rows()
    expected = gigpo_advantages(rewards, anchors, groups, trajs, gamma=_GAMMA, omega=_OMEGA, eps=_EPS)
    got = torch.as_tensor(fn(list(rewards), list(anchors), list(groups), list(trajs), _GAMMA, _OMEGA, _EPS),
                          dtype=torch.float32)
    if got.shape != expected.shape:
        raise ExerciseFailed(f"got shape {tuple(got.shape)}, expected {tuple(expected.shape)}: one advantage "
                             "per row (step), in the order of the rows")
    if torch.allclose(got, expected, atol=1e-4):
        return ("at state y, the move that went on to the goal beats the one that fell in the hole, compared "
                "within task A only; a step alone in its state keeps the episode part.")
    label = [f"{tau} t={t} (task {g}, state {a!r})" for g, tau, a, t in zip(groups, trajs, anchors, turns)]
    broken = [label[i] for i in range(len(got)) if not torch.isfinite(got[i])]
    if broken:
        raise ExerciseFailed(f"rows {', '.join(broken)} got nan or inf. A step group of one row (or a task "
                             "with one rollout) has no std: it has nothing to compare, so its part is 0; "
                             "decide that before dividing")
    for hint, wrong in _gigpo_mistakes():
        if torch.allclose(got, wrong, atol=1e-4):
            raise ExerciseFailed(hint)
    row = next(i for i in range(len(got)) if abs(got[i] - expected[i]) > 1e-4)
    raise ExerciseFailed(f"row {label[row]} got {float(got[row]):.4f}, expected {float(expected[row]):.4f} "
                         f"(γ = {_GAMMA}, ω = {_OMEGA}). Call your function with omega=0 to see the episode "
                         "part alone, and compare it with course_lib.credit.gigpo_advantages(..., omega=0)")


def check_discounted_returns(fn: Any) -> Any:
    """Notebook 06: `fn(rewards, gamma) -> list`, G_t = r_t + γ·G_{t+1} for one trajectory."""
    return graded(fn, "discounted",
                  "walk backwards from the last step with G = r_t + γ·G.",
                  _grade_discounted_returns)


def _grade_discounted_returns(fn) -> str:
    from course_lib.credit import discounted_returns

    for rewards, gamma in [([0, 0, 0, 1], 0.95), ([0, 0, 1], 0.5), ([-0.1, 0, 1], 0.9), ([1], 0.95)]:
        expected = discounted_returns(rewards, [0] * len(rewards), gamma=gamma).tolist()
        got = [float(x) for x in fn(rewards, gamma)]
        if len(got) != len(expected) or any(abs(g - e) > 1e-5 for g, e in zip(got, expected)):
            raise ExerciseFailed(f"for rewards {rewards}, γ={gamma} you gave {[round(g, 4) for g in got]}, "
                                 f"expected {[round(e, 4) for e in expected]}. Walk backwards from the last "
                                 "step: G = r_t + γ·G.")
    return "the same final reward is worth less the further a step is from it."


def check_shared_step_fraction(fn: Any) -> Any:
    """Notebook 06: `fn(anchors, group_ids) -> float`, the fraction of rows whose step group has ≥ 2 rows."""
    return graded(fn, "shared_step_fraction",
                  "return the share of rows whose (group id, anchor) occurs at least twice.",
                  _grade_shared_step_fraction)


def _grade_shared_step_fraction(fn) -> str:
    cases = [(["a", "b", "a", "c"], [0, 0, 0, 0], 0.5), (["a", "a", "a", "a"], [0, 0, 1, 1], 1.0),
             (["a", "b", "c"], [0, 0, 0], 0.0), (["a", "a", "b", "b", "c"], [0, 1, 0, 0, 0], 0.4)]
    for anchors, groups, expected in cases:
        got = fn(anchors, groups)
        if abs(float(got) - expected) > 1e-9:
            raise ExerciseFailed(
                f"for anchors {anchors} in groups {groups} you gave {got}, expected {expected}. "
                "Rows share a step group only when both the task (group id) and the anchor match."
            )
    return "a row in a step group of one gets no step-level signal."


def check_omega_for_grpo(omega: Any) -> Any:
    """Notebook 06: the ω that turns GiGPO into outcome-only credit on any input."""
    return graded(omega, "omega",
                  "set omega to the ω that makes gigpo_advantages equal outcome-only credit.",
                  _grade_omega_for_grpo)


def _grade_omega_for_grpo(omega: float) -> str:
    if float(omega) != 0.0:
        raise ExerciseFailed(
            f"ω = {omega} still adds ω·A_step. Which ω removes the step term whatever the anchors?"
        )
    return (
        "ω = 0 drops A_step; with the same normalisation, what remains is the episode-level GRPO advantage."
    )
