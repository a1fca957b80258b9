"""Task generation (`course_lib.tasks`): reproducible byte for byte, one interface, one direction of
imports."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib import tasks
from course_lib.envs import data_dir, load_tasks

# the generators that run in a second or two
QUICK = ["lookup", "search_qa", "summarize", "gridworld", "gridworld_long", "search_chain"]
ENVS_DIR = Path(tasks.__file__).resolve().parents[1] / "envs"


def test_regenerating_gives_the_committed_bytes(tmp_path):
    assert tasks.generate_all(tmp_path, seed=0, only=QUICK) == QUICK
    for name in QUICK:
        assert tasks.compare_trees(tmp_path / name, data_dir() / name) == []


def test_check_names_a_changed_file(tmp_path, capsys):
    copy = tmp_path / "data"
    for name in ("lookup", "gridworld"):
        shutil.copytree(data_dir() / name, copy / name)
    assert tasks.main(["--check", "--only", "lookup", "gridworld", "--out", str(copy)]) == 0
    with (copy / "gridworld" / "test.jsonl").open("a") as f:
        f.write("{}\n")
    assert tasks.main(["--check", "--only", "lookup", "gridworld", "--out", str(copy)]) == 1
    assert "gridworld/test.jsonl: differs" in capsys.readouterr().out


def test_the_command_line_checks():
    result = subprocess.run([sys.executable, "-m", "course_lib.tasks", "--check", "--only", "lookup"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "data is up to date" in result.stdout, result.stdout + result.stderr


def test_an_unknown_environment_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no task generator for 'gridwrld'"):
        tasks.generate_all(tmp_path, only=["gridwrld"])
    assert not any(tmp_path.iterdir())  # checked before anything was written


@pytest.mark.parametrize("env", tasks.ENV_NAMES)
def test_every_generator_has_the_same_make_tasks(env):
    seen: set[str] = set()
    train = tasks.make_tasks(env, 3, seed=0, split="train", seen=seen)
    assert len(train) == 3 and len(seen) >= 3
    assert all(task["id"].startswith(env) for task in train)
    assert train == load_tasks(env, "train", limit=3)  # the shipped files are make_tasks' output
    assert tasks.make_tasks(env, 3, seed=0, split="train") == train  # seeded


def test_the_test_split_excludes_what_seen_holds():
    seen: set[str] = set()
    train = tasks.make_tasks("gridworld", 50, split="train", seen=seen)
    test = tasks.make_tasks("gridworld", 20, split="test", seen=seen)
    assert not {"/".join(t["grid"]) for t in train} & {"/".join(t["grid"]) for t in test}


def test_write_jsonl_is_canonical(tmp_path):
    path = tmp_path / "rows.jsonl"
    tasks.write_jsonl(path, [{"b": 1, "a": "Ørsted"}, {"c": [1, 2]}])
    raw = path.read_bytes()
    assert raw == '{"a": "Ørsted", "b": 1}\n{"c": [1, 2]}\n'.encode()
    assert ([json.loads(line) for line in raw.decode().splitlines()]
            == [{"a": "Ørsted", "b": 1}, {"c": [1, 2]}])


def test_filter_tasks_keeps_matching_tasks_and_refuses_a_typo():
    qa = load_tasks("search_qa", "train", limit=40)
    two_hop = tasks.filter_tasks(qa, {"hops": 2})
    assert two_hop and all(t["hops"] == 2 for t in two_hop)
    assert tasks.filter_tasks(qa, None) is qa
    with pytest.raises(ValueError, match="no task matches"):
        tasks.filter_tasks(qa, {"hop": 2})


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_environments_never_import_the_task_generators():
    """Layering: tasks import envs, never the reverse."""
    for path in sorted(ENVS_DIR.glob("*.py")):
        imported = _imported_modules(path)
        assert not {m for m in imported if m.startswith("course_lib.tasks")}, path.name


def test_environment_modules_hold_no_generators():
    for path in sorted(ENVS_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        generators = {"make_tasks", "generate", "make_corpus", "make_questions", "make_map", "write_csvs"}
        assert not functions & generators, path.name
