"""Task files: written byte-reproducibly, and compared byte for byte."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write one JSON object per line, byte-reproducibly.

    Sorted keys, UTF-8 without escaping, "\\n" line ends on every platform and a newline after
    the last row: the same rows always give the same bytes.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def compare_trees(expected: Path, actual: Path) -> list[str]:
    """The differences between two folders, one readable line per file (empty when identical)."""
    problems = []
    expected_files, actual_files = _files(expected), _files(actual)
    for rel in sorted(expected_files | actual_files):
        if rel not in actual_files:
            problems.append(f"{actual / rel}: missing (the generator writes it)")
        elif rel not in expected_files:
            problems.append(f"{actual / rel}: not written by the generator")
        elif (expected / rel).read_bytes() != (actual / rel).read_bytes():
            problems.append(f"{actual / rel}: differs from a fresh generation")
    return problems
