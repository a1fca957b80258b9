"""Environments: task + sandbox + verifier.

`make_env(name)` builds one, `load_tasks(name, split)` reads its task set from `data/` (written by
the generators of `course_lib.tasks`, which import the environments, never the reverse), and
`expert_policy(env)` gives the next action of a policy that solves the current task.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from course_lib import (
    data_dir,  # where task data lives ($COURSE_DATA, else data/): defined once, re-exported here
)
from course_lib.envs.base import Environment, StepResult, ToolError

# name -> "module:Class"; imported on first use so one environment's extra needs never block another.
ENVIRONMENTS = {
    "lookup": "course_lib.envs.lookup:LookupEnv",
    "search_qa": "course_lib.envs.search_qa:SearchQAEnv",
    "code_fix": "course_lib.envs.code_fix:CodeFixEnv",
    "code_fix_naive": "course_lib.envs.code_fix:NaiveCodeFixEnv",
    "terminal": "course_lib.envs.terminal:TerminalEnv",
    "data_analysis": "course_lib.envs.data_analysis:DataAnalysisEnv",
    "gridworld": "course_lib.envs.gridworld:GridWorldEnv",
    "summarize": "course_lib.envs.summarize:SummarizeEnv",  # no verifier: only a judge can reward it
}


def make_env(name: str, **options: Any) -> Environment:
    """Build an environment by name, e.g. `make_env("gridworld", max_turns=12)`."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"environment {name!r} does not exist; environments are: {', '.join(ENVIRONMENTS)}")
    module, cls = ENVIRONMENTS[name].split(":")
    return getattr(importlib.import_module(module), cls)(**options)


def load_tasks(name: str, split: str = "train", limit: int | None = None) -> list[dict[str, Any]]:
    """The task set of environment `name` for `split` ("train" or "test"), read from data/<name>/<split>.jsonl."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"environment {name!r} does not exist; environments are: {', '.join(ENVIRONMENTS)}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    base = name.removesuffix("_naive")
    path = data_dir() / base / f"{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; generate the task data with `python -m course_lib.tasks`")
    with path.open() as f:
        tasks = [json.loads(line) for line in f if line.strip()]
    return tasks[:limit]


def expert_policy(env: Environment) -> str:
    """The next action text of the environment's expert for its current task."""
    return env.expert_action()


__all__ = ["Environment", "StepResult", "ToolError", "make_env", "load_tasks", "expert_policy", "ENVIRONMENTS", "data_dir"]
