"""GridWorld: walk a FrozenLake-like text grid from S to G without falling into a hole.

The environment where states recur. Every observation is a picture of the current state only:
the grid with the agent `A` drawn on it, then one status line::

    S . . H
    . H A .
    . . . .
    H . . G
    You are at row 2, col 3. The goal is at row 4, col 4.

Rows and columns count from 1 at the top-left in everything the model reads; the task files store
0-based [row, col] pairs, as Python indexes them. Nothing about the history is shown, so two
rollouts that stand on the same cell see the same text: these are GiGPO's anchor states.

A task with a `view` of radius r shows only the (2r+1)x(2r+1) window centred on the agent (cells
beyond the edge drawn as walls `#`), then the same status line; with r = 1 on a large map::

    # # #
    . A .
    H . #
    You are at row 1, col 7. The goal is at row 9, col 2.

The window costs the same tokens on any map, so long episodes on large maps stay short per turn, and
the status line still names the cell: the picture is still a function of the cell alone (the same
anchor state whatever the history).

The tool `move(direction)` takes one step up, down, left or right. Moving off the grid or into a
wall `#` leaves the agent in place with a note line above the picture ("You hit the wall...").
Stepping on a hole `H` ends the episode with reward 0; reaching `G` ends it with reward 1; the turn
limit (default twice the shortest path) ends it with reward 0. The reward does not depend on the path
length: the preference for short paths comes from the discount γ in the credit method (see
`course_lib.credit`), not from the environment.

`state_key()` is the picture without any note line (the grid and the status line), so a bump into
the wall or a malformed action does not split one state into two anchors.

Every turn's `info` records the agent's cell before and after it (`cell_before`, `cell_after`, 0-based)
and the goal's distance from both, `goal_distance = {"path": [d_before, d_after], "line": [...]}` (see
`goal_distance`): what the turn-reward rules of `course_lib.rewards` read.

With `slip > 0` the ice is slippery: with that probability a move goes to one of the two
perpendicular directions instead (FrozenLake's rule); the default is deterministic.

Task fields: id, grid (rows of S . H G, and # in the long-horizon maps), size, start, goal ([row, col],
0-based), shortest_path_len; optional: view (the window's radius; absent: the whole grid).
"""

from __future__ import annotations

import random
from collections import deque
from functools import lru_cache
from typing import Any

from course_lib.envs.base import Environment, StepResult, ToolError
from course_lib.protocol import Tool, format_tool_call, quoted

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_PERPENDICULAR = {"up": ("left", "right"), "down": ("left", "right"),
                  "left": ("up", "down"), "right": ("up", "down")}


WALL = "#"  # a cell no move enters; the view draws everything beyond the edge of the map as one too
BLOCKED = ("H", WALL)  # the cells no path goes through: a hole ends it, a wall stops it


def distances_to(grid: list[str], target: tuple[int, int]) -> dict[tuple[int, int], int]:
    """Fewest moves from each reachable cell (neither hole nor wall) to `target` (breadth-first search
    backwards)."""
    size = len(grid)
    dist = {target: 0}
    queue = deque([target])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < size and 0 <= nc < size and grid[nr][nc] not in BLOCKED and (nr, nc) not in dist:
                dist[(nr, nc)] = dist[(r, c)] + 1
                queue.append((nr, nc))
    return dist


@lru_cache(maxsize=1024)
def _path_distances(grid: tuple[str, ...], goal: tuple[int, int]) -> tuple[dict[tuple[int, int], int], int]:
    dist = distances_to(list(grid), goal)
    return dist, max(dist.values()) + 1


def goal_distance(grid: list[str], goal: tuple[int, int], cell: tuple[int, int], by: str = "path") -> int:
    """How far `cell` is from `goal`, the quantity the gridworld's shaping rewards compare before and after
    a move (`course_lib.rewards.distance_reward`):

        by="path"   d(s) = fewest moves from s to the goal around holes and walls (`distances_to`); a
                    cell with no path (a hole, a walled-off pocket) counts one farther than the farthest
                    reachable cell. Aligned with the verifier: a move lowers it iff it is the first move
                    of some shortest path.
        by="line"   d(s) = |row − goal row| + |col − goal col|, the straight-line (Manhattan) distance,
                    blind to holes and walls: it only looks aligned, since walking straight at the goal
                    can lead into a dead end or a hole.
    """
    if by == "path":
        dist, unreachable = _path_distances(tuple(grid), tuple(goal))
        return dist.get(tuple(cell), unreachable)
    if by == "line":
        return abs(cell[0] - goal[0]) + abs(cell[1] - goal[1])
    raise ValueError(f"by must be 'path' or 'line', got {by!r}")


# ----- the environment -----------------------------------------------------------------------------


def render(grid: list[str], position: tuple[int, int], goal: tuple[int, int], view: int | None = None) -> str:
    """The grid with `A` on the agent's cell, cells separated by spaces, then the status line. With `view`
    = r, only rows row−r..row+r and columns col−r..col+r around the agent, `#` beyond the map's edge."""
    size = len(grid)
    rows = range(size) if view is None else range(position[0] - view, position[0] + view + 1)
    cols = range(size) if view is None else range(position[1] - view, position[1] + view + 1)
    lines = []
    for r in rows:
        cells = ("A" if (r, c) == position else grid[r][c] if 0 <= r < size and 0 <= c < size else WALL
                 for c in cols)
        # Spaces between cells keep one cell per token for the tokenizer, so columns stay countable.
        lines.append(" ".join(cells))
    lines.append(f"You are at row {position[0] + 1}, col {position[1] + 1}. "
                 f"The goal is at row {goal[0] + 1}, col {goal[1] + 1}.")
    return "\n".join(lines)


class GridWorldEnv(Environment):
    name = "gridworld"
    instructions = ("You are A on a frozen lake. Reach the goal G in as few moves as possible. "
                    "Holes H end the game; . is safe ice. Row 1 is the top row, col 1 the left column.")
    tools = [Tool("move", "Move one cell.", {"direction": ("string", "up, down, left or right")})]

    def __init__(self, max_turns: int | None = None, slip: float = 0.0, seed: int | None = None):
        # max_turns=None: twice the task's shortest path, set per task in setup().
        super().__init__(max_turns=max_turns or 0)
        self.turn_limit = max_turns
        self.slip = slip
        self.rng = random.Random(seed)
        self.grid: list[str] = []
        self.view: int | None = None  # the task's window radius; None: the whole grid
        self.position = (0, 0)
        self.goal = (0, 0)
        self.outcome: str | None = None  # "goal" or "hole" once the agent has stepped on one

    def setup(self, task: dict[str, Any]) -> str:
        self.grid, self.view = task["grid"], task.get("view")
        self.position, self.goal = tuple(task["start"]), tuple(task["goal"])
        self.outcome = None
        self.max_turns = self.turn_limit or 2 * task["shortest_path_len"]
        return self.picture()

    def picture(self) -> str:
        return render(self.grid, self.position, self.goal, self.view)

    def state_key(self) -> str:
        return self.picture()

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        direction = arguments["direction"].strip().lower()
        if direction not in MOVES:
            raise ToolError("direction must be one of up, down, left, right; got "
                            f"{quoted(arguments['direction'])}")
        if self.slip and self.rng.random() < self.slip:
            direction = self.rng.choice(_PERPENDICULAR[direction])
        dr, dc = MOVES[direction]
        r, c = self.position[0] + dr, self.position[1] + dc
        size = len(self.grid)
        if not (0 <= r < size and 0 <= c < size) or self.grid[r][c] == WALL:
            return f"You hit the wall moving {direction}; you stay in place.\n{self.picture()}"
        self.position = (r, c)
        cell = self.grid[r][c]
        if cell == "H":
            self.outcome = self.info["outcome"] = "hole"
            return f"You fell into a hole at row {r + 1}, col {c + 1}. The game is over.\n{self.picture()}"
        if cell == "G":
            self.outcome = self.info["outcome"] = "goal"
            return f"You reached the goal at row {r + 1}, col {c + 1}!\n{self.picture()}"
        return self.picture()

    def step(self, action_text: str) -> StepResult:
        before = self.position
        result = super().step(action_text)
        result.info.update(self.move_info(before))
        # The base class ends an episode only on an answer or the turn limit; here the lake ends it too.
        if self.outcome is not None and not result.done:
            return self._finish(result.observation, result.info)
        return result

    def move_info(self, before: tuple[int, int]) -> dict[str, Any]:
        """What a turn-reward rule reads of a turn that started on cell `before`: the cells before and after
        it, and the goal's distance from both, by path and by line (`goal_distance`)."""
        cells = (before, self.position)
        return {"cell_before": list(before), "cell_after": list(self.position),
                "goal_distance": {by: [goal_distance(self.grid, self.goal, cell, by) for cell in cells]
                                  for by in ("path", "line")}}

    def score(self) -> float:
        return float(self.outcome == "goal")

    def expert_action(self) -> str:
        """The first move of a shortest path from the current cell (ties broken up, down, left, right)."""
        dist = distances_to(self.grid, self.goal)
        here = dist.get(self.position)
        if here is None:  # only reachable with slip: no safe path left, any move will do
            return format_tool_call("move", {"direction": "up"})
        for direction, (dr, dc) in MOVES.items():
            if dist.get((self.position[0] + dr, self.position[1] + dc)) == here - 1:
                return format_tool_call("move", {"direction": direction})
        raise RuntimeError("the expert was asked to move after reaching the goal")


class LongGridWorldEnv(GridWorldEnv):
    """GridWorld on the long-horizon maps of `course_lib.tasks.gridworld_long`: the same rules and the same
    turn limit; only the instructions add what those maps show, walls and a window around the agent."""

    name = "gridworld_long"
    instructions = ("You are A on a frozen lake. Reach the goal G in as few moves as possible. "
                    "Holes H end the game; # is a wall you cannot cross; . is safe ice. You see only the "
                    "cells around you; the status line says where you are and where the goal is. "
                    "Row 1 is the top row, col 1 the left column.")
