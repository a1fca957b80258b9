"""The one tool-call syntax of the course.

A model turn is one of three things:

* a tool call, JSON inside tags::

      <tool_call>{"name": "search", "arguments": {"query": "Velmora river"}}</tool_call>

* a final answer::

      <answer>Port Aldis</answer>

* anything else: a *malformed* action. Parsing never raises on model output; a malformed action
  carries a readable error that the environment sends back to the model as its observation.

Free text (a short thought) may come before the tag. Nothing but whitespace may come after it:
generation stops at the closing tag (see :data:`STOP_STRINGS`), so a model that keeps writing after
it is trying to write its own observation.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
# Generation of a turn stops right after one of these (or at the end-of-turn token).
STOP_STRINGS = [TOOL_CLOSE, ANSWER_CLOSE]


def completes_stop_string(text: str, piece: str) -> bool:
    """Whether the newest decoded token `piece` (already appended: `text` ends with it) completed a stop
    string. Only a stop string that ends inside the piece can have just completed, so only the tail of
    `text` is searched. Token-by-token decoding is exact for these ASCII tags."""
    return any(stop in text[-(len(stop) + len(piece)):] for stop in STOP_STRINGS)

_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
               "object": dict, "array": list}


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its name, what it does, and its arguments.

    `parameters` maps argument name -> (JSON type name, description). All arguments are required
    unless listed in `optional`.
    """

    name: str
    description: str
    parameters: dict[str, tuple[str, str]] = field(default_factory=dict)
    optional: tuple[str, ...] = ()

    def signature(self) -> str:
        args = ", ".join(
            f'"{k}": <{t}{", optional" if k in self.optional else ""}>'
            for k, (t, _) in self.parameters.items()
        )
        return f'{{"name": "{self.name}", "arguments": {{{args}}}}}'


@dataclass
class Action:
    """A parsed model turn. `kind` is "tool_call", "answer" or "malformed"."""

    kind: str
    name: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.kind != "malformed"


def render_tools(tools: list[Tool]) -> str:
    """The tool descriptions and the calling convention, as they appear in the system prompt."""
    lines = ["You can call these tools:"]
    for tool in tools:
        lines.append(f"- {tool.name}: {tool.description}")
        for arg, (typ, desc) in tool.parameters.items():
            lines.append(f"    {arg} ({typ}): {desc}")
    lines += [
        "",
        "To call a tool, write exactly one call and stop:",
        f'{TOOL_OPEN}{{"name": "<tool name>", "arguments": {{...}}}}{TOOL_CLOSE}',
        "The result comes back in the next message.",
        f"When you know the final answer, write it as {ANSWER_OPEN}your answer{ANSWER_CLOSE}.",
    ]
    return "\n".join(lines)


def render_system_prompt(instructions: str, tools: list[Tool]) -> str:
    """System prompt = the environment's instructions followed by the tool descriptions."""
    return f"{instructions.strip()}\n\n{render_tools(tools)}"


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The canonical text of a tool call (what the expert policies write)."""
    return f"{TOOL_OPEN}{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}{TOOL_CLOSE}"


def format_answer(answer: str) -> str:
    return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


def quoted(text: str, limit: int = 80) -> str:
    """`text` as a quoted literal for an error message, cut to `limit` characters with "…".

    Errors echo what the model wrote; a 200,000-character query must not come back whole.
    """
    return repr(text if len(text) <= limit else text[:limit - 1] + "…")


def _malformed(error: str) -> Action:
    return Action(kind="malformed", error=error)


def _check_arguments(tool: Tool, arguments: Any) -> str | None:
    if not isinstance(arguments, dict):
        return f"'arguments' must be a JSON object, got {type(arguments).__name__}"
    unknown = [k for k in arguments if k not in tool.parameters]
    if unknown:
        return (f"tool '{tool.name}' has no argument {quoted(unknown[0])}; its arguments are: "
                f"{', '.join(tool.parameters) or 'none'}")
    for arg, (typ, _) in tool.parameters.items():
        if arg not in arguments:
            if arg in tool.optional:
                continue
            return f"tool '{tool.name}' needs the argument '{arg}' ({typ})"
        value = arguments[arg]
        expected = _JSON_TYPES.get(typ)
        if expected is not None and (not isinstance(value, expected)
                                     or (typ != "boolean" and isinstance(value, bool))):
            return f"argument '{arg}' of tool '{tool.name}' must be of type {typ}, got {type(value).__name__}"
        if isinstance(value, float) and not math.isfinite(value):
            # json.loads reads NaN, Infinity, 1e400 (= inf)
            return f"argument '{arg}' of tool '{tool.name}' must be a finite number, got {value}"
    return None


def parse_action(text: str, tools: list[Tool]) -> Action:
    """Parse one model turn into a tool call, a final answer, or a malformed action.

    Never raises: every problem becomes `Action(kind="malformed", error=...)` with a message the
    model can act on.
    """
    if not isinstance(text, str):
        return _malformed("the action must be text")
    by_name = {t.name: t for t in tools}
    n_calls = text.count(TOOL_OPEN)
    n_answers = text.count(ANSWER_OPEN)
    if n_calls + n_answers == 0:
        if TOOL_CLOSE in text or ANSWER_CLOSE in text:
            return _malformed(f"found a closing tag without its opening tag; write "
                              f"{TOOL_OPEN}...{TOOL_CLOSE}")
        return _malformed(
            f"no tool call and no answer found. Call a tool with {TOOL_OPEN}{{\"name\": ..., "
            f"\"arguments\": {{...}}}}{TOOL_CLOSE} or answer with {ANSWER_OPEN}...{ANSWER_CLOSE}"
        )
    if n_calls + n_answers > 1:
        return _malformed("write exactly one tool call or one answer per turn, then stop")

    if n_answers:
        m = re.search(re.escape(ANSWER_OPEN) + r"(.*?)" + re.escape(ANSWER_CLOSE), text, re.S)
        if m is None:
            return _malformed(f"the answer is not closed; write {ANSWER_OPEN}your answer{ANSWER_CLOSE}")
        if text[m.end():].strip():
            return _malformed("nothing may follow the answer; stop right after " + ANSWER_CLOSE)
        answer = m.group(1).strip()
        if not answer:
            return _malformed("the answer is empty")
        return Action(kind="answer", answer=answer)

    m = re.search(re.escape(TOOL_OPEN) + r"(.*?)" + re.escape(TOOL_CLOSE), text, re.S)
    if m is None:
        return _malformed(f"the tool call is not closed; end it with {TOOL_CLOSE}")
    if text[m.end():].strip():
        return _malformed(f"nothing may follow a tool call; stop right after {TOOL_CLOSE} "
                          "and wait for the result")
    try:
        payload = json.loads(m.group(1))
    except (ValueError, RecursionError) as exc:
        # ValueError: a JSONDecodeError, or an integer over 4300 digits
        if isinstance(exc, json.JSONDecodeError):
            msg = exc.msg
        else:
            msg = "too deeply nested" if isinstance(exc, RecursionError) else "a number is too long"
        return _malformed(f"the tool call is not valid JSON ({msg}); write {{\"name\": ..., "
                          "\"arguments\": {...}}")
    if not isinstance(payload, dict):
        return _malformed("the tool call must be a JSON object with keys 'name' and 'arguments'")
    name = payload.get("name")
    if not isinstance(name, str):
        return _malformed("the tool call needs a 'name' (a string)")
    extra = set(payload) - {"name", "arguments"}
    if extra:
        return _malformed(f"unexpected key {quoted(sorted(extra)[0])} in the tool call; use only "
                          "'name' and 'arguments'")
    if name not in by_name:
        return _malformed(f"tool {quoted(name)} does not exist; tools are: {', '.join(by_name) or 'none'}")
    arguments = payload.get("arguments", {})
    problem = _check_arguments(by_name[name], arguments)
    if problem:
        return _malformed(problem)
    return Action(kind="tool_call", name=name, arguments=arguments)
