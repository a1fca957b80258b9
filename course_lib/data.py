"""Generate every environment's task data into `data/`, reproducibly.

Each environment module has a `generate(out_dir: Path, seed: int = 0) -> None` that writes its
files (task splits, corpora, repositories) into `out_dir`. This module calls them in a fixed
order. The same seed must give byte-identical files, so that `--check` can tell a changed
generator from an unchanged one and a learner can regenerate exactly what the course shipped.

    python -m course_lib.data                      # regenerate everything into data/
    python -m course_lib.data --only gridworld     # one environment
    python -m course_lib.data --check              # regenerate into a temp dir and compare with data/
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from course_lib.envs import data_dir

# The environments with generated data, in the order the course tours them (notebook 02).
ENV_NAMES = ["search_qa", "code_fix", "terminal", "data_analysis", "gridworld"]


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write one JSON object per line, byte-reproducibly.

    Sorted keys, UTF-8 without escaping, "\\n" line ends on every platform and a newline after
    the last row: the same rows always give the same bytes.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")


def _generator(name: str) -> Any | None:
    """The `generate` function of environment `name`, or None (with a message) if it is not written yet."""
    module_name = f"course_lib.envs.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:  # the module exists but one of its imports is missing: a real error
            raise
        print(f"[{name}] skipped: {module_name} does not exist yet")
        return None
    generate = getattr(module, "generate", None)
    if generate is None:
        print(f"[{name}] skipped: {module_name} has no generate(out_dir, seed) function")
    return generate


def generate_all(out_dir: Path | None = None, seed: int = 0, only: list[str] | None = None) -> list[str]:
    """Write the data of each environment into `out_dir / name`; returns the names generated.

    `out_dir` defaults to the course's data folder (see `course_lib.envs.data_dir`). `only`
    restricts the run to some environments; modules that are not there yet are skipped with a message.
    """
    out_dir = data_dir() if out_dir is None else Path(out_dir)
    names = ENV_NAMES if only is None else list(only)
    unknown = [n for n in names if n not in ENV_NAMES]
    if unknown:
        raise ValueError(f"no data generator for {unknown[0]!r}; environments with data are: {', '.join(ENV_NAMES)}")
    done = []
    for name in names:
        generate = _generator(name)
        if generate is None:
            continue
        print(f"[{name}] generating into {out_dir / name} (seed {seed})", flush=True)
        generate(out_dir / name, seed)
        done.append(name)
    return done


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def compare_trees(expected: Path, actual: Path) -> list[str]:
    """The differences between two folders, one readable line per file (empty when identical)."""
    problems = []
    expected_files, actual_files = _files(expected), _files(actual)
    for rel in sorted(expected_files | actual_files):
        if rel not in actual_files:
            problems.append(f"{actual / rel}: missing (the generator writes it)")
        elif rel not in expected_files:
            problems.append(f"{actual / rel}: not written by the generator")
        elif (expected / rel).read_bytes() != (actual / rel).read_bytes():
            problems.append(f"{actual / rel}: differs from a fresh generation")
    return problems


def check(seed: int = 0, only: list[str] | None = None, data: Path | None = None) -> list[str]:
    """Regenerate into a temporary folder and compare byte for byte with `data` (default data/)."""
    data = data_dir() if data is None else Path(data)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        problems = []
        for name in generate_all(fresh, seed=seed, only=only):
            problems += compare_trees(fresh / name, data / name)
        return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.data", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=ENV_NAMES, help="environments to generate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: data/)")
    parser.add_argument("--check", action="store_true",
                        help="regenerate into a temporary folder and compare with the output folder; exit 1 on a difference")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(seed=args.seed, only=args.only, data=args.out)
        for line in problems:
            print(line)
        print("data is up to date" if not problems else f"{len(problems)} file(s) differ; regenerate with "
              "`python -m course_lib.data` and commit the result")
        return 1 if problems else 0
    generate_all(args.out, seed=args.seed, only=args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
