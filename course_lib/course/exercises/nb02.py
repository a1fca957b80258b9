"""The exercise checks of notebook 02, environments (`notebooks/02_environments.ipynb`): check_run_episode,
check_normalize_answer, check_verifier_reward.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_run_episode(fn: Any) -> Any:
    """Notebook 02: `fn(env, task, policy) -> reward` plays one episode to its end."""
    return graded(fn, "run_episode",
                  "reset the environment, step it with policy(env) until result.done, return result.reward.",
                  _grade_run_episode)


def _grade_run_episode(fn) -> str:
    from course_lib.envs import load_tasks, make_env
    from course_lib.protocol import format_answer, format_tool_call

    task = load_tasks("lookup", "test")[0]
    env = make_env("lookup", max_turns=3)
    policies = {
        "the expert": (lambda e: e.expert_action(), 1.0),
        "a guesser": (lambda e: format_answer("Nowhere"), 0.0),
        "a policy that never answers": (lambda e: format_tool_call("lookup", {"name": task["target"]}), 0.0),
    }
    for label, (policy, expected) in policies.items():
        got = fn(env, task, policy)
        if got is None or float(got) != expected:
            raise ExerciseFailed(
                f"with {label} your episode returned {got!r}, expected {expected}. Reset the "
                "environment, call step() until result.done, and return result.reward."
            )
    return "the same loop plays any policy; the turn limit ends episodes that never answer."


def check_normalize_answer(fn: Any) -> Any:
    """Notebook 02: `fn(text) -> str`, the search-QA answer normalisation."""
    return graded(fn, "normalize",
                  "lowercase, drop punctuation and the words a/an/the, join on single spaces.",
                  _grade_normalize_answer)


def _grade_normalize_answer(fn) -> str:
    from course_lib.envs.search_qa import normalize_answer

    for text in [
        "The Orrin Guild",
        "  port   aldis. ",
        "An Apple a day",
        "O'Neill-Varrow!",
        "1874",
        "THEATRE",
    ]:
        got, expected = fn(text), normalize_answer(text)
        if got != expected:
            raise ExerciseFailed(f"normalize({text!r}) gave {got!r}, expected {expected!r}. Lowercase, drop "
                                 "string.punctuation, remove whole-word a/an/the, join on single spaces.")
    return "your rule and the verifier's agree."


def check_verifier_reward(fn: Any) -> Any:
    """Notebook 02: `fn(answer, reference) -> float`, 1.0 when the normalised texts are equal, else 0.0."""
    return graded(
        fn,
        "verifier_reward",
        "return 1.0 when normalize(answer) == normalize(reference), else 0.0.",
        _grade_verifier_reward,
    )


def _grade_verifier_reward(fn) -> str:
    cases = [
        ("Port Aldis", 1.0, ""),
        ("the PORT aldis.", 1.0, "a right answer written differently"),
        ("not Port Aldis", 0.0, "a denial"),
        ("Port Aldis, Quenport or Jorvik", 0.0, "a list of guesses"),
        ("Quenport", 0.0, "a wrong answer"),
    ]
    for answer, expected, label in cases:
        got = fn(answer, "Port Aldis")
        if got is None or float(got) != expected:
            why = ("it pays for text that merely contains the reference" if expected == 0.0
                   else "it refuses a right answer that differs only in case, punctuation or articles")
            raise ExerciseFailed(
                f"for {label or 'the reference itself'} ({answer!r}) you gave {got}, expected "
                f"{expected}: {why}. Compare the whole normalised texts."
            )
    return "a denial and a list of guesses get 0, a right answer in other words gets 1."
