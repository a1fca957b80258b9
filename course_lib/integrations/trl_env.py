"""Our environments as TRL's GRPOTrainer sees them, without the trainer: one dataset row per task, and the
``environment_factory`` adapter (a class whose public methods are the tools) with its tool schemas and the
tool-calling chat template. `course_lib.integrations.trl` builds the trainer on them; `trl_eval` replays
TRL's tool-calling format with them (held-out evaluation, demonstrations for a warm start). Nothing here
imports TRL's trainer or our judge, so the warm start (`course_lib.sft`) may use it.

    task_dataset                  the rows TRL trains on (prompt, task_id, task as JSON)
    make_trl_environment_factory  the adapter class for ``GRPOTrainer(environment_factory=...)``
    tool_schemas                  the JSON tool schemas TRL renders into the prompt
    tool_calling_tokenizer        TRL's Qwen2.5 ChatML template for a tokenizer that lacks a tool-calling one
"""

from __future__ import annotations

import inspect
import json
import weakref
from collections.abc import Callable
from typing import Any

from course_lib.envs import Environment, load_tasks, make_env
from course_lib.protocol import Tool, format_answer, format_tool_call

_PYTHON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool,
                 "object": dict, "array": list}
ANSWER_TOOL_DOC = "Submit your final answer; this ends the episode."


# ----- the data: one row per task -------------------------------------------------------------------


def _prompt_messages(env: Environment, task: dict[str, Any], for_tool_calling: bool) -> list[dict[str, str]]:
    first_observation = env.reset(task)
    if for_tool_calling:
        # TRL's chat template renders the tool schema itself; we only say how an episode ends.
        system = f"{env.instructions.strip()}\nWhen you know the final answer, call the tool `answer`."
    else:
        system = env.system_prompt()  # our protocol: tools described in text, <tool_call> / <answer> tags
    return [{"role": "system", "content": system}, {"role": "user", "content": first_observation}]


def task_dataset(env_name: str, split: str = "train", limit: int | None = None, *,
                 for_tool_calling: bool = False, tasks: list[dict[str, Any]] | None = None):
    """A `datasets.Dataset` with one row per task: ``prompt``, ``task_id`` and ``task`` (JSON).

    ``prompt`` is the conversation TRL starts from (system prompt + the task's first observation).
    With ``for_tool_calling=False`` (the ``rollout_func`` adapter) it is exactly what our rollout
    engine builds; with ``True`` (the ``environment_factory`` adapter) the system prompt leaves the tool
    descriptions to TRL's chat template. The task itself is one JSON string column: task fields differ
    between tasks (a directory, a grid), which Arrow columns cannot hold. For the ``rollout_func``
    adapter a task whose prompt repeats an earlier task's is left out (see
    `course_lib.integrations.trl.RolloutFunc`).
    """
    from datasets import Dataset

    tasks = tasks if tasks is not None else load_tasks(env_name, split, limit)
    env = make_env(env_name)
    rows, seen = [], set()
    try:
        for task in tasks:
            prompt = _prompt_messages(env, task, for_tool_calling)
            if not for_tool_calling:
                # TRL gives a rollout function the prompts only, so a prompt must name one task: a task
                # whose prompt repeats an earlier one (lookup asks about the same agent twice) is left out.
                if prompt_key(prompt) in seen:
                    continue
                seen.add(prompt_key(prompt))
            rows.append({"prompt": prompt, "task_id": str(task["id"]),
                         "task": json.dumps(task, sort_keys=True)})
    finally:
        env.close()
    return Dataset.from_list(rows)


def prompt_key(prompt: list[dict[str, str]] | str) -> str:
    """A prompt as one string (what the ``rollout_func`` adapter maps back to its task)."""
    return json.dumps(prompt, sort_keys=True)


# ----- adapter 1: environment_factory ----------------------------------------------------------------


def _google_docstring(description: str, parameters: dict[str, tuple[str, str]]) -> str:
    # transformers' get_json_schema reads the description and the `Args:` section (one line per argument).
    lines = [description]
    if parameters:
        lines += ["", "Args:"] + [f"    {name}: {desc}" for name, (_, desc) in parameters.items()]
    return "\n".join(lines)


def _tool_method(tool: Tool, action: Callable[[dict[str, Any]], str] | None = None) -> Callable[..., str]:
    """A method `tool.name(self, <arguments>) -> str` that plays one action in our environment.

    action: the arguments -> the action text in our protocol (default: the canonical tool call).
    """
    action = action or (lambda arguments: format_tool_call(tool.name, arguments))

    def method(self, **arguments: Any) -> str:
        return self._play(action({k: v for k, v in arguments.items() if v is not None}))

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    for name, (json_type, _) in tool.parameters.items():
        python_type = _PYTHON_TYPES.get(json_type, str)
        optional = name in tool.optional
        annotations[name] = python_type | None if optional else python_type
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None if optional else
                                        inspect.Parameter.empty, annotation=annotations[name]))
    method.__name__ = method.__qualname__ = tool.name
    method.__doc__ = _google_docstring(tool.description, tool.parameters)
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(params, return_annotation=str)
    return method


class TRLEnvironment:
    """Base of the generated adapters: our `Environment` behind TRL's environment protocol.

    Every tool call goes through ``env.step`` with the canonical tool-call text, so argument checks,
    error observations and the turn limit are the environment's own. Internal names start with ``_``:
    TRL turns every public method except ``reset`` and ``get_reward`` into a tool, which is why closing
    is ``_close()``, not ``close()``. TRL 1.16 pools the instances for the trainer's life and never
    closes them, so the wrapped environment (its episode directory) is also closed when the adapter is
    garbage-collected or the interpreter exits.
    """

    env_name = ""

    def __init__(self, **env_options: Any):
        self._env = make_env(self.env_name, **env_options)
        self._reward: float | None = None
        weakref.finalize(self, self._env.close)  # TRL never closes it; close() twice is fine

    def reset(self, **row: Any) -> None:
        """Start the task of a dataset row (its ``task`` column); the prompt already holds the question."""
        task = json.loads(row["task"]) if isinstance(row["task"], str) else row["task"]
        self._reward = None
        self._env.reset(task)
        return None

    def _close(self) -> None:
        """Close the wrapped environment (remove its episode directory). Safe to call twice."""
        self._env.close()

    def _play(self, action_text: str) -> str:
        if self._env.task is None:
            return "Error: no episode is running."
        if self._env.done:
            return "The episode is over; no more tool calls are accepted."
        result = self._env.step(action_text)
        if result.done:
            self._reward = result.reward
            return (result.observation + "\n" if result.observation else "") + "The episode is over."
        return result.observation

    def get_reward(self) -> float:
        """Our verifier: the episode's reward, or the score of the state where the model stopped."""
        if self._reward is not None:
            return self._reward
        return float(self._env.score()) if self._env.task is not None else 0.0


def make_trl_environment_factory(env_name: str, **env_options: Any) -> type[TRLEnvironment]:
    """A class for ``GRPOTrainer(environment_factory=...)``: one public method per tool of `env_name`.

    The class itself is the factory (TRL calls it with no arguments, once per concurrent rollout).
    """
    probe = make_env(env_name, **env_options)
    try:
        tools = list(probe.tools)
    finally:
        probe.close()
    if any(t.name in ("answer", "reset", "get_reward") for t in tools):
        raise ValueError(f"environment {env_name!r} has a tool named like an adapter method "
                         "(answer, reset, get_reward); rename the tool")
    answer = _tool_method(Tool("answer", ANSWER_TOOL_DOC, {"answer": ("string", "the final answer, short")}),
                          action=lambda arguments: format_answer(str(arguments.get("answer", ""))))
    members: dict[str, Any] = {tool.name: _tool_method(tool) for tool in tools}
    members["answer"] = answer
    members["env_name"] = env_name
    members["__init__"] = lambda self: TRLEnvironment.__init__(self, **env_options)
    members["__doc__"] = (f"Our {env_name!r} environment as a TRL environment "
                          f"(tools: {', '.join(t.name for t in tools)}, answer).")
    name = "".join(part.capitalize() for part in env_name.split("_")) + "TRLEnvironment"
    return type(name, (TRLEnvironment,), members)


def tool_schemas(factory: type[TRLEnvironment]) -> list[dict[str, Any]]:
    """The JSON tool schemas TRL puts into the prompt for this adapter (via transformers' get_json_schema)."""
    from transformers.utils import get_json_schema

    instance = factory()
    return [get_json_schema(getattr(instance, name))
            for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")]


def tool_calling_tokenizer(tokenizer):
    """Give a tokenizer whose chat template cannot render tool calls TRL's Qwen2.5 ChatML template.

    TRL's tool loop needs a template that renders ``tool_calls`` and ``tool`` messages, and a response
    parser for the model's tool calls; it knows parsers for a few templates only. SmolLM2 uses the
    same ChatML tokens (<|im_start|>, <|im_end|>) as Qwen2.5, and Qwen's ``<tool_call>{json}</tool_call>``
    is our protocol's syntax, so the swap changes the framing of tools, not the vocabulary.
    """
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    if not supports_tool_calling(tokenizer):
        tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer
