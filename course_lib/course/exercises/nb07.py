"""The exercise checks of notebook 07, turn-level rewards (`notebooks/07_turn_rewards.ipynb`):
check_repeat_penalty, check_pooled_turn_part, check_mean_future_rewards.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


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
