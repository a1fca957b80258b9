"""The committed notebooks show what a learner sees.

An exercise cell is committed as a stub (a function whose body raises NotImplementedError, or an answer left
at None with a TODO), so its check must print "Not implemented yet", never "Correct!": outputs made with
COURSE_SOLUTIONS=1 would tell the learner that an answer nobody wrote has passed. And every code cell that
shows an output carries the metadata of the run that made it: its execution count and timing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))

# how the exercise stubs are written: a body that raises, or an answer left at None for the learner to fill in
_STUB = re.compile(r"^\s*raise NotImplementedError\b|^\s*\w+\s*=\s*None\s*#\s*TODO", re.MULTILINE)


def _code_cells(path: Path) -> list[tuple[int, dict]]:
    cells = json.loads(path.read_text())["cells"]
    return [(i, c) for i, c in enumerate(cells) if c["cell_type"] == "code"]


def _output_text(cell: dict) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append("".join(output.get("text", "")))
        parts.append("".join(output.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def test_the_notebooks_are_found() -> None:
    assert len(NOTEBOOKS) == 12


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_stub_shows_correct(path: Path) -> None:
    wrong = [f"cell {i}" for i, cell in _code_cells(path)
             if _STUB.search("".join(cell["source"])) and "Correct!" in _output_text(cell)]
    assert not wrong, (f"{path.name}: {', '.join(wrong)} print 'Correct!' under an unfilled stub; re-execute "
                       "them without COURSE_SOLUTIONS so they show 'Not implemented yet'")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_output_has_its_execution_metadata(path: Path) -> None:
    missing = [f"cell {i}" for i, cell in _code_cells(path)
               if cell.get("outputs") and (cell.get("execution_count") is None
                                           or "execution" not in cell.get("metadata", {}))]
    assert not missing, (f"{path.name}: {', '.join(missing)} show outputs without an execution count or "
                         "timing; re-execute them")


@pytest.mark.parametrize("source, stub", [
    ("def f(x):\n    # TODO: ...\n    raise NotImplementedError\n\nf = check_f(f)", True),
    ("omega = None  # TODO: the ω that ...\nomega = check_omega(omega)", True),
    ("def f(x):\n    return x + 1\n\nf = check_f(f)", False),
    ("server = None\nif url:\n    server = start(url)", False),
    ("except NotImplementedError:\n    pass", False),
])
def test_stub_pattern(source: str, stub: bool) -> None:
    assert bool(_STUB.search(source)) == stub
