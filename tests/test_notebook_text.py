"""The notebooks' markdown teaches; it does not keep a diary.

Dates, clock times, commits, review and session history, seed-picking stories and "in the stored run ..."
remarks belong in README.md or benchmarks/README.md. Each rule below is a regular expression over the
markdown cells of every notebook, with the reason a match is out of place. One sentence about the machine
that produced the outputs is allowed per notebook ("measured on a 2-core CPU; see the README"), so the
machine rule counts mentions instead of refusing them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))

_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|December|"
           "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec")

# (name, pattern, why it does not belong in teaching text)
RULES: list[tuple[str, re.Pattern[str], str]] = [
    ("date", re.compile(r"\b(19|20)\d\d-(0[1-9]|1[0-2])(-\d\d)?\b"),
     "a calendar date: when something was measured belongs in the README"),
    ("date", re.compile(rf"\b({_MONTHS})\.?\s+\d{{1,2}}(st|nd|rd|th)?,?\s+(19|20)\d\d\b"
                        rf"|\b\d{{1,2}}(st|nd|rd|th)?\s+({_MONTHS})\.?,?\s+(19|20)\d\d\b"
                        rf"|\b({_MONTHS})\.?\s+(19|20)\d\d\b"),
     "a month with a year or day: when something happened belongs in the README"),
    ("clock time", re.compile(r"\b([01]\d|2[0-3]):[0-5]\d\b"),
     "a time of day: when something ran belongs in the README"),
    ("commit", re.compile(r"\bcommit\s+[0-9a-f]{7,40}\b|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
     "a commit hash: the repository's history is not teaching text"),
    ("review", re.compile(r"\breview(s|ed|er|ers)?\b", re.IGNORECASE),
     "review history: what a review found goes to the README; the notebook teaches the result"),
    ("session", re.compile(r"(?<!colab )(?<!runtime )(?<!restart )(?<!restart the )(?<!kernel )(?<!your )"
                           r"\bsessions?\b", re.IGNORECASE),
     "a working session: process history goes to the README (a Colab or kernel session is fine)"),
    ("seed story", re.compile(r"\bseeds?\s+\d+\s*(to|-|–|through)\s*\d+\b|\bof (the )?seeds\b"
                              r"|\bseed\s+\d+\s+(was|is|got|were)\s+(picked|chosen|selected|kept)\b",
                              re.IGNORECASE),
     "a seed-picking story: say which seed runs and show the spread, not how it was chosen"),
    ("stored run", re.compile(r"\b(stored|committed)(\s+(fast|full|fast-mode|full-mode))?\s+runs?\b",
                              re.IGNORECASE),
     "a remark about one particular stored run: describe what happens, or compute the sentence from the "
     "output"),
    ("runs counted", re.compile(r"\bin (two|three|four|five|six|seven|eight|nine|ten|\d+) (runs|sessions)\b",
                                re.IGNORECASE),
     "how often a number was measured is benchmark bookkeeping: benchmarks/README.md"),
    ("relative day", re.compile(r"\b(today|yesterday|this morning|this afternoon|tonight|last night)\b",
                                re.IGNORECASE),
     "a relative date: it is wrong the day after"),
]

MACHINE = re.compile(r"\b(2|two)[- ]core|\b(2|two) cores\b", re.IGNORECASE)


def markdown_cells(path: Path) -> list[tuple[int, str]]:
    """(cell index, text) of every markdown cell of a notebook."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return [(index, "".join(cell["source"])) for index, cell in enumerate(notebook["cells"])
            if cell["cell_type"] == "markdown"]


def text_problems(cells: list[tuple[int, str]]) -> list[str]:
    """One line per rule match, 'cell N: rule: ...excerpt... (why)', plus a line if the machine is named
    twice."""
    problems = []
    for index, text in cells:
        for name, pattern, why in RULES:
            for match in pattern.finditer(text):
                start, end = max(0, match.start() - 40), min(len(text), match.end() + 40)
                excerpt = " ".join(text[start:end].split())
                problems.append(f"cell {index}: {name}: ...{excerpt}... ({why})")
    machine = [index for index, text in cells for _ in MACHINE.finditer(text)]
    if len(machine) > 1:
        problems.append(f"cells {machine}: the 2-core machine is named {len(machine)} times; a notebook may "
                        "say once what produced its outputs (and point at the README), not repeat it")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_markdown_is_teaching_text(path: Path) -> None:
    problems = text_problems(markdown_cells(path))
    assert not problems, (f"{path.name}: process history in the markdown (move it to README.md or "
                          "benchmarks/README.md):\n" + "\n".join(problems))


BAD = [
    "measured on a 2-core CPU, 2026-11-30; the numbers are in the README",
    "in four runs of `benchmarks/train_throughput.py`",
    "A third review closed the last gap between the two runs",
    "Of seeds 0 to 9, only 3 reached the goal, so seed 4 was picked",
    "in the stored run both went from 1 of 4 to 0 of 4",
    "at commit 6462190 the suite took 37 minutes",
    "run between 07:00 and 07:58 on November 30, 2026",
    "as this session found",
]
GOOD = [
    "Greedy decoding, so the answer is the same on every run on the same machine.",
    "seeds 1, 2 and 3 all read detour, guess, expert, and only seed 0 differs",
    "GiGPO (Group-in-Group Policy Optimization, Feng et al. 2025) notices that",
    "a tool call is JSON between `<tool_call>` tags; run `python -m course_lib.judge.server --port 8011`",
    "Expected time: about 2 minutes with `COURSE_FAST=1` on a 2-core CPU; see the README.",
    "May the best policy win: the scores decide, in March or in May.",
    "the first hex digits of its SHA-256, as in t3f9a",
    "On Colab, choose Runtime > Restart session after the install cell, then run your session's next cell.",
]


@pytest.mark.parametrize("text", BAD)
def test_rules_catch_process_history(text: str) -> None:
    assert text_problems([(0, text)]), text


@pytest.mark.parametrize("text", GOOD)
def test_rules_leave_teaching_text_alone(text: str) -> None:
    assert text_problems([(0, text)]) == [], text
