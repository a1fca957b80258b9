"""The trajectory viewer in a real browser: JupyterLab + headless Chromium (Debian's, driven by Playwright).

A tiny notebook builds a `TrajectoryViewer` over expert trajectories of the lookup environment; the
test runs it in JupyterLab, waits for the slider, screenshots it, moves the slider with the keyboard
and checks that the next turn's action appears. Screenshots go to runs/screenshots/viewer_*.png.
Skipped when Chromium or Playwright is missing (CI installs chromium in .ci/run).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "runs" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TOKEN = "course-browser-test"

NOTEBOOK_CELLS = [
    "from transformers import AutoTokenizer\n"
    "from course_lib.envs import load_tasks\n"
    "from course_lib.models import embedded_checkpoint\n"
    "from course_lib.rollout import expert_rollout\n"
    "from course_lib.viz import TrajectoryViewer\n"
    "tokenizer = AutoTokenizer.from_pretrained(embedded_checkpoint())\n"
    "trajectories = expert_rollout(tokenizer, 'lookup', load_tasks('lookup', 'test', limit=2))",
    "viewer = TrajectoryViewer(trajectories, tokenizer)\nviewer",
    "from course_lib.viz import show_mask\nshow_mask(trajectories[0], tokenizer)",
]


KERNEL_IDLE = """() => {
    const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const session = panel && panel.sessionContext && panel.sessionContext.session;
    const kernel = session && session.kernel;
    return kernel && kernel.status === "idle" && kernel.connectionStatus === "connected";
}"""


def _notebook() -> dict:
    cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": src}
             for src in NOTEBOOK_CELLS]
    return {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_server(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with code {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={TOKEN}", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"jupyter lab did not answer on port {port} within {timeout:.0f} s")


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on a free port, serving a folder with the viewer notebook; yields its URL."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium); the browser test needs it")
    pytest.importorskip("playwright.sync_api", reason="playwright (python) is not installed")
    pytest.importorskip("jupyterlab", reason="jupyterlab is not installed")
    (tmp_path / "viewer.ipynb").write_text(json.dumps(_notebook()))
    news = tmp_path / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text('{"fetchNews": "false"}')  # no "get Jupyter news?" popup over the screenshots
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), COURSE_FAST="1",
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"))
    log = open(tmp_path / "jupyter.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--allow-root",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={tmp_path}",
         "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: run the cells through Lab's own command
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for_server(port, proc)
        yield f"http://127.0.0.1:{port}/lab/tree/viewer.ipynb?token={TOKEN}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server's own process group: it and its kernel
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_trajectory_viewer_renders_and_follows_its_slider(lab):
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shots = [SCREENSHOTS / "viewer_turn0.png", SCREENSHOTS / "viewer_turn1.png",
             SCREENSHOTS / "viewer_mask.png"]
    failure = SCREENSHOTS / "viewer_failure.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            page.goto(lab, timeout=60_000)
            # the notebook's kernel is connected and idle: only then does run-all execute the cells
            page.wait_for_function(KERNEL_IDLE, timeout=60_000, polling=500)
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            handle = page.locator(".widget-slider .noUi-handle").first
            handle.wait_for(timeout=60_000)
            shown = page.locator(".jp-OutputArea .widget-html").first
            shown.get_by_text("Turn 0 of 1").wait_for(timeout=10_000)
            shown.scroll_into_view_if_needed()
            page.screenshot(path=str(shots[0]))
            assert "lookup" in shown.inner_text(), f"turn 0 shows no tool call; see {shots[0]}"

            handle.focus()
            page.keyboard.press("ArrowRight")
            shown.get_by_text("Turn 1 of 1").wait_for(timeout=10_000)
            page.screenshot(path=str(shots[1]))
            text = shown.inner_text()
            assert "<answer>" in text and "Turn 0 of 1" not in text, (
                f"the slider did not change the turn; see {shots[1]}")

            mask_view = page.locator(".jp-OutputArea .mask-view").first
            mask_view.wait_for(timeout=10_000)
            mask_view.screenshot(path=str(shots[2]))
            assert mask_view.locator(".tok-model").count() > 0, (
                f"the mask view shows no model tokens; see {shots[2]}")
        except PlaywrightError as exc:
            page.screenshot(path=str(failure))
            raise AssertionError(f"the viewer did not render or respond in JupyterLab: {exc}; "
                                 f"see {failure}") from exc
        finally:
            browser.close()
