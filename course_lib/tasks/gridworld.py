"""GridWorld's task generator: random FrozenLake-like maps, each solvable and not too easy.

`python -m course_lib.tasks --only gridworld` writes data/gridworld/{train,test}.jsonl; test maps
never repeat a training layout. The environment is `course_lib.envs.gridworld`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from course_lib.envs.gridworld import distances_to
from course_lib.tasks.files import write_jsonl

N_TRAIN, N_TEST = 300, 75
SIZES = (4, 5, 6)


def _cells(grid: list[str], char: str) -> list[tuple[int, int]]:
    return [(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == char]


def make_map(rng: random.Random, size: int) -> list[str] | None:
    """A random map of `size`×`size`, or None when it is unsolvable or too easy (caller draws again)."""
    hole_rate = rng.uniform(0.1, 0.25)
    cells = [(r, c) for r in range(size) for c in range(size)]
    start, goal = rng.sample(cells, 2)
    rows = []
    for r in range(size):
        row = ""
        for c in range(size):
            row += ("S" if (r, c) == start else "G" if (r, c) == goal
                    else "H" if rng.random() < hole_rate else ".")
        rows.append(row)
    shortest = distances_to(rows, goal).get(start)
    # At least size-1 moves, so the goal is never a step or two away and holes have to be walked around.
    if shortest is None or shortest < size - 1:
        return None
    return rows


def make_tasks(n: int, seed: int = 0, split: str = "train",
               seen: set[str] | None = None) -> list[dict[str, Any]]:
    """`n` distinct solvable maps (sizes cycle through 4, 5, 6), none of whose layouts is in `seen`.

    The test split draws from seed + 1. `seen` holds layouts ("/"-joined rows); the new ones are added.
    """
    rng = random.Random(seed + (split == "test"))
    layouts = set() if seen is None else seen
    tasks: list[dict[str, Any]] = []
    while len(tasks) < n:
        size = SIZES[len(tasks) % len(SIZES)]
        grid = make_map(rng, size)
        if grid is None or "/".join(grid) in layouts:
            continue
        layouts.add("/".join(grid))
        (start,), (goal,) = _cells(grid, "S"), _cells(grid, "G")
        tasks.append({"id": f"gridworld-{split}-{len(tasks):04d}", "grid": grid, "size": size,
                      "start": list(start), "goal": list(goal),
                      "shortest_path_len": distances_to(grid, goal)[start]})
    return tasks


def generate(out_dir: Path, seed: int = 0) -> None:
    """Write train.jsonl and test.jsonl; test maps are drawn excluding every train layout."""
    seen: set[str] = set()
    write_jsonl(Path(out_dir) / "train.jsonl", make_tasks(N_TRAIN, seed, "train", seen))
    write_jsonl(Path(out_dir) / "test.jsonl", make_tasks(N_TEST, seed, "test", seen))
