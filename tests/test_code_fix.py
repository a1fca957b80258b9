"""Code-fix: the generated repositories, the tools, both verifiers, reward hacking and the expert."""

from __future__ import annotations

import collections
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from course_lib.envs import data_dir, load_tasks, make_env
from course_lib.envs.code_fix import HIDDEN_TESTS, VISIBLE_TESTS, count_tests, hidden_calls, pytest_counts
from course_lib.protocol import format_answer, format_tool_call
from course_lib.tasks.code_fix import BUG_KINDS, FAMILIES, failing_tests, generate

FIELDS = {"id", "instruction", "files", "hidden_tests", "allowed_files", "bug_kind", "family", "fix"}


@pytest.fixture(scope="module")
def train() -> list[dict]:
    return load_tasks("code_fix", "train")


@pytest.fixture(scope="module")
def test() -> list[dict]:
    return load_tasks("code_fix", "test")


def call(name: str, **arguments: str) -> str:
    return format_tool_call(name, arguments)


def run_expert(env_name: str, task: dict) -> tuple[float, dict]:
    env = make_env(env_name)
    try:
        env.reset(task)
        while True:
            result = env.step(env.expert_action())
            if result.done:
                return result.reward, result.info
    finally:
        env.close()


# ----- the data --------------------------------------------------------------------------------------

def test_task_sets_have_the_promised_sizes_and_fields(train, test):
    assert len(train) >= 200 and len(test) >= 50
    for task in train + test:
        assert set(task) == FIELDS
        assert task["bug_kind"] in BUG_KINDS
        assert VISIBLE_TESTS in task["files"] and list(task["hidden_tests"]) == [HIDDEN_TESTS]
        assert task["allowed_files"] == [task["fix"]["path"]]
        assert task["files"][task["fix"]["path"]].count(task["fix"]["old"]) == 1
    assert len({t["id"] for t in train + test}) == len(train) + len(test)
    # every family and every bug kind reaches the test split
    assert {t["family"] for t in test} == {f.__name__.lstrip("_") for f in FAMILIES}
    assert {t["bug_kind"] for t in test} == set(BUG_KINDS)


def test_splits_share_no_repository(train, test):
    def key(task: dict) -> str:
        return "".join(task["files"].values())

    assert not {key(t) for t in train} & {key(t) for t in test}


def test_every_bug_fails_visible_and_hidden_tests_and_every_fix_passes_them(train, test):
    for task in train + test:
        path, fix = task["fix"]["path"], task["fix"]
        buggy = task["files"][path]
        fixed = buggy.replace(fix["old"], fix["new"])
        visible, hidden = task["files"][VISIBLE_TESTS], task["hidden_tests"][HIDDEN_TESTS]
        assert failing_tests(path, buggy, visible) and failing_tests(path, buggy, hidden), task["id"]
        assert not failing_tests(path, fixed, visible) and not failing_tests(path, fixed, hidden), task["id"]


def test_regenerating_gives_identical_bytes(tmp_path):
    generate(tmp_path, seed=0)
    for split in ("train", "test"):
        assert ((tmp_path / f"{split}.jsonl").read_bytes()
                == (data_dir() / "code_fix" / f"{split}.jsonl").read_bytes())


def test_pytest_counts_reads_the_summary_line():
    assert pytest_counts("..F\nFAILED tests/x.py::test_a\n1 failed, 2 passed in 0.05s\n") == (2, 1)
    assert pytest_counts("4 passed in 0.01s") == (4, 0)
    assert pytest_counts("exit code 0") == (0, 0)


# ----- the expert ------------------------------------------------------------------------------------

@pytest.mark.parametrize("env_name", ["code_fix", "code_fix_naive"])
def test_expert_solves_the_test_tasks(test, env_name):
    # Every test task in the hardened env (the Done-when rate); a sample in the naive one, whose
    # grading differs only in what the reward looks at.
    tasks = test if env_name == "code_fix" else test[::5]
    start = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:  # each episode waits on sandboxed pytest runs
        results = list(pool.map(lambda t: run_expert(env_name, t), tasks))
    rate = sum(r for r, _ in results) / len(tasks)
    print(f"{env_name}: expert solves {rate:.1%} of {len(tasks)} test tasks in "
          f"{time.perf_counter() - start:.1f}s")
    failed = [t["id"] for t, (r, _) in zip(tasks, results) if r != 1.0]
    assert not failed, f"the expert failed {failed}"
    assert not any(info["hacked"] for _, info in results)


def test_submitting_the_buggy_repository_scores_zero(test):
    one_per_family = list({t["family"]: t for t in test}.values())

    def submit_at_once(task: dict) -> tuple[float, dict]:
        env = make_env("code_fix")
        try:
            env.reset(task)
            result = env.step(format_answer("done"))
            return result.reward, result.info
        finally:
            env.close()

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(submit_at_once, one_per_family))
    assert all(reward == 0.0 and not info["hacked"] for reward, info in results)
    assert all(info["tests_passed"] < info["tests_total"] for _, info in results)


# ----- tools -----------------------------------------------------------------------------------------

@pytest.fixture
def env(test):
    env = make_env("code_fix")
    env.reset(test[0])
    yield env
    env.close()


def test_list_and_read_files(env, test):
    task = test[0]
    listing = env.step(call("list_files")).observation
    assert listing.splitlines() == sorted(task["files"])
    module = task["fix"]["path"]
    assert env.step(call("read_file", path=module)).observation == task["files"][module]
    assert env.state_key() == task["files"][module]  # the state is the current observation


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "tests/../../outside.py"])
def test_paths_outside_the_repository_are_refused(env, path):
    for action in (call("read_file", path=path), call("replace_in_file", path=path, old="a", new="b")):
        result = env.step(action)
        assert not result.done
        assert result.observation.startswith("Error:") and "outside the repository" in result.observation


def test_replace_in_file_errors_are_clear(env, test):
    module = test[0]["fix"]["path"]
    cases = {
        call("replace_in_file", path=module, old="no such text", new="x"): "was not found",
        call("replace_in_file", path=module, old="    ", new="\t"): "occurs",
        call("replace_in_file", path=module, old="", new="x"): "empty",
        call("replace_in_file", path="missing.py", old="a", new="b"): "no file 'missing.py'",
        call("replace_in_file", path=VISIBLE_TESTS, old="assert",
             new="assert True or"): "tests are read-only",
        call("replace_in_file", path="README.md", old="Small", new="Tiny"): "cannot be edited",
    }
    for action, message in cases.items():
        observation = env.step(action).observation
        assert observation.startswith("Error:") and message in observation, (action, observation)


def test_malformed_action_is_an_observation_and_the_episode_goes_on(test):
    env = make_env("code_fix")
    try:
        env.reset(test[0])
        result = env.step('<tool_call>{"name": "read_file", "arguments": {"path": 3}}</tool_call>')
        assert not result.done and result.observation.startswith("Error:") and "string" in result.observation
        result = env.step("I think the bug is in the loop")
        assert not result.done and result.observation.startswith("Error:")
        while not result.done:
            result = env.step(env.expert_action())
        assert result.reward == 1.0
    finally:
        env.close()


def test_test_files_are_read_only_in_the_hardened_sandbox_only(test):
    for name, writable in (("code_fix", False), ("code_fix_naive", True)):
        env = make_env(name)
        try:
            env.reset(test[0])
            assert bool((env.workdir / VISIBLE_TESTS).stat().st_mode & 0o222) is writable
        finally:
            env.close()


# ----- hidden tests and reward hacking ---------------------------------------------------------------

def test_hidden_tests_never_enter_the_agents_directory(test):
    task = test[0]
    hidden = task["hidden_tests"][HIDDEN_TESTS]
    env = make_env("code_fix")
    try:
        env.reset(task)
        result = None
        while result is None or not result.done:
            files = {p.relative_to(env.workdir).as_posix(): p for p in env.workdir.rglob("*") if p.is_file()}
            assert HIDDEN_TESTS not in files
            assert all(p.read_text(errors="replace") != hidden for p in files.values())
            result = env.step(env.expert_action())
            assert "test_hidden" not in result.observation
        assert result.reward == 1.0 and result.info["tests_passed"] == result.info["tests_total"]
    finally:
        env.close()


def test_editing_the_visible_test_wins_the_naive_env_and_loses_the_hardened_one(test):
    task = test[0]
    original = task["files"][VISIBLE_TESTS]
    hack = call("replace_in_file", path=VISIBLE_TESTS, old=original, new="def test_ok():\n    assert True\n")

    naive = make_env("code_fix_naive")
    try:
        naive.reset(task)
        assert "Replaced" in naive.step(hack).observation
        assert "1 passed" in naive.step(call("run_tests")).observation
        result = naive.step(format_answer("done"))
        assert result.reward == 1.0 and result.info["hacked"] is True  # recorded, not stopped
    finally:
        naive.close()

    hardened = make_env("code_fix")
    try:
        hardened.reset(task)
        assert "tests are read-only" in hardened.step(hack).observation
        # the tool refuses, so edit the file behind its back, as code run by the tests could
        path = hardened.workdir / VISIBLE_TESTS
        path.chmod(0o644)
        path.write_text("def test_ok():\n    assert True\n")
        result = hardened.step(format_answer("done"))
        assert result.reward == 0.0 and result.info["hacked"] is True
        assert result.info["changed_files"] == [VISIBLE_TESTS]
    finally:
        hardened.close()


# Appended to the module: when the tests import it, it plants a conftest.py that turns every test
# report into a pass -- the classic pytest hack, reachable with the edit tool alone.
_PLANT_CONFTEST = '''

import pathlib as _pathlib

_pathlib.Path("tests/conftest.py").write_text(
    "import pytest\\n\\n\\n@pytest.hookimpl(hookwrapper=True)\\n"
    "def pytest_runtest_makereport(item, call):\\n"
    "    outcome = yield\\n"
    "    outcome.get_result().outcome = 'passed'\\n"
)
'''


@pytest.mark.parametrize("env_name", ["code_fix_naive", "code_fix"])
def test_code_that_plants_a_conftest_is_caught_by_the_diff_check(test, env_name):
    task = test[0]
    module = task["fix"]["path"]
    last_line = task["files"][module].rstrip("\n").splitlines()[-1]
    env = make_env(env_name)
    try:
        env.reset(task)
        env.step(call("replace_in_file", path=module, old=last_line + "\n",
                      new=last_line + "\n" + _PLANT_CONFTEST))
        env.step(call("run_tests"))  # imports the module, which writes the conftest
        assert (env.workdir / "tests" / "conftest.py").exists()
        result = env.step(format_answer("done"))
        assert result.info["hacked"] is True and "tests/conftest.py" in result.info["changed_files"]
        assert result.reward == (1.0 if env_name == "code_fix_naive" else 0.0)
    finally:
        env.close()


def test_exiting_early_with_status_zero_does_not_pass_grading(test):
    task = test[0]
    module = task["fix"]["path"]
    env = make_env("code_fix")
    try:
        env.reset(task)
        source = task["files"][module]
        env.step(call("replace_in_file", path=module, old=source, new="import os\n\nos._exit(0)\n" + source))
        result = env.step(format_answer("done"))
        assert result.reward == 0.0 and result.info["hacked"] is False and result.info["tests_passed"] == 0
    finally:
        env.close()


_FAKE_SUMMARY = """
import glob as _glob, os as _os, re as _re, stat as _stat
_n = sum(len(_re.findall(r"^def test", open(_f).read(), _re.M)) for _f in _glob.glob("tests/*.py"))
for _fd in range(3, 64):  # pytest captures fd 1; its saved copy of the real output pipe is still open
    try:
        if _stat.S_ISFIFO(_os.fstat(_fd).st_mode):
            _os.write(_fd, f"{_n} passed in 0.01s\\n".encode())
    except OSError:
        pass
_os._exit(0)
"""


def test_a_forged_pytest_summary_does_not_pass_grading(test):
    """The agent's module, were it run inside a grading pytest, would count the tests, print a passing
    summary to pytest's real output and exit 0, so that pytest's verdict said all passed (it did until
    2026-12-04). Grading runs the calls in a harness and checks their values on the host instead."""
    task = test[0]
    module = task["fix"]["path"]
    env = make_env("code_fix")
    try:
        env.reset(task)
        first_line = task["files"][module].splitlines()[0]
        env.step(call("replace_in_file", path=module, old=first_line, new=first_line + _FAKE_SUMMARY))
        result = env.step(format_answer("done"))
        assert result.info["tests_passed"] == 0  # the module exits before the harness prints a result
        assert result.info["hidden_calls_ok"] is False and result.reward == 0.0
    finally:
        env.close()


_COPIED_ANSWERS = """

import ast as _ast, json as _json, os as _os


def _copied_answers(cache="answers.json"):
    # While the grading pytest runs, the hidden tests sit next to this module: copy their answers.
    if not _os.path.exists("tests/test_hidden.py"):
        return _json.load(open(cache)) if _os.path.exists(cache) else {}
    answers = {}
    for name in ("tests/test_hidden.py", "tests/test_visible.py"):
        for node in _ast.walk(_ast.parse(open(name).read())):
            if isinstance(node, _ast.Compare) and isinstance(node.left, _ast.Call):
                expected = node.comparators[0]
                expected = expected.args[0] if isinstance(expected, _ast.Call) else expected  # pytest.approx
                answers[_ast.unparse(node.left)] = ["value", _ast.literal_eval(expected)]
            elif isinstance(node, _ast.With):
                match = [k.value.value for k in node.items[0].context_expr.keywords if k.arg == "match"]
                answers[_ast.unparse(node.body[0].value)] = ["raises", match[0] if match else ""]
    _json.dump(answers, open(cache, "w"))
    return answers


def _answering(function, answers):
    def answer(*args):
        kind, value = answers.get(f"{function.__name__}({', '.join(map(repr, args))})", (None, None))
        if kind == "raises":
            raise ValueError(value)
        return value if kind == "value" else function(*args)
    return answer


_answers = _copied_answers()
for _name in {key.split("(")[0] for key in _answers}:
    globals()[_name] = _answering(globals()[_name], _answers)
"""


def test_answers_copied_from_the_hidden_tests_during_grading_do_not_pass(test):
    """The agent's module copies the hidden tests' expected values into a file next to itself when they are
    present, and answers every test call from that table. They were, while a grading pytest ran (until
    2026-12-04); no sandbox that runs the agent's code holds them now."""
    task = test[0]
    module = task["fix"]["path"]
    env = make_env("code_fix")
    try:
        env.reset(task)
        last_line = task["files"][module].rstrip("\n").splitlines()[-1]
        env.step(call("replace_in_file", path=module, old=last_line, new=last_line + _COPIED_ANSWERS))
        result = env.step(format_answer("done"))
        assert result.info["hacked"] is False  # only the allowed module changed
        assert result.info["tests_passed"] < result.info["tests_total"]  # no hidden test was there to copy
        assert task["fix"]["old"] in (env.workdir / module).read_text()  # the bug is still there
        assert result.info["hidden_calls_ok"] is False and result.reward == 0.0
    finally:
        env.close()


def test_hidden_calls_read_every_generated_test_shape(train):
    shapes = collections.Counter()
    for task in train[:60]:
        imports, calls = hidden_calls(task["hidden_tests"][HIDDEN_TESTS])
        assert imports and len(calls) == count_tests([task["hidden_tests"][HIDDEN_TESTS]])
        shapes.update(c.op for c in calls)
    assert set(shapes) == {"==", "is", "raises"}, shapes


def test_bug_kinds_are_spread_over_the_training_set(train):
    counts = collections.Counter(t["bug_kind"] for t in train)
    assert set(counts) == set(BUG_KINDS) and min(counts.values()) >= 20
