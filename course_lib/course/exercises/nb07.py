"""The exercise checks of notebook 07, turn-level rewards (`notebooks/07_turn_rewards.ipynb`):
check_turn_advantages (the key idea: turn advantages without the length bias), check_repeat_penalty,
check_pooled_turn_part, check_mean_future_rewards.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_turn_advantages(fn: Any) -> Any:
    """Notebook 07: `fn(turn_rewards, outcome_rewards, group_ids, traj_ids, weight, gamma, eps) -> [N]`,
    A(τ, t) = A_O(τ) + w·A_T(τ, t) with A_T from the discount-weighted mean of the turn rewards from t on,
    compared at the same turn index."""
    return graded(fn, "my_turn_advantages",
                  "A_O from R(τ) over each group's trajectories; Ḡ_t = the discount-weighted mean of r_t, "
                  "r_{t+1}, ... within τ; A_T = Ḡ_t normalised over the group's rows at the same turn index; "
                  "A = A_O + weight·A_T.",
                  _grade_turn_advantages)


# (group, rollout, turn rewards, verifier reward R). Rollout q0 is long, every turn scored +0.1, and failed;
# q3 and p1 are short; turn 3 of group q and turn 2 of group p are reached by one rollout each.
_TURN_EPISODES = [
    ("q", "q0", [0.1, 0.1, 0.1, 0.1], 0.0),
    ("q", "q1", [0.0, 0.1], 1.0),
    ("p", "p0", [-0.1, 0.0, 0.1], 1.0),
    ("q", "q2", [0.1, -0.1, 0.0], 1.0),
    ("p", "p1", [0.0, 0.0], 0.0),
    ("q", "q3", [0.0], 0.0),
]
_WEIGHT, _TURN_GAMMA, _TURN_EPS = 0.3, 0.5, 1e-4  # not the defaults: an answer that ignores them shows it


def _turn_rows() -> tuple[list[float], list[float], list[str], list[str], list[int]]:
    """The batch as flat rows: turn rewards, outcome rewards, group ids, trajectory ids, turn index."""
    rows = [(r, outcome, g, tau, t) for g, tau, rewards, outcome in _TURN_EPISODES
            for t, r in enumerate(rewards)]
    return tuple(list(column) for column in zip(*rows))


def _turn_parts(gamma: float, *, future: str = "mean", compare: str = "turn",
                outcome_over: str = "trajectories"):
    """(A_O, A_T) per row, computed the right way or with one of the mistakes the check names.

    future: "mean" (right), "sum" (the length bias), "past" (the return run forwards: turns 0..t),
    "after" (turns t+1.. only), "shifted" (turn t paired with r_{t+1}). compare: "turn" (right), "group"
    (every row of the group pooled) or "index" (the turn index alone, across groups). outcome_over:
    "trajectories" (right) or "rows" (one R per turn)."""
    import torch

    from course_lib.credit import outcome_advantages

    rewards, outcomes, groups, trajs, turns = _turn_rows()
    summary = torch.zeros(len(rewards))
    for tau in dict.fromkeys(trajs):
        rows = [i for i, x in enumerate(trajs) if x == tau]
        r = [rewards[i] for i in rows]
        if future == "shifted":
            r = r[1:] + [0.0]
        for t, i in enumerate(rows):
            ks = range(0, t + 1) if future == "past" else range(t + 1 if future == "after" else t, len(r))
            weights = [gamma ** abs(k - t) for k in ks]
            total = sum(w * r[k] for w, k in zip(weights, ks))
            summary[i] = total if future == "sum" else total / sum(weights) if weights else 0.0
    if outcome_over == "trajectories":
        first = {tau: trajs.index(tau) for tau in dict.fromkeys(trajs)}
        per_traj = outcome_advantages([outcomes[i] for i in first.values()],
                                      [groups[i] for i in first.values()], eps=_TURN_EPS)
        outcome = torch.stack([per_traj[list(first).index(tau)] for tau in trajs])
    else:  # every turn counts: a long trajectory weighs more
        outcome = outcome_advantages(outcomes, groups, eps=_TURN_EPS)
    keys = {"turn": list(zip(groups, turns)), "group": groups, "index": turns}[compare]
    return outcome, outcome_advantages(summary, keys, eps=_TURN_EPS)


def _turn_mistakes() -> list[tuple[str, Any]]:
    """(the hint, the advantages that mistake gives) for each typical mistake."""
    outcome, turn = _turn_parts(_TURN_GAMMA)

    def advantages(parts):
        return parts[0] + _WEIGHT * parts[1]

    use_gamma = (f"your Ḡ_t ignores the gamma argument (the check passed γ = {_TURN_GAMMA}): weigh r_k by "
                 "γ^(k−t)")
    return [
        ("the length bias: you summed the turn rewards from t on. Rollout q0's four turns of +0.1 then "
         "collect more than any shorter rollout, however good each turn was: divide the discounted sum by "
         "the sum of its weights, Σ γ^(k−t)", advantages(_turn_parts(_TURN_GAMMA, future="sum"))),
        ("the length bias: you compared each turn with every turn of its group. Early turns have more turns "
         "after them; compare Ḡ_t only with the group's rows at the same turn index t",
         advantages(_turn_parts(_TURN_GAMMA, compare="group"))),
        ("you compared turn t with the turns t of every group in the batch: rollouts of other tasks answer "
         "other questions. Compare Ḡ_t with the rows of the same group at the same turn index",
         advantages(_turn_parts(_TURN_GAMMA, compare="index"))),
        ("your outcome part counts a trajectory once per turn, so long episodes weigh more in the group's "
         "mean and std: take one R(τ) per trajectory, normalise over the group's trajectories, copy it onto "
         "the turns", advantages(_turn_parts(_TURN_GAMMA, outcome_over="rows"))),
        ("your Ḡ_t looks backwards, over turns 0..t. A turn can only change what comes after it: average "
         "r_t, r_{t+1}, ..., walking from the last turn back",
         advantages(_turn_parts(_TURN_GAMMA, future="past"))),
        ("off by one: your Ḡ_t leaves out r_t. Turn t's own reward is part of what it is credited for: "
         "average r_t, r_{t+1}, ...", advantages(_turn_parts(_TURN_GAMMA, future="after"))),
        ("off by one: your turn t is paired with r_{t+1}. The i-th reward of a trajectory belongs to its "
         "i-th turn", advantages(_turn_parts(_TURN_GAMMA, future="shifted"))),
        (use_gamma, advantages(_turn_parts(1.0))),
        (use_gamma, advantages(_turn_parts(0.95))),
        ("your advantages are A_O + A_T: multiply the turn part by the weight argument", outcome + turn),
        ("your advantages are A_O + 0.5·A_T: use the weight argument, not its default",
         outcome + 0.5 * turn),
        ("your advantages are w·A_O + A_T: the weight scales the turn part; the outcome part keeps the "
         "verifier in charge at full strength", _WEIGHT * outcome + turn),
        ("your advantages are w·A_T alone: the outcome part A_O is missing, and a turn reward alone can be "
         "gamed", _WEIGHT * turn),
        ("your advantages are A_O alone: the turn part w·A_T is missing", outcome),
        ("your advantages have the wrong sign: a reward above its group's mean must give a positive "
         "advantage", -(outcome + _WEIGHT * turn)),
    ]


def _grade_turn_advantages(fn) -> str:
    import torch

    from course_lib.credit import turn_advantages

    rewards, outcomes, groups, trajs, turns = _turn_rows()
    expected = turn_advantages(rewards, outcomes, groups, trajs, weight=_WEIGHT, gamma=_TURN_GAMMA,
                               eps=_TURN_EPS)
    got = torch.as_tensor(fn(list(rewards), list(outcomes), list(groups), list(trajs), _WEIGHT, _TURN_GAMMA,
                             _TURN_EPS), dtype=torch.float32)
    if got.shape != expected.shape:
        raise ExerciseFailed(f"got shape {tuple(got.shape)}, expected {tuple(expected.shape)}: one advantage "
                             "per row (turn), in the order of the rows")
    if torch.allclose(got, expected, atol=1e-4):
        return ("the long rollout that scored +0.1 on every turn gains nothing from its length, and each "
                "turn is compared with the other rollouts' turns at the same index.")
    label = [f"{tau} t={t} (group {g})" for g, tau, t in zip(groups, trajs, turns)]
    broken = [label[i] for i in range(len(got)) if not torch.isfinite(got[i])]
    if broken:
        raise ExerciseFailed(f"rows {', '.join(broken)} got nan or inf. A turn index that only one rollout "
                             "of the group reached has no std: nothing to compare, so its A_T is 0; decide "
                             "that before dividing")
    for hint, wrong in _turn_mistakes():
        if torch.allclose(got, wrong, atol=1e-4):
            raise ExerciseFailed(hint)
    row = next(i for i in range(len(got)) if abs(got[i] - expected[i]) > 1e-4)
    raise ExerciseFailed(f"row {label[row]} got {float(got[row]):.4f}, expected {float(expected[row]):.4f} "
                         f"(weight = {_WEIGHT}, γ = {_TURN_GAMMA}). Call your function with weight=0 to see "
                         "the outcome part alone, and compare with course_lib.credit.turn_advantages")


def _scripted_trajectory(actions: list[str], observations: list[str]):
    """A Trajectory with steps only (no tokens): enough for functions that read actions and observations."""
    from course_lib.envs.search_qa import SearchQAEnv
    from course_lib.protocol import parse_action
    from course_lib.trajectory import Step, Trajectory

    steps = [
        Step(
            action_ids=[],
            action_text=a,
            logprobs=[],
            observation_text=o,
            info={"action_kind": parse_action(a, SearchQAEnv.tools).kind},
        )
        for a, o in zip(actions, observations)
    ]
    return Trajectory(task_id="t", group_id="g", traj_id="x", messages=[], prompt_ids=[], steps=steps)


def check_repeat_penalty(fn: Any) -> Any:
    """Notebook 07: `fn(trajectory) -> list[float]`, −0.1 for malformed/tool-error turns and repeated
    queries."""
    return graded(
        fn,
        "repeat_penalty",
        "return one reward per turn: −0.1 for a malformed action, a tool error or a repeated query, else 0.",
        _grade_repeat_penalty,
    )


def _grade_repeat_penalty(fn) -> str:
    from course_lib.protocol import format_answer, format_tool_call

    def search(q: str) -> str:
        return format_tool_call("search", {"query": q})

    cases = [
        ([search("Kalo"), search("Orvane"), format_answer("Orvane")], ["r1", "r2", ""], [0.0, 0.0, 0.0]),
        ([search("Kalo"), search("  kalo "), format_answer("x")], ["r1", "r1", ""], [0.0, -0.1, 0.0]),
        (["search Kalo", search("Kalo"), search("Kalo"), search("Kalo")], ["Error: malformed", "r", "r", "r"],
         [-0.1, 0.0, -0.1, -0.1]),
        ([search("Kalo"), search("Orvane")], ["r", "Error: the query is empty"], [0.0, -0.1]),
    ]
    for actions, observations, expected in cases:
        got = [float(x) for x in fn(_scripted_trajectory(actions, observations))]
        if got != expected:
            raise ExerciseFailed(
                f"for actions {actions} you gave {got}, expected {expected}. A repeat is the same "
                "query after strip().lower(); the first occurrence is not penalised; a malformed "
                "action or an observation starting with 'Error' also gets −0.1."
            )
    return "a repeated search now costs as much as a broken one, and no wording can avoid it."


def check_pooled_turn_part(fn: Any) -> Any:
    """Notebook 07: `fn(turn_rewards, group_ids, traj_ids, gamma) -> [N]`, A_T normalised over the whole
    group."""
    return graded(fn, "pooled_turn_part",
                  "normalise the discounted returns over all rows of each group.",
                  _grade_pooled_turn_part)


def _grade_pooled_turn_part(fn) -> str:
    import torch

    from course_lib.credit import discounted_returns, outcome_advantages, turn_advantages

    # group "a": two identical 3-turn rollouts, a judge gives every turn 0.5; group "b": two 1-turn rollouts
    turn_rewards = [0.5] * 6 + [0.0, 0.5]
    group_ids = ["a"] * 6 + ["b"] * 2
    traj_ids = ["x", "x", "x", "y", "y", "y", "u", "v"]
    returns = discounted_returns(turn_rewards, list(zip(group_ids, traj_ids)), gamma=1.0)
    expected = outcome_advantages(
        returns, group_ids, scale="group", eps=1e-4
    )  # (G − group mean) / (std + 1e-4)
    got = torch.as_tensor(fn(turn_rewards, group_ids, traj_ids, gamma=1.0), dtype=torch.float32)
    if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-4):
        raise ExerciseFailed(
            f"you gave {[round(float(x), 3) for x in got]}, expected "
            f"{[round(float(x), 3) for x in expected]}. G_t = Σ_k γ^(k−t) r_k within each "
            "trajectory, then (G − group mean) / (unbiased group std + 1e-4)."
        )
    fair = turn_advantages(turn_rewards, [0.0] * 8, group_ids, traj_ids, weight=1.0)
    print("Two identical rollouts, every turn scored 0.5, yet pooled A_T =",
          [round(float(x), 2) for x in got[:6]])
    print("Compared at the same turn index, A_T =", [round(float(x), 2) for x in fair[:6]])
    return ("pooling ranks turns by how many turns are left after them; comparing at the same turn index "
            "does not.")


def check_mean_future_rewards(fn: Any) -> Any:
    """Notebook 07: `fn(turn_rewards, gamma) -> [T]`, Ḡ_t = Σ_{k≥t} γ^{k−t} r_k / Σ_{k≥t} γ^{k−t} for one
    trajectory."""
    return graded(
        fn,
        "mean_future_rewards",
        "return, for every turn t, the discount-weighted mean of the turn rewards from t to the end.",
        _grade_mean_future_rewards,
    )


def _grade_mean_future_rewards(fn) -> str:
    cases = [([0.1, 0.0, 0.1], 1.0), ([0.0, -0.1, 0.1, 0.1], 0.5), ([0.3], 0.9)]
    for rewards, gamma in cases:
        expected = [sum(gamma ** (k - t) * rewards[k] for k in range(t, len(rewards)))
                    / sum(gamma ** (k - t) for k in range(t, len(rewards))) for t in range(len(rewards))]
        got = [float(x) for x in fn(rewards, gamma)]
        if len(got) != len(expected) or any(abs(g - e) > 1e-6 for g, e in zip(got, expected)):
            raise ExerciseFailed(
                f"for r = {rewards}, γ = {gamma} you gave {[round(g, 4) for g in got]}, expected "
                f"{[round(e, 4) for e in expected]}. Divide the discounted sum Σ γ^(k−t) r_k by "
                "the sum of its weights Σ γ^(k−t), so that more turns left do not mean more credit."
            )
    return "a mean does not grow with the number of turns left: a long episode no longer wins by length."
