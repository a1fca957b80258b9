"""What every environment shares: task + tools + state + verifier.

An environment is a class with `reset`, `step`, `state_key`, `score` and `close`. The model's raw
text goes into `step`; the protocol parses it; a malformed action or a failing tool comes back as an
observation, never as an exception. A turn limit ends every episode.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from course_lib.protocol import Action, Tool, parse_action, render_system_prompt


@dataclass
class StepResult:
    observation: str
    done: bool
    reward: float
    info: dict[str, Any] = field(default_factory=dict)


class ToolError(Exception):
    """Raised by a tool for a problem the model caused; its message becomes the observation."""


class Environment:
    """Base class. Subclasses set `name`, `tools`, `instructions` and implement:

    * `setup(task) -> str`: build the episode's state, return the first user message;
    * `call_tool(name, arguments) -> str`: run one tool, return its output (raise ToolError for
      a problem the model caused);
    * `score() -> float`: the verifier, called once when the episode ends;
    * `expert_action() -> str`: the next action text of a policy that solves the task.
    """

    name: str = "base"
    tools: list[Tool] = []
    instructions: str = ""

    def __init__(self, max_turns: int = 8):
        self.max_turns = max_turns
        self.task: dict[str, Any] | None = None
        self.turn = 0
        self.done = False
        self.final_answer: str | None = None
        self.last_observation = ""
        self.info: dict[str, Any] = {}

    # ----- the episode -------------------------------------------------------------------------
    def system_prompt(self) -> str:
        return render_system_prompt(self.instructions, self.tools)

    def reset(self, task: dict[str, Any]) -> str:
        """Start an episode on `task`; returns the first observation (the user's message)."""
        self.close()
        self.task = task
        self.turn = 0
        self.done = False
        self.final_answer = None
        self.info = {}
        self.last_observation = self.setup(task)
        return self.last_observation

    def step(self, action_text: str) -> StepResult:
        """Apply one model turn. Never raises on bad model output."""
        if self.task is None:
            raise RuntimeError("call reset(task) before step()")
        if self.done:
            raise RuntimeError("the episode is over; call reset(task) to start a new one")
        self.turn += 1
        action = parse_action(action_text, self.tools)
        info: dict[str, Any] = {"action_kind": action.kind, "turn": self.turn}
        if action.kind == "answer":
            self.final_answer = action.answer
            return self._finish("", info)
        observation = self._observe(action)
        if action.kind == "malformed":
            info["error"] = action.error
        self.last_observation = observation
        if self.turn >= self.max_turns:
            info["turn_limit"] = True
            return self._finish(observation, info)
        return StepResult(observation, False, 0.0, info)

    def _observe(self, action: Action) -> str:
        if action.kind == "malformed":
            return f"Error: {action.error}"
        try:
            return self.call_tool(action.name, action.arguments)
        except ToolError as exc:
            return f"Error: {exc}"
        except Exception as exc:  # a tool bug must not crash the rollout
            return f"Error: the tool {action.name!r} failed ({type(exc).__name__}: {exc})"

    def _finish(self, observation: str, info: dict[str, Any]) -> StepResult:
        self.done = True
        reward = float(self.score())
        info.update(self.info)
        return StepResult(observation, True, reward, info)

    def state_key(self) -> Hashable:
        """The anchor state for GiGPO: the raw current observation, never the history."""
        return self.last_observation

    # ----- for subclasses ------------------------------------------------------------------------
    def setup(self, task: dict[str, Any]) -> str:
        raise NotImplementedError

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        raise NotImplementedError

    def score(self) -> float:
        raise NotImplementedError

    def expert_action(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        """Free the episode's resources (directories, processes). Safe to call twice."""
