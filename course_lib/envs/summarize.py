"""Summarize: search the encyclopedia of `search_qa`, then write a short summary. No verifier.

The task asks what the encyclopedia says about one entity ("What does the encyclopedia say about the
Orrin Guild?"). The agent has search_qa's `search` tool and ends with ``<answer>`` holding one or two
sentences. There is no single right wording, so `score()` returns 0.0 and marks the episode with
``info["needs_judge"] = True``: only a judge (`course_lib.judge.scoring.score_group`) can reward it.

Tasks are derived from search_qa's questions by `course_lib.tasks.summarize`: the subject is the first
entity of a search_qa question's chain, each subject once.
"""

from __future__ import annotations

from course_lib.envs.search_qa import SearchQAEnv
from course_lib.protocol import format_answer, format_tool_call


class SummarizeEnv(SearchQAEnv):
    name = "summarize"
    instructions = ("Find out what the encyclopedia says about the subject of the question: search for it, "
                    "then answer with a short summary (one or two sentences) of what you found.")

    def score(self) -> float:
        self.info["needs_judge"] = True  # no verifier: the judge's score is the reward
        return 0.0

    def expert_action(self) -> str:
        """Search the subject once, then summarise the sentences the search showed about it."""
        if not self.queries:
            return format_tool_call("search", {"query": self.task["subject"]})
        found = [d["text"] for d in self.index.search(self.queries[0]) if self.task["subject"] in d["text"]]
        return format_answer(" ".join(found[:2]) or "The encyclopedia says nothing about it.")
