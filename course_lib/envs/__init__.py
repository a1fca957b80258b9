"""Environments: task + sandbox + verifier.

`ENVIRONMENTS` is the one table of them: an `EnvSpec` per environment (its class, its task generator, its
data folder, its warm-start recipe, its turn limit, one line on what it is), in the order the course tours
them. Everything else reads it: `make_env(name)` builds one, `load_tasks(name, split)` reads its task set
from `data/` (written by the generators of `course_lib.tasks`, which import the environments, never the
reverse), `course_lib.warm_starts.course_warm_start(name)` trains its warm start, and `expert_policy(env)`
gives the next action of a policy that solves the current task. A new environment is its module, its task
generator (`course_lib.tasks.<name>`), its data and one entry here.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from typing import Any

from course_lib import (
    data_dir,  # where task data lives ($COURSE_DATA, else data/): defined once, re-exported here
)
from course_lib.envs.base import Environment, StepResult, ToolError


@dataclass(frozen=True)
class EnvSpec:
    """One environment, as the rest of the library finds it. Modules and functions are named as strings and
    imported on first use, so one environment's extra needs never block another and this table imports
    neither the environments nor their task generators (which import the environments)."""

    env_class: str  # "module:Class" of the environment
    generator: str | None  # its task generator module; None: it plays the tasks of `data`'s environment
    data: str  # its folder under data/ (`code_fix_naive` reads code_fix's tasks)
    description: str  # one line: what the agent does there
    # "module:function" (fast: bool, seed: int) -> the keywords of `sft.warm_start`; None: WARM_START's sizes
    warm_start: str | None = None
    rollout_turns: int | None = None  # max_turns of its rollouts in the judge warm start; None: DEFAULT_TURNS
    teaches_judge: bool = False  # its verified train tasks teach the judge (the judge warm start's default)
    light_judge_policy: bool = False  # the judge's groups come from a lighter full-size warm start of it


# The environments, in the order the course tours them.
ENVIRONMENTS: dict[str, EnvSpec] = {
    "lookup": EnvSpec("course_lib.envs.lookup:LookupEnv", "course_lib.tasks.lookup", "lookup",
                      "look a code name up in a private directory, then answer", rollout_turns=3,
                      light_judge_policy=True),
    "search_qa": EnvSpec("course_lib.envs.search_qa:SearchQAEnv", "course_lib.tasks.search_qa", "search_qa",
                         "search a fictional encyclopedia, one or two hops, and answer the question",
                         warm_start="course_lib.warm_starts:search_qa_warm_start_options", rollout_turns=4,
                         teaches_judge=True),
    # after search_qa: its tasks come from search_qa's questions
    "summarize": EnvSpec("course_lib.envs.summarize:SummarizeEnv", "course_lib.tasks.summarize", "summarize",
                         "search the encyclopedia and summarize it; no verifier: only a judge can reward it"),
    "code_fix": EnvSpec("course_lib.envs.code_fix:CodeFixEnv", "course_lib.tasks.code_fix", "code_fix",
                        "repair a bug in a small Python repository so that hidden tests pass"),
    "code_fix_naive": EnvSpec("course_lib.envs.code_fix:NaiveCodeFixEnv", None, "code_fix",
                              "code_fix whose naive verifier pays an edit of the visible tests (hacking)",
                              warm_start="course_lib.warm_starts:code_fix_warm_start_options"),
    "terminal": EnvSpec("course_lib.envs.terminal:TerminalEnv", "course_lib.tasks.terminal", "terminal",
                        "bring a directory of files to a checked state with shell commands"),
    "data_analysis": EnvSpec("course_lib.envs.data_analysis:DataAnalysisEnv",
                             "course_lib.tasks.data_analysis", "data_analysis",
                             "answer a question about CSV files by running pandas on them"),
    "gridworld": EnvSpec("course_lib.envs.gridworld:GridWorldEnv", "course_lib.tasks.gridworld", "gridworld",
                         "walk a text grid from S to G without falling into a hole",
                         warm_start="course_lib.warm_starts:gridworld_warm_start_options", rollout_turns=8,
                         teaches_judge=True, light_judge_policy=True),
    "gridworld_long": EnvSpec("course_lib.envs.gridworld:LongGridWorldEnv", "course_lib.tasks.gridworld_long",
                              "gridworld_long", "walk walled maps seen through a 5x5 window: shortest paths "
                              "of 4 to 24 moves (task field horizon), turn limits of 8 to 48",
                              warm_start="course_lib.warm_starts:gridworld_long_warm_start_options"),
    "search_chain": EnvSpec("course_lib.envs.search_chain:SearchChainEnv", "course_lib.tasks.search_chain",
                            "search_chain", "climb an invented line of teachers 2 to 12 generations, one "
                            "search a hop (task fields hops and horizon = hops + 2, the turn limit)",
                            warm_start="course_lib.warm_starts:search_chain_warm_start_options"),
}


def environment(name: str) -> EnvSpec:
    """The table's entry for `name`; a name not in it is an error that lists the environments."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"environment {name!r} does not exist; environments are: {', '.join(ENVIRONMENTS)}")
    return ENVIRONMENTS[name]


def imported(target: str) -> Any:
    """The object a "module:name" string of the table names, e.g. an environment class or a recipe."""
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def make_env(name: str, **options: Any) -> Environment:
    """Build an environment by name, e.g. `make_env("gridworld", max_turns=12)`."""
    return imported(environment(name).env_class)(**options)


def load_tasks(name: str, split: str = "train", limit: int | None = None) -> list[dict[str, Any]]:
    """The task set of environment `name` for `split` ("train" or "test"), read from
    data/<its data folder>/<split>.jsonl."""
    spec = environment(name)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    path = data_dir() / spec.data / f"{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; generate the task data with `python -m course_lib.tasks`")
    with path.open() as f:
        tasks = [json.loads(line) for line in f if line.strip()]
    return tasks[:limit]


def expert_policy(env: Environment) -> str:
    """The next action text of the environment's expert for its current task."""
    return env.expert_action()


__all__ = ["Environment", "StepResult", "ToolError", "make_env", "load_tasks", "expert_policy",
           "ENVIRONMENTS", "EnvSpec", "environment", "imported", "data_dir"]
