"""Write the Colab parts of every notebook from the one repository URL in pyproject.toml.

    python tools/colab.py            # rewrite the notebooks in place
    python tools/colab.py --check    # exit 1, listing the notebooks that differ, without writing

Three parts come from `[project.urls] Repository`:
- the "Open in Colab" badge in the first markdown cell;
- the first code cell, which on Colab clones the course and runs tools/colab_install.py (elsewhere it
  does nothing);
- links from markdown to files of the repository, written as absolute GitHub links
  (`<repo>/blob/main/<path>`), which resolve on GitHub, on Colab and in a local Jupyter alike.
  A relative link such as `../benchmarks/README.md` resolves on GitHub only.
Outputs, execution counts and metadata are left as they are.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
INSTALL_MARKER = "# On Colab:"  # the first line after NBVAL_IGNORE_OUTPUT of the install cell

INSTALL_CELL = '''# NBVAL_IGNORE_OUTPUT
# On Colab: fetch the course and install it (about 2 minutes); elsewhere this cell does nothing.
import os, runpy, subprocess, sys
if "google.colab" in sys.modules:
    home = os.environ.get("COURSE_HOME", "/content/course")
    if not os.path.isdir(home):
        subprocess.run(["git", "clone", "-q", "--depth", "1", os.environ.get("COURSE_REPO", "{repo}.git"), home], check=True)
    runpy.run_path(os.path.join(home, "tools", "colab_install.py"), run_name="__main__")'''

_BADGE = re.compile(r"\(https://colab\.research\.google\.com/github/[^)]*?/blob/main/notebooks/[^)]*\)")
_RELATIVE_LINK = re.compile(r"\]\(\.\./([^)#\s]+)(#[^)\s]*)?\)")


def repository() -> str:
    """The repository URL (no trailing .git) from pyproject.toml's [project.urls] Repository."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["project"]["urls"]["Repository"].rstrip("/").removesuffix(".git")


def colab_cells(nb: nbformat.NotebookNode, name: str, repo: str) -> bool:
    """Rewrite the badge, the install cell and the relative links of `nb`; True if anything changed."""
    slug = repo.removeprefix("https://github.com/")
    badge = f"(https://colab.research.google.com/github/{slug}/blob/main/notebooks/{name})"
    before = [cell.source for cell in nb.cells]
    install = [c for c in nb.cells if c.cell_type == "code" and INSTALL_MARKER in c.source]
    if len(install) != 1:
        raise ValueError(f"{name}: expected one install cell (a code cell with {INSTALL_MARKER!r}), found {len(install)}")
    install[0].source = INSTALL_CELL.replace("{repo}", repo)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _BADGE.sub(badge, cell.source)
            cell.source = _RELATIVE_LINK.sub(lambda m: f"]({repo}/blob/main/{m.group(1)}{m.group(2) or ''})", cell.source)
    if badge not in nb.cells[0].source:
        raise ValueError(f"{name}: the first cell has no Colab badge")
    return before != [cell.source for cell in nb.cells]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a notebook would change")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args()
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    repo, stale = repository(), []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if colab_cells(nb, path.name, repo):
            stale.append(path.name)
            if not args.check:
                nbformat.write(nb, path)
    verb = "differ from" if args.check else "rewritten from"
    print(f"{len(stale)} of {len(paths)} notebooks {verb} {repo}" + (f": {', '.join(stale)}" if stale else ""))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
