"""A notebook's first cells (`course_lib.course.setup`): the sizes of the two modes, seeding, the one-line
report, and the committed reference results."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from course_lib.course import setup


def test_pick_follows_the_mode(monkeypatch):
    monkeypatch.setenv("COURSE_FAST", "1")
    assert setup.pick("fast", "full") == "fast"
    monkeypatch.setenv("COURSE_FAST", "0")
    assert setup.pick("fast", "full") == "full"


def test_seed_everything_repeats_every_generator():
    setup.seed_everything(3)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    setup.seed_everything(3)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_course_setup_prints_one_line_and_warns_on_a_small_disk(monkeypatch, capsys):
    monkeypatch.setattr(setup, "_free_gb_for_runs", lambda: 1.0)
    info = setup.course_setup(seed=7, threads=1)
    out = capsys.readouterr().out.splitlines()
    assert info["seed"] == 7 and out[0].startswith("mode: ") and "seed: 7" in out[0]
    assert out[1].startswith("WARNING: 1.0 GB free for the runs folder")


def test_reference_results_reads_the_committed_files():
    assert "results" in setup.reference_results("tabular_credit.json")
    with pytest.raises(FileNotFoundError, match="ships with the course repository"):
        setup.reference_results("no_such_file.json")
