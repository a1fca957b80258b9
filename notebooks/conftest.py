"""`make test` runs every notebook in fast mode (nbval). With COURSE_TEST_DROP_RUNS=1 (the Makefile sets it) the
run folders a notebook created are deleted once its last cell has run, so the test run's disk peak is one
notebook's runs (about 3 GB) rather than all of them (over 12 GB). Warm starts stay: later notebooks reuse them.
A learner's own `runs/` is untouched: the Makefile points COURSE_RUNS at `runs/test/` for the tests."""

import os
import shutil
from pathlib import Path

from course_lib import runs_dir

_before: dict[Path, set[str]] = {}  # notebook file -> the runs folder's entries when its first cell started


def _dropping() -> bool:
    return os.environ.get("COURSE_TEST_DROP_RUNS") == "1"


def pytest_runtest_setup(item) -> None:
    notebook = Path(str(item.fspath))
    if _dropping() and notebook.suffix == ".ipynb" and notebook not in _before:
        root = runs_dir()
        _before[notebook] = {p.name for p in root.iterdir()} if root.is_dir() else set()


def pytest_runtest_teardown(item, nextitem) -> None:
    notebook = Path(str(item.fspath))
    if notebook not in _before or (nextitem is not None and Path(str(nextitem.fspath)) == notebook):
        return
    root = runs_dir()
    for entry in (root.iterdir() if root.is_dir() else []):
        if entry.name not in _before[notebook] and "warm_start" not in entry.name and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
