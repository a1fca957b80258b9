"""Every environment's task set: the offline generators, one module per environment, and task selection.

Each module here (`course_lib.tasks.code_fix`, `.terminal`, ...) has the same two functions:

* `make_tasks(n, seed=0, split="train", seen=None) -> list[dict]`: `n` tasks of `split`; a task whose
  key (its question, repository, layout...) is in the set `seen` is drawn again, and the new keys
  are added to it, so the test split can exclude the training one;
* `generate(out_dir, seed=0)`: write the environment's files (task splits, corpora, tables) into
  `out_dir`, byte-reproducibly.

A generator imports its environment (for file names and shared helpers); no environment imports a
generator. The same seed gives byte-identical files, so `--check` can tell a changed generator from
an unchanged one and a learner can regenerate exactly what the course shipped.

    python -m course_lib.tasks                      # regenerate everything into data/
    python -m course_lib.tasks --only gridworld     # one environment
    python -m course_lib.tasks --check              # regenerate into a temp dir and compare with data/
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from course_lib.envs import ENVIRONMENTS, data_dir
from course_lib.tasks.files import compare_trees, write_jsonl

# The environments with generated data, in the order the course tours them (`course_lib.envs.ENVIRONMENTS`),
# and their generators (imported on first use: pandas and bm25s load only for the environments that need
# them).
GENERATORS = {name: spec.generator for name, spec in ENVIRONMENTS.items() if spec.generator is not None}
ENV_NAMES = list(GENERATORS)


def generator(name: str) -> ModuleType:
    """The generator module of environment `name`; an environment without its own (`code_fix_naive`) has
    the generator of the environment whose data it reads (`code_fix`)."""
    base = ENVIRONMENTS[name].data if name in ENVIRONMENTS else name
    if base not in GENERATORS:
        raise ValueError(f"no task generator for {name!r}; "
                         f"environments with tasks are: {', '.join(ENV_NAMES)}")
    return importlib.import_module(GENERATORS[base])


def make_tasks(env: str, n: int, seed: int = 0, split: str = "train",
               seen: set[str] | None = None) -> list[dict[str, Any]]:
    """`n` fresh tasks of environment `env` (see the module docstring); e.g. `make_tasks("gridworld", 5)`."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    return generator(env).make_tasks(n, seed, split, seen)


def filter_tasks(tasks: list[dict[str, Any]], task_filter: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The tasks whose fields equal every key of `task_filter` (all of them when it is None or empty).

    A filter that is not a dict, or that keeps no task of a non-empty list, is an error: a typo in a key
    or a value (`{"hop": 2}`, `{"hops": "2"}`) would otherwise train or evaluate on nothing without a word.
    """
    if not task_filter:
        return tasks
    if not isinstance(task_filter, dict):
        raise ValueError(f"task_filter must be a dict of task fields and values, e.g. {{\"hops\": 2}}; "
                         f"got {task_filter!r}")
    kept = [task for task in tasks if all(task.get(key) == value for key, value in task_filter.items())]
    if tasks and not kept:
        fields = sorted({key for task in tasks for key in task})
        raise ValueError(f"no task matches task_filter {task_filter!r}; "
                         f"the tasks' fields are: {', '.join(fields)}")
    return kept


def generate_all(out_dir: Path | None = None, seed: int = 0, only: list[str] | None = None) -> list[str]:
    """Write the data of each environment into `out_dir / name`; returns the names generated.

    `out_dir` defaults to the course's data folder (see `course_lib.envs.data_dir`); `only` restricts
    the run to some environments.
    """
    out_dir = data_dir() if out_dir is None else Path(out_dir)
    names = ENV_NAMES if only is None else list(only)
    modules = [generator(name) for name in names]  # every name checked before anything is written
    for name, module in zip(names, modules):
        print(f"[{name}] generating into {out_dir / name} (seed {seed})", flush=True)
        module.generate(out_dir / name, seed)
    return names


def check(seed: int = 0, only: list[str] | None = None, data: Path | None = None) -> list[str]:
    """Regenerate into a temporary folder and compare byte for byte with `data` (default data/)."""
    data = data_dir() if data is None else Path(data)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        problems = []
        for name in generate_all(fresh, seed=seed, only=only):
            problems += compare_trees(fresh / name, data / name)
        return problems


def main(argv: list[str] | None = None, prog: str = "python -m course_lib.tasks") -> int:
    """The command line (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=ENV_NAMES,
                        help="environments to generate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: data/)")
    parser.add_argument("--check", action="store_true",
                        help="regenerate into a temporary folder and compare with the output folder; "
                             "exit 1 on a difference")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(seed=args.seed, only=args.only, data=args.out)
        for line in problems:
            print(line)
        print("data is up to date" if not problems else f"{len(problems)} file(s) differ; regenerate with "
              "`python -m course_lib.tasks` and commit the result")
        return 1 if problems else 0
    generate_all(args.out, seed=args.seed, only=args.only)
    return 0


__all__ = ["GENERATORS", "ENV_NAMES", "generator", "make_tasks", "filter_tasks", "generate_all", "check",
           "main", "compare_trees", "write_jsonl"]
