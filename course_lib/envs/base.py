"""What every environment shares: task + tools + state + verifier.

An environment is a class with `reset`, `step`, `state_key`, `score` and `close`. The model's raw
text goes into `step`; the protocol parses it; a malformed action or a failing tool comes back as an
observation, never as an exception, and no observation is longer than `OBSERVATION_LIMIT`
characters, nor, where the rollout has told the environment how to count them (`count_tokens`),
`OBSERVATION_TOKENS` tokens: a character of 4-byte UTF-8 is about 3.5 tokens, so 16,000 of them
came to 56k tokens. Control characters (ESC, NUL, CR...) come out escaped, as `\x1b`: an ANSI
sequence in a tool's output cannot hide text from whoever prints the observation. A verifier that fails gives
reward 0 with a note in `info["score_error"]`: one broken episode never stops a batch. A turn limit ends
every episode.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from course_lib.protocol import Action, Tool, parse_action, quoted, render_system_prompt

OBSERVATION_LIMIT = 20_000  # characters of one observation; the rest is cut with a note
OBSERVATION_TOKENS = 6_000  # tokens of one observation, where the environment can count them
_NOTE_LIMIT = 300  # characters of an exception's text echoed in an observation or a note


def cap(text: str, limit: int = OBSERVATION_LIMIT, count_tokens: Callable[[str], int] | None = None,
        token_limit: int = OBSERVATION_TOKENS) -> str:
    """`text` cut to `limit` characters and, with `count_tokens`, to `token_limit` tokens, with a note
    that says how long it was."""
    kept = text[:limit]
    tokens = count_tokens(kept) if count_tokens is not None else 0
    while tokens > token_limit:  # shrink in proportion, a little more each time, until it fits
        kept = kept[:int(len(kept) * token_limit / tokens * 0.95)]
        tokens = count_tokens(kept)
    if len(kept) == len(text):
        return text
    unit = f", {count_tokens(text)} tokens" if count_tokens is not None else ""
    return kept + f"\n[... cut: {len(text)} characters{unit} in all]"


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but newline and tab


def escape_controls(text: str) -> str:
    """Control characters shown as escapes ("\\x1b[8m" for ESC [8m), CR LF kept as a newline."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r\n", "\n"))


def exception_note(exc: BaseException) -> str:
    """`Type: message` of an exception, the message cut to a few hundred characters (it may
    echo a huge path)."""
    return f"{type(exc).__name__}: {cap(str(exc), _NOTE_LIMIT)}"


@dataclass
class StepResult:
    observation: str
    done: bool
    reward: float
    info: dict[str, Any] = field(default_factory=dict)


class ToolError(Exception):
    """Raised by a tool for a problem the model caused; its message becomes the observation."""


def guarded_score(score: Callable[[Any], float]) -> Callable[[Any], float]:
    """`score`, made safe: an exception (or a result that is not a number) gives 0.0 and a note in
    `info["score_error"]`. Every subclass's `score` is wrapped so (`Environment.__init_subclass__`),
    whoever calls it: `step`, the rollout at a context limit, the TRL adapter."""
    if getattr(score, "guarded", False):
        return score

    @functools.wraps(score)
    def safe(self: Environment) -> float:
        try:
            return float(score(self))
        except Exception as exc:  # e.g. what the agent left behind broke the verifier
            self.info["score_error"] = f"scoring failed, reward 0: {exception_note(exc)}"
            return 0.0

    safe.guarded = True  # type: ignore[attr-defined]
    return safe


class Environment:
    """Base class. Subclasses set `name`, `tools`, `instructions` and implement:

    * `setup(task) -> str`: build the episode's state, return the first user message;
    * `call_tool(name, arguments) -> str`: run one tool, return its output (raise ToolError for
      a problem the model caused);
    * `score() -> float`: the verifier, called once when the episode ends (wrapped by
      `guarded_score`: if it raises, the reward is 0 and `info["score_error"]` says why);
    * `expert_action() -> str`: the next action text of a policy that solves the task.
    """

    name: str = "base"
    tools: list[Tool] = []
    instructions: str = ""
    # Set by whoever tokenizes the observations (the rollout): then observations are capped in tokens too.
    count_tokens: Callable[[str], int] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "score" in cls.__dict__:  # a verifier that raises must not end a whole batch of episodes
            cls.score = guarded_score(cls.__dict__["score"])

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
        observation = cap(escape_controls(self._observe(action)), count_tokens=self.count_tokens)
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
            return f"Error: the tool {quoted(action.name)} failed ({exception_note(exc)})"

    def _finish(self, observation: str, info: dict[str, Any]) -> StepResult:
        """End the episode and score it (`score` never raises: see `guarded_score`)."""
        self.done = True
        reward = self.score()
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
