"""Environments with an episode directory remove it: on close(), and also when dropped without close()."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from course_lib.envs import load_tasks, make_env

WORKDIR_ENVS = ["code_fix", "data_analysis", "terminal"]


@pytest.fixture
def unraisable(monkeypatch):
    """Errors raised where nobody can catch them, e.g. in a finalizer run by the garbage collector."""
    caught = []
    monkeypatch.setattr(sys, "unraisablehook", caught.append)
    return caught


@pytest.mark.parametrize("name", WORKDIR_ENVS)
def test_a_dropped_environment_removes_its_directory(name, unraisable):
    env = make_env(name)
    env.reset(load_tasks(name, "test", limit=1)[0])
    workdir = env.workdir
    assert workdir.is_dir()
    del env
    gc.collect()
    assert not workdir.exists()
    assert unraisable == []


@pytest.mark.parametrize("name", WORKDIR_ENVS)
def test_close_then_drop_is_harmless(name, unraisable):
    env = make_env(name)
    task = load_tasks(name, "test", limit=1)[0]
    env.reset(task)
    first = env.workdir
    env.reset(task)  # closes the first episode
    second = env.workdir
    env.close()
    env.close()
    assert not first.exists() and not second.exists()
    alive = weakref.ref(env)
    del env
    gc.collect()
    assert alive() is None  # the cleanup does not keep the environment alive
    assert unraisable == []


def test_an_environment_left_at_exit_removes_its_directory():
    script = ("from course_lib.envs import load_tasks, make_env\n"
              "env = make_env('terminal')\n"
              "env.reset(load_tasks('terminal', 'test', limit=1)[0])\n"
              "print(env.workdir)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert not Path(run.stdout.strip()).exists()
