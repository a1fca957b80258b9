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

The tool `move(direction)` takes one step up, down, left or right. Moving off the grid leaves the
agent in place with a note line above the picture ("You hit the wall..."). Stepping on a hole `H`
ends the episode with reward 0; reaching `G` ends it with reward 1; the turn limit (default twice the
shortest path) ends it with reward 0. The reward does not depend on the path length: the preference
for short paths comes from the discount γ in the credit method (see `course_lib.credit`), not from
the environment.

`state_key()` is the picture without any note line (the grid and the status line), so a bump into
the wall or a malformed action does not split one state into two anchors.

With `slip > 0` the ice is slippery: with that probability a move goes to one of the two
perpendicular directions instead (FrozenLake's rule); the default is deterministic.

Task fields: id, grid (rows of S . H G), size, start, goal ([row, col], 0-based), shortest_path_len.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

from course_lib.envs.base import Environment, StepResult, ToolError
from course_lib.protocol import Tool, format_tool_call, quoted

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_PERPENDICULAR = {"up": ("left", "right"), "down": ("left", "right"),
                  "left": ("up", "down"), "right": ("up", "down")}


def distances_to(grid: list[str], target: tuple[int, int]) -> dict[tuple[int, int], int]:
    """Fewest moves from each reachable non-hole cell to `target` (breadth-first search backwards)."""
    size = len(grid)
    dist = {target: 0}
    queue = deque([target])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < size and 0 <= nc < size and grid[nr][nc] != "H" and (nr, nc) not in dist:
                dist[(nr, nc)] = dist[(r, c)] + 1
                queue.append((nr, nc))
    return dist


# ----- the environment -----------------------------------------------------------------------------


def render(grid: list[str], position: tuple[int, int], goal: tuple[int, int]) -> str:
    """The grid with `A` on the agent's cell, cells separated by spaces, then the status line."""
    lines = []
    for r, row in enumerate(grid):
        # Spaces between cells keep one cell per token for the tokenizer, so columns stay countable.
        lines.append(" ".join("A" if (r, c) == position else ch for c, ch in enumerate(row)))
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
        self.position = (0, 0)
        self.goal = (0, 0)
        self.outcome: str | None = None  # "goal" or "hole" once the agent has stepped on one

    def setup(self, task: dict[str, Any]) -> str:
        self.grid = task["grid"]
        self.position, self.goal = tuple(task["start"]), tuple(task["goal"])
        self.outcome = None
        self.max_turns = self.turn_limit or 2 * task["shortest_path_len"]
        return self.picture()

    def picture(self) -> str:
        return render(self.grid, self.position, self.goal)

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
        if not (0 <= r < size and 0 <= c < size):
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
        # The base class ends an episode only on an answer or the turn limit; here the lake ends it too.
        result = super().step(action_text)
        if self.outcome is not None and not result.done:
            return self._finish(result.observation, result.info)
        return result

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
