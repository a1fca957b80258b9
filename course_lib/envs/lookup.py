"""A tiny built-in environment: look a code name up in a private directory, then answer.

Small enough to read in one go; it exists to test the rollout engine and to show the protocol
before the real environments arrive. The directory is fictional, so the model cannot know the
answer without calling the tool. Its tasks come from `course_lib.tasks.lookup`.
"""

from __future__ import annotations

from typing import Any

from course_lib.envs.base import Environment, ToolError
from course_lib.protocol import Tool, format_answer, format_tool_call, quoted


class LookupEnv(Environment):
    name = "lookup"
    instructions = ("You are an agent with access to a private directory of field agents. "
                    "Use the lookup tool to find facts; do not guess.")
    tools = [Tool("lookup", "Look up an agent by code name; returns the city where the agent is stationed.",
                  {"name": ("string", "the agent's code name")})]

    def setup(self, task: dict[str, Any]) -> str:
        return task["question"]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        key = arguments["name"].strip()
        directory = self.task["directory"]
        if key not in directory:
            raise ToolError(f"no agent named {quoted(key)} in the directory")
        return f"Agent {key} is stationed in {directory[key]}."

    def score(self) -> float:
        answer = (self.final_answer or "").strip().lower().rstrip(".")
        return float(answer == self.task["answer"].lower())

    def expert_action(self) -> str:
        if self.turn == 0:
            return format_tool_call("lookup", {"name": self.task["target"]})
        return format_answer(self.task["answer"])
