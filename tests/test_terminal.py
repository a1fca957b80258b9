"""The terminal environment: the expert solves the tasks, the verifier judges the final directory,
model mistakes come back as observations, hostile commands stay inside, the data regenerates."""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from pathlib import Path

import pytest

from course_lib.envs import data_dir, load_tasks, make_env
from course_lib.envs.bwrap import bwrap_available
from course_lib.envs.sandbox import Limits
from course_lib.envs.terminal import TerminalEnv
from course_lib.protocol import format_answer, format_tool_call
from course_lib.tasks.terminal import FAMILIES, generate

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) is not available here")


def run(command: str) -> str:
    return format_tool_call("run", {"command": command})


def play_expert(env: TerminalEnv, task: dict) -> float:
    env.reset(task)
    while True:
        result = env.step(env.expert_action())
        if result.done:
            return result.reward


@pytest.fixture
def env():
    environment = make_env("terminal")
    yield environment
    environment.close()


def first_task(family: str) -> dict:
    return next(t for t in load_tasks("terminal", "test") if t["family"] == family)


# ----- the expert and the data ------------------------------------------------------------------------


def test_expert_solves_the_test_tasks(env):
    tasks = load_tasks("terminal", "test")
    rewards = [play_expert(env, task) for task in tasks]
    failed = [task["id"] for task, reward in zip(tasks, rewards) if reward != 1.0]
    assert not failed, f"the expert failed {len(failed)} of {len(tasks)}: {failed}"


def test_task_sets_are_large_disjoint_and_cover_the_families():
    train, test = load_tasks("terminal", "train"), load_tasks("terminal", "test")
    assert len(train) >= 100 and len(test) >= 30
    assert len({t["family"] for t in test}) >= 6 and {t["family"] for t in train} == set(FAMILIES)

    def content(task: dict) -> str:
        return json.dumps([task["instruction"], task["files"], task["modes"]], sort_keys=True)

    assert not {content(t) for t in train} & {content(t) for t in test}
    assert len({t["id"] for t in train + test}) == len(train) + len(test)


def test_regenerating_the_data_gives_identical_bytes(tmp_path):
    generate(tmp_path / "a")
    generate(tmp_path / "b", seed=0)
    for split in ("train", "test"):
        committed = (data_dir() / "terminal" / f"{split}.jsonl").read_bytes()
        assert (tmp_path / "a" / f"{split}.jsonl").read_bytes() == committed
        assert (tmp_path / "b" / f"{split}.jsonl").read_bytes() == committed
    generate(tmp_path / "c", seed=1)
    assert (tmp_path / "c" / "test.jsonl").read_bytes() != (tmp_path / "a" / "test.jsonl").read_bytes()


def test_check_is_not_in_the_episode_directory(env):
    task = first_task("extract_column")
    first = env.reset(task)
    assert task["instruction"] in first and "people.csv" in first
    files = sorted(str(p.relative_to(env.workdir)) for p in env.workdir.rglob("*") if p.is_file())
    assert files == sorted(task["files"])
    assert "EXPECTED" not in first


# ----- the verifier --------------------------------------------------------------------------------


def test_correct_work_scores_one(env):
    task = first_task("count_matches")
    env.reset(task)
    assert not env.step(run(task["solution"][0])).done
    result = env.step(format_answer("done"))
    assert result.done and result.reward == 1.0 and result.info["check"] == "passed"


def test_answering_without_doing_the_work_scores_zero(env):
    env.reset(first_task("organise"))
    result = env.step(format_answer("done"))
    assert result.done and result.reward == 0.0
    assert result.info["check"].startswith("failed")


def test_wrong_work_scores_zero(env):
    task = first_task("extract_column")
    env.reset(task)
    env.step(run("cut -d, -f1 people.csv > emails.txt"))  # a column, but not the emails
    result = env.step(format_answer("done"))
    assert result.reward == 0.0 and "emails.txt" in result.info["check"]


def test_malformed_actions_give_an_error_and_the_episode_goes_on(env):
    task = first_task("dedupe")
    env.reset(task)
    malformed = [
        "I will now remove the duplicates.",  # no tag at all
        '<tool_call>{"name": "run", "arguments": {"command": "ls"</tool_call>',  # broken JSON
        '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>',  # unknown tool
        '<tool_call>{"name": "run", "arguments": {"cmd": "ls"}}</tool_call>',  # wrong argument name
        '<tool_call>{"name": "run", "arguments": {"command": 42}}</tool_call>',  # wrong type
        run("   "),  # empty command (the tool's own error)
        "<answer>done",  # unclosed answer
    ]
    for text in malformed:
        result = env.step(text)
        assert not result.done and result.observation.startswith("Error:"), text
    # The expert picks up from there and solves the task.
    env.max_turns = 20
    while not result.done:
        result = env.step(env.expert_action())
    assert result.reward == 1.0


def test_failing_command_shows_its_exit_code(env):
    env.reset(first_task("dedupe"))
    observation = env.step(run("ls no-such-file")).observation
    assert "No such file" in observation and observation.endswith("[exit code 2]")


def test_turn_limit_ends_the_episode_and_the_check_still_runs():
    env = TerminalEnv(max_turns=1)
    try:
        task = first_task("concatenate")
        env.reset(task)
        result = env.step(run(task["solution"][0]))
        assert result.done and result.info.get("turn_limit") and result.reward == 1.0
    finally:
        env.close()


def test_check_is_not_fooled_by_files_the_agent_leaves(env):
    task = first_task("extract_column")
    env.reset(task)
    # A FIFO where the answer should be (reading it would block) and a module that would pass any check.
    env.step(run("mkfifo emails.txt; printf 'import sys\\nsys.exit(0)\\n' > pathlib.py; cp pathlib.py os.py"))
    assert env.step(format_answer("done")).reward == 0.0


def test_close_removes_the_directory(env):
    env.reset(first_task("cleanup"))
    workdir = env.workdir
    env.step(run("mkdir -p locked/in && chmod 000 locked/in locked"))
    env.close()
    assert not workdir.exists()
    env.close()  # twice is fine


# ----- hostile commands ------------------------------------------------------------------------------


@needs_bwrap
def test_hostile_commands_are_contained_and_the_episode_goes_on():
    env = TerminalEnv(max_turns=20, limits=Limits(wall_seconds=3.0))
    host_file = Path(tempfile.gettempdir()) / f"host-file-{secrets.token_hex(6)}"
    host_file.write_text("keep me")
    try:
        task = first_task("organise")
        env.reset(task)
        attacks = ["cat /etc/shadow", f"rm -rf {host_file}; echo x > ../escape; echo x > /etc/motd",
                   "kill -9 -1", "rm -rf --no-preserve-root / 2>/dev/null; ls -a /workspace"]
        for attack in attacks:
            result = env.step(run(attack))
            assert not result.done and "[" in result.observation  # a normal observation with its note
        assert "Permission denied" in env.step(run("cat /etc/shadow")).observation
        assert host_file.read_text() == "keep me"
        assert Path("/etc/passwd").exists() and Path(__file__).exists()
        # The episode goes on: the directory is empty now (the agent deleted its own files), but usable.
        assert env.step(run("echo still here > proof.txt && cat proof.txt")).observation.startswith("still "
                                                                                                    "here")
        assert (env.workdir / "proof.txt").exists()
    finally:
        host_file.unlink()
        env.close()


@needs_bwrap
def test_a_tree_too_deep_for_the_host_costs_the_agent_its_episode_only():
    # Past PATH_MAX and Python's recursion limit: walking it by host path broke every later command,
    # and the check's exception escaped step() and the whole batched rollout.
    env = TerminalEnv(limits=Limits(wall_seconds=20.0))
    try:
        env.reset(first_task("organise"))
        workdir = env.workdir
        nest = ("python3 -c \"import os\nfor name in ['e' * 200] * 25 + ['d'] * 1500:\n"
                "    os.mkdir(name); os.chdir(name)\"")
        assert env.step(run(nest)).observation == "[exit code 0]"
        observation = env.step(run("echo still here > proof.txt && cat proof.txt")).observation
        assert observation == "still here\n[exit code 0]"
        result = env.step(format_answer("done"))
        assert result.done and result.reward == 0.0 and result.info["check"].startswith("failed: "
                                                                                        "AssertionError")
    finally:
        env.close()
    assert not workdir.exists()


def test_a_check_that_cannot_run_scores_zero_with_a_note(env, monkeypatch):
    def unrunnable(*args, **kwargs):
        raise OSError(36, "File name too long")

    env.reset(first_task("organise"))
    monkeypatch.setattr("course_lib.envs.terminal.run_sandboxed", unrunnable)
    result = env.step(format_answer("done"))
    assert result.done and result.reward == 0.0
    assert result.info["check"] == "not run: OSError: [Errno 36] File name too long"


@needs_bwrap
def test_same_state_gives_the_same_observation_in_every_episode():
    # GiGPO anchors: the directory appears at /workspace whatever its real path.
    task = first_task("rename_extension")
    observations = []
    for _ in range(2):
        env = TerminalEnv()
        try:
            env.reset(task)
            observations.append(env.step(run("pwd; ls -l")).observation)
            assert env.state_key() == observations[-1]
        finally:
            env.close()
    assert observations[0] == observations[1] and observations[0].startswith("/workspace\n")


def test_task_modes_are_applied(env):
    task = first_task("permissions")
    env.reset(task)
    for path, mode in task["modes"].items():
        assert os.stat(env.workdir / path).st_mode & 0o777 == int(mode, 8)
