"""Data generation is reproducible byte for byte, and --check catches a stale file."""

from __future__ import annotations

import json
import shutil

import pytest

from course_lib import data
from course_lib.envs import data_dir

MINE = ["search_qa", "gridworld"]


def test_regenerating_gives_the_committed_bytes(tmp_path):
    assert data.generate_all(tmp_path, seed=0, only=MINE) == MINE
    for name in MINE:
        assert data.compare_trees(tmp_path / name, data_dir() / name) == []


def test_check_names_a_changed_file(tmp_path, capsys):
    copy = tmp_path / "data"
    for name in MINE:
        shutil.copytree(data_dir() / name, copy / name)
    assert data.main(["--check", "--only", *MINE, "--out", str(copy)]) == 0
    with (copy / "gridworld" / "test.jsonl").open("a") as f:
        f.write("{}\n")
    assert data.main(["--check", "--only", *MINE, "--out", str(copy)]) == 1
    assert "gridworld/test.jsonl: differs" in capsys.readouterr().out


def test_missing_environment_module_is_skipped(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(data, "ENV_NAMES", [*data.ENV_NAMES, "not_written_yet"])
    assert data.generate_all(tmp_path, only=["not_written_yet"]) == []
    assert "skipped" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no data generator"):
        data.generate_all(tmp_path, only=["gridwrld"])


def test_write_jsonl_is_canonical(tmp_path):
    path = tmp_path / "rows.jsonl"
    data.write_jsonl(path, [{"b": 1, "a": "Ørsted"}, {"c": [1, 2]}])
    raw = path.read_bytes()
    assert raw == '{"a": "Ørsted", "b": 1}\n{"c": [1, 2]}\n'.encode()
    assert [json.loads(line) for line in raw.decode().splitlines()] == [{"a": "Ørsted", "b": 1}, {"c": [1, 2]}]
