"""Running notebooks from the command line (`course_lib.course.notebooks`): widget state is stripped, and
the command explains itself."""

from __future__ import annotations

import subprocess
import sys

import nbformat

from course_lib.course.notebooks import strip_widget_state


def test_strip_widget_state_keeps_everything_else(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    cell = nbformat.v4.new_code_cell("print(1)")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "text/plain": "1", "application/vnd.jupyter.widget-view+json": {"model_id": "x"}})]
    nb.cells.append(cell)
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    strip_widget_state(str(path))
    back = nbformat.read(path, as_version=4)
    assert "widgets" not in back.metadata
    assert back.cells[0].outputs[0]["data"] == {"text/plain": "1"}
    assert back.cells[0].source == "print(1)"


def test_the_command_without_notebooks_prints_its_usage():
    run = subprocess.run([sys.executable, "-m", "course_lib.course.notebooks"], capture_output=True,
                         text=True)
    assert run.returncode == 1 and "usage: python -m course_lib.course.notebooks [--learning]" in run.stderr
