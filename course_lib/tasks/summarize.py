"""Summarize's tasks: one per distinct subject of search_qa's questions ("What does the encyclopedia
say about the Orrin Guild?"). `python -m course_lib.tasks --only summarize` writes
data/summarize/{train,test}.jsonl. The environment is `course_lib.envs.summarize`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from course_lib.tasks import search_qa
from course_lib.tasks.files import write_jsonl


def summary_tasks(questions: list[dict[str, Any]], split: str, seen: set[str]) -> list[dict[str, Any]]:
    """One task per subject (the first entity of a question's chain) not in `seen`, in question order."""
    tasks = []
    for qa in questions:
        subject = qa["chain"][0]
        if subject in seen:
            continue
        seen.add(subject)
        name = f"the {subject}" if qa["kind"].startswith(("org", "founder")) else subject
        tasks.append({"id": f"summarize-{split}-{len(tasks):04d}", "subject": subject,
                      "question": f"What does the encyclopedia say about {name}?",
                      "evidence": qa["evidence"][:1]})
    return tasks


def make_tasks(n: int, seed: int = 0, split: str = "train",
               seen: set[str] | None = None) -> list[dict[str, Any]]:
    """The first `n` summary tasks of `split` (subjects in `seen` are skipped; the new ones are added)."""
    tasks = summary_tasks(search_qa.make_splits(seed)[1][split], split, set(seen or ()))[:n]
    if seen is not None:
        seen.update(t["subject"] for t in tasks)
    return tasks


def generate(out_dir: Path, seed: int = 0) -> None:
    """Write train.jsonl and test.jsonl into `out_dir`: every subject of each search_qa split, once."""
    splits = search_qa.make_splits(seed)[1]
    for split in ("train", "test"):
        write_jsonl(Path(out_dir) / f"{split}.jsonl", summary_tasks(splits[split], split, set()))
