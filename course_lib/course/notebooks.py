"""Run a notebook from the command line, as CI and the committed outputs do, and keep it clean.

    python -m course_lib.course.notebooks notebooks/01_agentic_setting.ipynb          # fast mode
    python -m course_lib.course.notebooks --learning notebooks/05_outcome_credit.ipynb

    run_notebook         execute a notebook in place (fast or learning mode), save it, strip widget state
    strip_widget_state   remove ipywidgets state (it breaks GitHub's renderer and nbval diffs)
"""

from __future__ import annotations

import os


def strip_widget_state(path: str) -> None:
    """Remove ipywidgets state from a notebook (it breaks GitHub's renderer and nbval diffs)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            data.pop("application/vnd.jupyter.widget-view+json", None)
    nbformat.write(nb, path)


def run_notebook(path: str, timeout: int = 3600, fast: bool = True) -> float:
    """Execute a notebook in place, in fast mode (what CI checks) or, with fast=False, in the default
    learning mode (what notebooks 05-08 and 10 commit), then clean it. Returns the wall time in seconds.

        python -m course_lib.course.notebooks notebooks/01_agentic_setting.ipynb          # fast mode
        python -m course_lib.course.notebooks --learning notebooks/05_outcome_credit.ipynb
    """
    import time

    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    t0 = time.time()
    before = os.environ.get("COURSE_FAST")
    if fast:  # the kernel inherits it; the caller's comes back below
        os.environ["COURSE_FAST"] = "1"
    else:  # unset, as a learner's kernel has it
        os.environ.pop("COURSE_FAST", None)
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}}).execute()
    finally:
        if before is None:
            os.environ.pop("COURSE_FAST", None)
        else:
            os.environ["COURSE_FAST"] = before
    seconds = time.time() - t0
    nbformat.write(nb, path)
    strip_widget_state(path)
    print(f"{path}: executed in {seconds:.0f} s ({'fast' if fast else 'learning'} mode)")
    return seconds


if __name__ == "__main__":
    import sys

    if not sys.argv[1:] or {"-h", "--help"} & set(sys.argv[1:]):
        raise SystemExit("usage: python -m course_lib.course.notebooks [--learning] NOTEBOOK.ipynb ...\n"
                         "Executes each notebook in place (fast mode, or the default learning mode with\n"
                         "--learning), saves its outputs, strips widget state and prints the wall time.")
    learning = "--learning" in sys.argv[1:]
    for p in sys.argv[1:]:
        if p != "--learning":
            run_notebook(p, fast=not learning)
