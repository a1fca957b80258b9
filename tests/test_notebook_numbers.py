r"""Every measured-looking number in a notebook's markdown comes from a run.

The course's rule: a number in the teaching text is one the learner can find in the notebook's own outputs or
in a committed results file, and the text does not contradict them. This test checks it where a regular
expression can.

What counts as a cited number (in markdown cells only):

- an estimate with its interval, as one number: ``0.68 [0.52, 0.80]``;
- a decimal, signed or not: ``0.725``, ``+0.200``, ``−0.025``;
- a percentage: ``67%``, ``12.5 %``;
- a multiplier: ``1.7x``, ``1.70×``;
- a duration: ``13 minutes``, ``0.4 s``, ``1.5 hours`` (an integer before the one-letter units ``s`` and
  ``h`` is skipped: "0s and 1s" is not a time).

Bare integers are not checked (chapter numbers, counts, seeds, sizes are everywhere and mostly definitions).
A number glued to a letter or a dot (``Qwen2.5``, ``0.5B``, ``v1.2.3``) is a name, not a measurement.

Definitions are written as code or maths, and those are not prose: fenced code blocks, inline ``code spans``,
``$...$`` and ``$$...$$`` maths, HTML tags, link targets ``](...)`` and bare URLs are removed before
extraction, so `eps_high=0.28`, $\gamma = 0.95$ and `lr=2e-5` are skipped. A definition in plain prose
("γ = 0.95") is checked like a measurement; it is usually also a constant in a code cell, which supports it.

The evidence for a notebook:

- its code cells' sources, comments removed (a constant set in code; a comment is prose);
- its code cells' outputs: ``text/plain``, ``text/markdown``, ``text/html`` (tags stripped, so tables
  count), streams and error values;
- the committed results files ``benchmarks/results/*.{md,json,csv}`` of the benchmarks the notebook names
  anywhere in its cells (``credit_shootout`` names credit_shootout.md and credit_shootout_runs.json). Not
  all of them: their per-step logs hold every two-decimal number in [0, 1], which would support anything;
- for durations only, the notebook's recorded run time: the sum of the execution times Jupyter stores in
  each code cell's metadata.

Matching: a cited value ``p`` with ``d`` decimals is supported by an evidence value ``e`` when
``|e - p| <= 0.5·10^-d``, so 0.725, 0.7312 and 0.730 all support 0.73 (a half may round either way), 0.7
supports 0.70, and nothing that rounds elsewhere does. Signs are ignored, the unicode minus included (prose
says "drops by 0.025" of an output -0.025). A percentage is also supported by a fraction in the evidence
(0.667 supports 67%), a decimal also by a percentage (66.7% supports 0.667). A duration is supported only by
an evidence duration (a number followed by a unit, converted: 780 s supports 13 minutes) or by the recorded
run time, never by a bare number. An interval ``0.68 [0.52, 0.80]`` is supported only by an evidence interval
whose three numbers all match: printed the same way (``0.675 [0.521, 0.798]``, a bracket after a ``|`` or
``(`` too), or a results JSON object with a value ``K`` beside its ``K_ci`` pair.

What this cannot see: a number read off a plot, or one that appears in the evidence by coincidence (a
notebook that prints many numbers in [0, 1] supports most two-decimal values). It catches a number that is
in no output at all, which is what a sentence left over from an older run usually cites.

A number that is cited but legitimately has no run behind it (a figure quoted from a paper, one worked out in
the text, a fast-mode time measured outside the committed run) goes in ``ALLOWED`` for its notebook, with a
one-line reason. Keep that list short; ``test_allow_list_is_still_needed`` drops entries that become
supported.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
RESULTS = sorted(path for path in (ROOT / "benchmarks" / "results").glob("*")
                 if path.suffix in {".md", ".json", ".csv"})

# --- what is not prose --------------------------------------------------------------------------------------
_NOT_PROSE = [
    re.compile(r"```.*?```", re.DOTALL),  # fenced code
    re.compile(r"`[^`\n]*`"),  # inline code span
    re.compile(r"\$\$.*?\$\$", re.DOTALL),  # display maths
    re.compile(r"(?<!\\)\$[^$\n]+?(?<!\\)\$"),  # inline maths
    re.compile(r"<[^>\n]+>"),  # an HTML tag (its text content stays)
    re.compile(r"\]\([^)\s]*\)"),  # a link target
    re.compile(r"https?://\S+"),  # a bare URL
]

_SIGN = r"[+\-−–]?"
_NUMBER = r"\d+(?:\.\d+)?"
_UNITS = {"ms": 0.001, "s": 1, "sec": 1, "second": 1, "seconds": 1, "min": 60, "mins": 60, "minute": 60,
          "minutes": 60, "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600}
_UNIT = r"(?:ms|s|sec|seconds?|mins?|minutes?|h|hr|hours?)"
# The kinds, tried in this order; a span taken by one kind is not read again by a later one.
_INTERVAL = r"({d})\s*[|(]?\s*\[\s*{s}({d})\s*,\s*{s}({d})\s*\]"
_CITED = [
    ("interval", re.compile(rf"(?<![\w.]){_SIGN}" + _INTERVAL.format(d=r"\d+\.\d+", s=_SIGN))),
    ("percent", re.compile(rf"(?<![\w.]){_SIGN}({_NUMBER})\s?%")),
    ("multiplier", re.compile(rf"(?<![\w.]){_SIGN}({_NUMBER})\s?[x×](?![\w])")),
    ("duration", re.compile(rf"(?<![\w.])({_NUMBER})\s?-?\s?({_UNIT})(?![\w])")),
    ("decimal", re.compile(rf"(?<![\w.]){_SIGN}(\d+\.\d+)(?!\w|\.\d)")),
]
_EVIDENCE_NUMBER = re.compile(r"(?<![\w.])[+\-]?(\d+(?:\.\d+)?(?:[eE][+\-]?\d+)?)(\s?%)?")
_EVIDENCE_INTERVAL = re.compile(r"(?<![\w.])[+\-]?" + _INTERVAL.format(d=r"\d+(?:\.\d+)?", s=r"[+\-]?"))
_EVIDENCE_DURATION = re.compile(rf"(?<![\w.])({_NUMBER})\s?({_UNIT})(?![\w])")


def prose(text: str) -> str:
    """The markdown with code, maths, tags and link targets blanked out."""
    for pattern in _NOT_PROSE:
        text = pattern.sub(" ", text)
    return text


def cited_numbers(text: str) -> list[tuple[str, str, str | None]]:
    """(kind, number as written, unit) of every cited number in a markdown cell's prose."""
    text = prose(text)
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, tuple[str, str, str | None]]] = []
    for kind, pattern in _CITED:
        for match in pattern.finditer(text):
            if any(start < match.end() and match.start() < end for start, end in taken):
                continue
            if kind == "duration" and "." not in match.group(1) and match.group(2) in {"s", "h"}:
                continue  # "0s and 1s" is not a time; only a decimal "0.4 s" reads as measured
            taken.append(match.span())
            unit = match.group(2) if kind == "duration" else None
            number = match.group(1)
            if kind == "interval":
                number = f"{number} [{match.group(2)}, {match.group(3)}]"
            found.append((match.start(), (kind, number, unit)))
    return [item for _, item in sorted(found)]


# --- the evidence -------------------------------------------------------------------------------------------
def _output_text(output: dict) -> str:
    if output.get("output_type") == "stream":
        return "".join(output.get("text", ""))
    if output.get("output_type") == "error":
        return output.get("evalue", "")
    data = output.get("data", {})
    parts = ["".join(data.get(kind, "")) for kind in ("text/plain", "text/markdown", "text/html")]
    return re.sub(r"<[^>]+>", " ", "\n".join(parts))


_COMMENT = re.compile(r"#[^\n]*")  # a comment in code is prose ("about 2 minutes"), not a constant


def notebook_evidence(notebook: dict) -> str:
    """The text of a notebook's code cells: their sources without comments, and their outputs."""
    parts = []
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            parts.append(_COMMENT.sub("", "".join(cell["source"])))
            parts.extend(_output_text(output) for output in cell.get("outputs", []))
    return "\n".join(parts)


def recorded_seconds(notebook: dict) -> float | None:
    """How long the committed run of the notebook's code cells took: the sum over cells of the execution times
    Jupyter records in each cell's metadata (None if no cell has them)."""
    total, timed = 0.0, False
    for cell in notebook["cells"]:
        execution = cell.get("metadata", {}).get("execution", {})
        start, end = execution.get("iopub.execute_input"), execution.get("shell.execute_reply")
        if cell["cell_type"] == "code" and start and end:
            total += (datetime.fromisoformat(end.replace("Z", "+00:00"))
                      - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()
            timed = True
    return total if timed else None


class Evidence:
    """The numbers in a body of evidence text, ready for matching at a prose precision."""

    def __init__(self, text: str) -> None:
        self.values: set[Decimal] = set()
        self.percents: set[Decimal] = set()
        self.seconds: set[Decimal] = set()
        self.intervals: set[tuple[Decimal, Decimal, Decimal]] = set()
        for match in _EVIDENCE_INTERVAL.finditer(text):
            value, low, high = (Decimal(group) for group in match.groups())
            self.intervals.add((value, low, high))
        for match in _EVIDENCE_NUMBER.finditer(text):
            try:
                value = abs(Decimal(match.group(1)))
            except ArithmeticError:
                continue
            self.values.add(value)
            if match.group(2):
                self.percents.add(value)
        for match in _EVIDENCE_DURATION.finditer(text):
            self.seconds.add(Decimal(match.group(1)) * Decimal(str(_UNITS[match.group(2)])))

    def __or__(self, other: Evidence) -> Evidence:
        merged = Evidence("")
        merged.values = self.values | other.values
        merged.percents = self.percents | other.percents
        merged.seconds = self.seconds | other.seconds
        merged.intervals = self.intervals | other.intervals
        return merged

    def add_json(self, data: object) -> None:
        """Add the intervals of a results JSON: every object's value ``K`` beside its ``K_ci`` pair."""
        if isinstance(data, dict):
            for key, interval in data.items():
                value = data.get(key.removesuffix("_ci"))
                if (key.endswith("_ci") and isinstance(value, (int, float)) and isinstance(interval, list)
                        and len(interval) == 2 and all(isinstance(end, (int, float)) for end in interval)):
                    self.intervals.add(tuple(abs(Decimal(str(x))) for x in (value, *interval)))
            data = list(data.values())
        if isinstance(data, list):
            for item in data:
                self.add_json(item)


def _close(prose_value: Decimal, candidates: set[Decimal]) -> bool:
    exponent = prose_value.as_tuple().exponent
    assert isinstance(exponent, int)
    tolerance = Decimal(5) * Decimal(10) ** (exponent - 1)
    low, high = prose_value - tolerance, prose_value + tolerance
    return any(low <= value <= high for value in candidates)


def supported(kind: str, number: str, unit: str | None, evidence: Evidence) -> bool:
    """Whether the evidence holds a number that reads as `number` at the precision the prose gives."""
    if kind == "interval":
        cited = [Decimal(part) for part in re.findall(r"\d+\.\d+", number)]
        return any(all(_close(part, {end}) for part, end in zip(cited, interval))
                   for interval in evidence.intervals)
    value = Decimal(number)
    if kind == "duration":  # a bare 13 in the outputs says nothing about 13 minutes
        assert unit is not None
        return _close(value, {s / Decimal(str(_UNITS[unit])) for s in evidence.seconds})
    if _close(value, evidence.values):
        return True
    if kind == "percent":
        return _close(value, {v * 100 for v in evidence.values if v <= 1})
    if kind == "decimal":
        return _close(value, {v / 100 for v in evidence.percents})
    return False


def unsupported_numbers(notebook: dict, shared: Evidence) -> list[tuple[int, str]]:
    """(cell index, number as written) of every cited number the evidence does not support."""
    evidence = Evidence(notebook_evidence(notebook)) | shared
    seconds = recorded_seconds(notebook)
    if seconds is not None:
        evidence.seconds.add(Decimal(str(round(seconds, 1))))
    problems = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        for kind, number, unit in cited_numbers("".join(cell["source"])):
            if not supported(kind, number, unit, evidence):
                problems.append((index, _key(kind, number, unit)))
    return problems


def _key(kind: str, number: str, unit: str | None) -> str:
    """How a problem and an ALLOWED entry write a cited number: 0.73, 67%, 1.7x, 13 minutes."""
    suffix = {"percent": "%", "multiplier": "x", "duration": f" {unit}"}
    return number + suffix.get(kind, "")


# --- the allow-list: cited numbers with no run behind them, and why -----------------------------------------
# notebook stem -> {number as the key above writes it: reason}
FAST_MEASURED = "fast-mode time (COURSE_FAST=1) measured with nbval, commit e0034b3; not the committed run"
FAST_ESTIMATE = "fast-mode estimate (COURSE_FAST=1); the committed outputs are the learning mode's"
WARM_START_ONCE = "a warm start's one-time training, cached when the committed run was made"
LEARNING_WALL = ("the learning-mode run's wall time as `python -m course_lib.course.notebooks --learning` "
                 "printed it, the kernel's start included (its cells' recorded times sum to 1-3 s less)")
ALLOWED: dict[str, dict[str, str]] = {
    "00_setup": {
        "13 seconds": LEARNING_WALL,
        "0.05": "an illustrative weight size for bf16's spacing (about 2e-4 there), not a measurement",
    },
    "01_agentic_setting": {"16 seconds": FAST_MEASURED, "564 seconds": LEARNING_WALL},
    "02_environments": {
        "13 seconds": FAST_MEASURED,
        "39 seconds": LEARNING_WALL,
        "0.57": "worked in the text: the Wilson lower bound of 5 solved of 5, 5 / (5 + 1.96²)",
    },
    "03_trajectories_and_masks": {"133 seconds": FAST_MEASURED, "769 seconds": LEARNING_WALL},
    "04_policy_loss": {
        "28 seconds": FAST_MEASURED,
        "72 seconds": LEARNING_WALL,
        "0.28": "DAPO's published ε_high (Yu et al. 2025), quoted as an example",
    },
    "05_outcome_credit": {
        "3 minutes": FAST_ESTIMATE,
        "25 seconds": "seconds per RL step of the learning-mode run (16 s rollout, 9 s update on "
                      "average), from its metrics.jsonl under runs/ (not kept)",
        "11 minutes": WARM_START_ONCE,
    },
    "06_gigpo": {"3 minutes": FAST_ESTIMATE, "11 minutes": WARM_START_ONCE},
    "07_turn_rewards": {"3 minutes": FAST_ESTIMATE, "5.5 minutes": WARM_START_ONCE},
    "08_critic": {
        "3 minutes": FAST_ESTIMATE,
        "16.6 minutes": "the run's wall time with the kernel's start (README.md); its cells' sum is 16.5",
    },
    "09_llm_judge": {"11 minutes": "the judge's warm start, trained once: 650 s (cell 33) in the "
                                   "learning-mode run of 2026-12-07 that trained it (README); this run "
                                   "found it cached"},
    "11_scaling_out": {
        "38 seconds": FAST_MEASURED,
        "858 seconds": LEARNING_WALL,
        "7.9": "the kernel's peak memory in GB, sampled every 5 s by a script beside the learning-mode run "
               "(README)",
        "5 seconds": "the sampling interval of that memory script",
        "98%": "warm_start_signal's mean reward of the 48-step warm start (0.981), a table in "
               "benchmarks/README.md with no results file",
    },
}


def results_evidence(notebook: dict) -> Evidence:
    """The results files of the benchmarks a notebook names (``credit_shootout`` names credit_shootout.md and
    credit_shootout_runs.json; a ``_runs`` file without such a sibling, like judge_runs.json, is named by its
    own stem: "judge" alone would name it in every notebook that mentions a judge)."""
    text = "\n".join("".join(cell["source"]) for cell in notebook["cells"])
    stems = {path.stem for path in RESULTS}

    def name(path: Path) -> str:
        short = path.stem.removesuffix("_runs")
        return short if short in stems else path.stem

    named = [path for path in RESULTS if re.search(rf"\b{name(path)}", text)]
    evidence = Evidence("\n".join(path.read_text(encoding="utf-8") for path in named))
    for path in named:
        if path.suffix == ".json":
            evidence.add_json(json.loads(path.read_text(encoding="utf-8")))
    return evidence


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_cited_numbers_come_from_a_run(path: Path) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    allowed = ALLOWED.get(path.stem, {})
    problems = [f"cell {index}: {number}"
                for index, number in unsupported_numbers(notebook, results_evidence(notebook))
                if number not in allowed]
    assert not problems, (f"{path.name}: numbers in the markdown that no output, code constant or "
                          "benchmarks/results file shows (re-run and update the sentence, or add the number "
                          "to ALLOWED with its reason):\n" + "\n".join(problems))


@pytest.mark.parametrize("stem", sorted(ALLOWED))
def test_allow_list_is_still_needed(stem: str) -> None:
    """An allowed number the notebook no longer cites unsupported is dropped from the list."""
    notebook = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))
    cited = {number for _, number in unsupported_numbers(notebook, results_evidence(notebook))}
    stale = sorted(set(ALLOWED[stem]) - cited)
    assert not stale, f"{stem}: allowed numbers that are now supported or no longer cited: {stale}"


# --- the checker on a made-up notebook ----------------------------------------------------------------------
def _synthetic(markdown: str) -> dict:
    return {"cells": [
        {"cell_type": "code", "source": ["EPOCHS = 3  # about 5 minutes to download\n", "threshold = 0.35\n"],
         "metadata": {"execution": {"iopub.execute_input": "2026-01-01T00:00:00Z",
                                    "shell.execute_reply": "2026-01-01T00:01:58Z"}},
         "outputs": [{"output_type": "stream", "name": "stdout",
                      "text": ["success 0.7250 [0.521, 0.798], ratio 1.68\n"]},
                     {"output_type": "execute_result",
                      "data": {"text/html": ["<td>0.6667</td><td>-0.025</td><td>12.3 s</td>"]}}]},
        {"cell_type": "markdown", "source": [markdown]},
    ]}


@pytest.mark.parametrize("markdown", [
    "Success is 0.7250.",  # as printed
    "Success is about 0.73, and 0.72 at the threshold 0.35.",  # rounded either way at 0.725, and a constant
    "About 67% of the runs, a 1.7x speed-up.",  # a fraction as a percentage, a rounded multiplier
    "The score drops by −0.025 in 12 seconds.",  # unicode minus, a duration
    "The clip is `eps = 0.2` and $\\gamma = 0.95$; see [v1](https://x.org/0.9).",  # code, maths, a link
    "Qwen2.5-0.5B is the model.",  # a name, not a number
    "The whole notebook took 2 minutes.",  # the cells' recorded times, 118 s
    "Held-out success 0.73 [0.52, 0.80].",  # an interval, rounded as a whole
])
def test_checker_accepts_supported_numbers(markdown: str) -> None:
    assert unsupported_numbers(_synthetic(markdown), Evidence("")) == []


@pytest.mark.parametrize(("markdown", "number"), [
    ("Success is 0.81.", "0.81"),
    ("Success is 0.726.", "0.726"),  # more precise than, and different from, the output
    ("About 70% of the runs.", "70%"),
    ("A 2.1x speed-up.", "2.1x"),
    ("It took 40 seconds.", "40 seconds"),
    ("Three epochs took 3 minutes.", "3 minutes"),  # EPOCHS = 3 is not a time
    ("About 5 minutes to download.", "5 minutes"),  # a comment in code is not evidence
    ("A 0.35 threshold, then 0.9 at best.", "0.9"),  # the constant supports 0.35, nothing supports 0.9
    ("Held-out success 0.73 [0.67, 0.80].", "0.73 [0.67, 0.80]"),  # 0.6667 is there, but not as this interval
])
def test_checker_flags_unsupported_numbers(markdown: str, number: str) -> None:
    assert [n for _, n in unsupported_numbers(_synthetic(markdown), Evidence(""))] == [number]


def test_results_files_are_evidence() -> None:
    assert unsupported_numbers(_synthetic("A gap of 0.41."), Evidence("| grpo | 0.4133 |")) == []
    results = Evidence("")
    results.add_json([{"env": "lookup", "accuracy": 0.907, "accuracy_ci": [0.811, 0.977]}])
    assert unsupported_numbers(_synthetic("It ranks 0.91 [0.81, 0.98] of the pairs."), results) == []
    assert unsupported_numbers(_synthetic("It ranks 0.91 [0.80, 0.98] of the pairs."), results) != []


def test_a_notebook_draws_on_the_results_files_it_names() -> None:
    names = {path.name for path in RESULTS}
    assert {"credit_shootout.md", "credit_shootout_runs.json"} <= names  # the files this test relies on
    evidence = results_evidence(_synthetic("See `benchmarks/results/credit_shootout.md`."))
    named = [path for path in RESULTS if path.name in {"credit_shootout.md", "credit_shootout_runs.json"}]
    assert evidence.values == Evidence("\n".join(path.read_text() for path in named)).values
    assert results_evidence(_synthetic("No benchmark named here.")).values == set()
