"""The Colab path: every notebook's badge, first cell and links come from the one repository URL, and the
first cell's install works in a fresh virtual environment with `google.colab` faked present.

The fresh venv sees this project's installed dependencies through a .pth line (a plain path: the
editable install of this checkout is not carried over), so the install resolves without downloading
the multi-GB stack, while the course itself is cloned from this repository and installed anew.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import colab  # noqa: E402
import colab_install  # noqa: E402

FAKE_COLAB = "import sys, types; sys.modules['google'] = types.ModuleType('google'); " \
             "sys.modules['google.colab'] = types.ModuleType('google.colab')\n"


def test_notebooks_agree_with_the_repository_url():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "colab.py"), "--check"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    repo = colab.repository()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        text = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
        assert f"{repo}.git" in text and "](../" not in text, path.name


def test_the_generator_rewrites_badges_cells_and_links():
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# x\n[![b](https://c)]"
                                              "(https://colab.research.google.com/github/old/repo/"
                                              "blob/main/notebooks/x.ipynb) "
                                              "see [the table](../benchmarks/README.md#top)"),
                nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\n# On Colab: old text")]
    assert colab.colab_cells(nb, "x.ipynb", "https://github.com/me/course")
    assert "colab.research.google.com/github/me/course/blob/main/notebooks/x.ipynb" in nb.cells[0].source
    assert "(https://github.com/me/course/blob/main/benchmarks/README.md#top)" in nb.cells[0].source
    assert "https://github.com/me/course.git" in nb.cells[1].source
    assert not colab.colab_cells(nb, "x.ipynb", "https://github.com/me/course")  # idempotent
    nb.cells[1].source = "print(1)"
    with pytest.raises(ValueError, match="one install cell"):
        colab.colab_cells(nb, "x.ipynb", "https://github.com/me/course")


def test_changed_versions_names_only_loaded_packages_that_moved():
    before = {"numpy": "2.0.0", "tqdm": "4.66.0"}
    after = {"numpy": "2.0.0", "tqdm": "4.67.1", "trl": "1.16.0"}
    assert colab_install.changed_versions(before, after) == {"tqdm": ("4.66.0", "4.67.1")}


def _fresh_venv(tmp_path: Path) -> Path:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "course_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def _install_cell() -> str:
    cells = json.loads((ROOT / "notebooks" / "00_setup.ipynb").read_text())["cells"]
    return next("".join(c["source"]) for c in cells
                if c["cell_type"] == "code" and colab.INSTALL_MARKER in "".join(c["source"]))


def _run_cell(python: Path, tmp_path: Path, prelude: str = "") -> subprocess.CompletedProcess:
    code = (FAKE_COLAB + prelude + _install_cell()
            + "\nimport course_lib; print('course_lib from', course_lib.__file__)\n")
    env = {**os.environ, "COURSE_REPO": str(ROOT), "COURSE_HOME": str(tmp_path / "content" / "course"),
           "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=900)


@pytest.mark.timeout(1200)
def test_install_cell_in_a_fresh_venv_with_colab_faked(tmp_path):
    python = _fresh_venv(tmp_path)
    first = _run_cell(python, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    home = tmp_path / "content" / "course"
    assert f"course_lib from {home}" in first.stdout  # the clone, not this checkout
    assert f"working folder {home / 'notebooks'}" in first.stdout
    assert ("sandbox: bubblewrap found" if shutil.which("bwrap")
            else "sandbox: bubblewrap missing") in first.stdout
    assert "RESTART NEEDED" not in first.stdout + first.stderr
    # a second run (as after a restart) skips the clone and the install
    second = _run_cell(python, tmp_path)
    assert second.returncode == 0 and "course_lib from" in second.stdout, second.stdout + second.stderr


@pytest.mark.timeout(1200)
def test_install_cell_asks_for_a_restart_when_it_replaces_a_loaded_package(tmp_path):
    python = _fresh_venv(tmp_path)
    home = tmp_path / "content" / "course"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(home)], check=True)
    # the course now needs another tqdm than the one the "kernel" imported before the cell ran
    loaded = metadata.version("tqdm")
    other = "4.66.5" if loaded != "4.66.5" else "4.66.4"
    pyproject = home / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"tqdm>=4.66"', f'"tqdm=={other}"'))
    assert f"tqdm=={other}" in pyproject.read_text()
    out = _run_cell(python, tmp_path, prelude="import tqdm\n")
    assert out.returncode != 0
    assert ("RESTART NEEDED" in out.stderr
            and f"tqdm {loaded} -> {other}" in out.stderr), out.stdout + out.stderr
