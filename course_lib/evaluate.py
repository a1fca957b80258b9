"""Held-out evaluation: greedy success rate on test tasks with a 95% Wilson interval (notebooks 01 to 11).

Judge agreement (how often a judge ranks a group as its verifier does) lives with the judge,
`course_lib.judge.quality.judge_agreement` (which the judge itself never imports).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from course_lib import wilson_interval
from course_lib.envs import load_tasks
from course_lib.models import load_policy
from course_lib.rollout import flag_rates, rollout
from course_lib.tasks import filter_tasks


def evaluate(model_or_path, env: str, split: str = "test", n_tasks: int = 32, *, tokenizer=None,
             tasks: list[dict] | None = None, task_filter: dict[str, Any] | None = None, max_turns: int = 4,
             max_new_tokens: int = 48, max_context: int = 2048, batch_size: int = 32, progress: bool = False,
             device: str | None = None) -> dict[str, float]:
    """Greedy success rate on held-out tasks (one episode each), with a 95% Wilson interval.

    model_or_path: a model (then pass `tokenizer`) or anything `load_policy` accepts.
    Returns {"success", "ci_low", "ci_high", "n", "outcomes", "mean_turns", "mean_turns_success"}:
    outcomes lists 1/0 per task in order (for paired comparisons of two models on the same tasks);
    mean_turns_success is None when no episode succeeded. Episode flags the env records (code_fix's
    "hacked", "hack_attempt") are added as rates (`rollout.flag_rates`).
    """
    if tasks is None:  # before the model: a bad name or filter fails in a second, not after loading it
        tasks = evaluation_tasks(env, split, n_tasks, task_filter)
    if isinstance(model_or_path, (str, Path)):
        model, tokenizer = load_policy(str(model_or_path), device=device)
    else:
        model = model_or_path
        if tokenizer is None:
            raise ValueError("pass tokenizer=... together with a model object")
    groups = rollout(model, tokenizer, env, tasks, group_size=1, max_turns=max_turns,
                     max_new_tokens=max_new_tokens, temperature=0.0, seed=0, max_context=max_context,
                     progress=progress, max_batch=batch_size)  # batch_size episodes decode at once
    episodes = [t for g in groups for t in g]
    wins = sum(t.success for t in episodes)
    low, high = wilson_interval(wins, len(tasks))
    won = [t.num_turns for t in episodes if t.success]
    return {"success": wins / max(1, len(tasks)), "ci_low": low, "ci_high": high, "n": len(tasks),
            "outcomes": [int(t.success) for t in episodes],
            "mean_turns": sum(t.num_turns for t in episodes) / max(1, len(episodes)),
            "mean_turns_success": sum(won) / len(won) if won else None, **flag_rates(episodes)}


def evaluation_tasks(env: str, split: str = "test", n_tasks: int = 32,
                     task_filter: dict[str, Any] | None = None) -> list[dict]:
    """The first `n_tasks` tasks of `split` that pass `task_filter`; a bad name, filter or size
    raises ValueError."""
    if n_tasks < 1:
        raise ValueError(f"n_tasks must be at least 1, got {n_tasks}")
    return filter_tasks(load_tasks(env, split), task_filter)[:n_tasks]
