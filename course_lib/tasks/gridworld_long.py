"""gridworld_long's task generator: walled maps at several horizons, where walking straight at the goal
often ends in a dead end.

`python -m course_lib.tasks --only gridworld_long` writes data/gridworld_long/{train,test}.jsonl. Every map
has a horizon h, its shortest path from S to G in moves (the task field `horizon`, so
`task_filter={"horizon": 12}` picks one), drawn in turn from `HORIZONS`; the environment's turn limit is
2h (8 to 48 turns). The agent sees a window of radius `VIEW` around itself (the task field `view`, read by
`course_lib.envs.gridworld`), so a turn costs the same tokens on every map: with SmolLM2's chat template a
full turn (the `move` call, the window and the status line) is 90 to 94 tokens, and the prompt (system
message and first picture) about 240. An episode that uses its 2h turns is then about 240 + 91·2h tokens:
1,700 at h = 8, 2,400 at h = 12, 4,600 at h = 24. A rollout sets its own turn limit (`max_turns` overrides
the environment's) and stops an episode at `max_context` (the verifier scores it there): an LLM run at
one horizon takes `task_filter={"horizon": h}`, `max_turns=2 * h` and a `max_context` that fits.

A map is a square of ice with a few straight runs of wall `#` (they cross into corridors, corners and
U-shapes) and a few holes; the goal is a random free cell and the start a cell exactly h moves from it.
Three maps in four, at every horizon (`TRAP_EVERY`), need a detour: the shortest path is longer than
the straight-line (Manhattan) distance, so every walk that only ever moves closer in a straight line
(`line_walk`) gets stuck in a dead end, and every way to the goal takes a step that moves away from it
in a straight line. A reward for lowering the straight-line distance then only looks aligned with
reaching the goal. The fourth map starts at any cell h moves away (at the long horizons that needs a
detour too: a path without one is at most 2·(side − 1) moves long). The task field `detour` is the
shortest path minus the Manhattan distance. Test maps never repeat a training layout.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from course_lib.envs.gridworld import BLOCKED, WALL, distances_to, goal_distance
from course_lib.tasks.files import write_jsonl

N_TRAIN, N_TEST = 400, 200  # 80 and 40 of each horizon (40 held-out maps: a success rate to ±0.15)
HORIZONS = {4: 6, 8: 8, 12: 9, 16: 10, 24: 12}  # shortest path (moves) -> the map's side
VIEW = 2  # the window's radius: 5x5 cells around the agent
HOLE_RATE = 0.06  # of the cells left free by the walls
TRAP_EVERY = (True, True, True, False)  # of every 4 maps of a horizon, 3 need a detour

Cell = tuple[int, int]


def detour(grid: list[str], start: Cell, goal: Cell) -> int:
    """Shortest path minus straight-line distance, (fewest moves around holes and walls) − (|Δrow| + |Δcol|):
    0 when some walk that only moves closer in a straight line reaches the goal, else at least 2."""
    return distances_to(grid, goal)[start] - goal_distance(grid, goal, start, "line")


def line_walk(grid: list[str], start: Cell, goal: Cell) -> list[Cell]:
    """The cells visited by a walker that only ever walks straight at the goal: of the moves that lower the
    Manhattan distance it takes the first (along the longer gap first, rows on a tie) that enters neither
    a wall nor a hole, and stops at the goal or where no such move is left: a dead end for it, every way
    out leads away from the goal in a straight line. On a map with a `detour` it always ends in one."""
    path, (r, c) = [start], start
    while (r, c) != goal:
        rows = [(r + (1 if goal[0] > r else -1), c)] if goal[0] != r else []
        cols = [(r, c + (1 if goal[1] > c else -1))] if goal[1] != c else []
        options = rows + cols if abs(goal[0] - r) >= abs(goal[1] - c) else cols + rows
        free = [(nr, nc) for nr, nc in options if grid[nr][nc] not in BLOCKED]
        if not free:
            break
        r, c = free[0]
        path.append((r, c))
    return path


def make_map(rng: random.Random, horizon: int, trap: bool) -> tuple[list[str], Cell, Cell] | None:
    """A random map whose shortest path is `horizon` moves, with its start and goal; None when the draw has
    no fitting start (exactly `horizon` moves from the goal and, if `trap`, with a `detour`): the caller
    draws again."""
    size = HORIZONS[horizon]
    rows = [["."] * size for _ in range(size)]
    for _ in range(size):  # straight runs of wall, 2 to size/2 cells, across or down
        r, c = rng.randrange(size), rng.randrange(size)
        dr, dc = rng.choice([(0, 1), (1, 0)])
        for k in range(rng.randint(2, size // 2)):
            if 0 <= r + k * dr < size and 0 <= c + k * dc < size:
                rows[r + k * dr][c + k * dc] = WALL
    for row in rows:
        for c, ch in enumerate(row):
            if ch == "." and rng.random() < HOLE_RATE:
                row[c] = "H"
    goal = rng.choice([(r, c) for r in range(size) for c in range(size) if rows[r][c] == "."])
    grid = ["".join(row) for row in rows]
    starts = sorted(cell for cell, d in distances_to(grid, goal).items()
                    if d == horizon and not (trap and d == goal_distance(grid, goal, cell, "line")))
    if not starts:
        return None
    start = rng.choice(starts)
    rows[start[0]][start[1]], rows[goal[0]][goal[1]] = "S", "G"
    return ["".join(row) for row in rows], start, goal


def make_tasks(n: int, seed: int = 0, split: str = "train",
               seen: set[str] | None = None) -> list[dict[str, Any]]:
    """`n` distinct maps, horizons cycling through `HORIZONS`, none of whose layouts is in `seen`.

    The test split draws from seed + 1. `seen` holds layouts ("/"-joined rows); the new ones are added.
    """
    rng = random.Random(seed + (split == "test"))
    layouts = set() if seen is None else seen
    horizons = list(HORIZONS)
    tasks: list[dict[str, Any]] = []
    while len(tasks) < n:
        horizon = horizons[len(tasks) % len(horizons)]
        trap = TRAP_EVERY[len(tasks) // len(horizons) % len(TRAP_EVERY)]
        drawn = make_map(rng, horizon, trap)
        if drawn is None or "/".join(drawn[0]) in layouts:
            continue
        grid, start, goal = drawn
        layouts.add("/".join(grid))
        tasks.append({"id": f"gridworld_long-{split}-{len(tasks):04d}", "grid": grid, "size": len(grid),
                      "start": list(start), "goal": list(goal), "shortest_path_len": horizon,
                      "horizon": horizon, "view": VIEW, "detour": detour(grid, start, goal)})
    return tasks


def generate(out_dir: Path, seed: int = 0) -> None:
    """Write train.jsonl and test.jsonl; test maps are drawn excluding every train layout."""
    seen: set[str] = set()
    write_jsonl(Path(out_dir) / "train.jsonl", make_tasks(N_TRAIN, seed, "train", seen))
    write_jsonl(Path(out_dir) / "test.jsonl", make_tasks(N_TEST, seed, "test", seen))
