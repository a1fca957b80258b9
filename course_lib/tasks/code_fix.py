"""Code-fix's task generator: plant a bug in a family instance and write the tests that catch it.

A task is a tiny repository (README, package, the module with the bug, visible tests) plus hidden
tests kept out of the agent's directory. The expected values of the tests are computed by running
the correct code, and a bug is kept only if both the visible and the hidden tests catch it.
`python -m course_lib.tasks --only code_fix` writes data/code_fix/{train,test}.jsonl. The
environment (tools, sandbox and both verifiers) is `course_lib.envs.code_fix`.
"""

from __future__ import annotations

import contextlib
import random
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from course_lib.envs.code_fix import HIDDEN_TESTS, VISIBLE_TESTS
from course_lib.tasks.code_fix_families import FAMILIES, PACKAGES, Repo
from course_lib.tasks.files import write_jsonl

N_TRAIN, N_TEST = 200, 50
BUG_KINDS = ["off_by_one", "wrong_operator", "wrong_default", "missing_edge_case", "wrong_variable"]


@contextlib.contextmanager
def _imported(module_path: str, source: str) -> Iterator[types.ModuleType]:
    """Execute `source` as module `package.module`, importable while the block runs.

    Fresh module objects, removed afterwards: an installed package of the same name is never touched.
    """
    package, module = module_path.removesuffix(".py").split("/")
    names = (package, f"{package}.{module}")
    saved = {name: sys.modules.get(name) for name in names}
    pkg, mod = types.ModuleType(package), types.ModuleType(names[1])
    pkg.__path__ = []
    setattr(pkg, module, mod)
    sys.modules.update({package: pkg, names[1]: mod})
    try:
        exec(compile(source, module_path, "exec"), mod.__dict__)
        yield mod
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


def _render_expected(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return f" is {value!r}"
    if isinstance(value, float) or (isinstance(value, list) and any(isinstance(v, float) for v in value)):
        return f" == pytest.approx({value!r})"  # a correct fix may sum in another order
    return f" == {value!r}"


def _render_tests(module_path: str, imports: list[str], cases: list[tuple[str, ...]], namespace: dict,
                  prefix: str) -> str:
    body = []
    for i, case in enumerate(cases, 1):
        body.append(f"\n\ndef test_{prefix}{i}():\n")
        if case[0] == "raises":
            body.append(f"    with pytest.raises(ValueError, match={case[2]!r}):\n        {case[1]}\n")
        else:
            body.append(f"    assert {case[1]}{_render_expected(eval(case[1], dict(namespace)))}\n")
    text = "".join(body)
    dotted = module_path.removesuffix(".py").replace("/", ".")
    header = "import pytest\n\n" if "pytest." in text else ""
    return f"{header}from {dotted} import {', '.join(imports)}\n{text}"


def failing_tests(module_path: str, module_source: str, test_source: str) -> list[str]:
    """The names of the tests in `test_source` that fail against `module_source`, run in-process.

    A fast check for the generator (no subprocess, no sandbox); only for the trusted generated code.
    """
    import pytest  # only here: raises() and approx() in the generated tests

    with _imported(module_path, module_source):
        namespace: dict[str, Any] = {}
        exec(compile(test_source, "test", "exec"), namespace)
        failing = []
        for name, test in namespace.items():
            if name.startswith("test_") and callable(test):
                try:
                    test()
                except (Exception, pytest.fail.Exception):  # pytest's Failed is not an Exception
                    failing.append(name)
        return failing


def _make_task(repo: Repo, bug: tuple[str, str, str], package: str, task_id: str) -> dict[str, Any] | None:
    """Plant `bug` in `repo`; None if the bug is not caught by both the visible and the hidden tests."""
    kind, correct, buggy = bug
    module_path = f"{package}/{repo.module}.py"
    if repo.source.count(correct) != 1:
        raise ValueError(f"{repo.family}: the snippet {correct!r} must occur exactly once")
    buggy_source = repo.source.replace(correct, buggy)
    if buggy_source.count(buggy) != 1:
        raise ValueError(f"{repo.family}: the bug {buggy!r} must occur exactly once once planted")
    with _imported(module_path, repo.source) as correct_module:
        namespace = vars(correct_module)
        visible = _render_tests(module_path, repo.imports, repo.visible, namespace, "")
        hidden = _render_tests(module_path, repo.imports, repo.hidden, namespace, "hidden_")
    # The bug must show in the visible tests (so the agent can find it) and in the hidden ones (so
    # that grading catches it); the fixed code must pass everything.
    if not failing_tests(module_path, buggy_source,
                         visible) or not failing_tests(module_path, buggy_source, hidden):
        return None
    if failing_tests(module_path, repo.source, visible) or failing_tests(module_path, repo.source, hidden):
        raise ValueError(f"{repo.family}: the correct code fails its own tests")
    files = {
        "README.md": f"# {package}\n\nSmall helpers. Run the tests with `python -m pytest -q`.\n",
        f"{package}/__init__.py": f'"""{package}: small helpers."""\n',
        module_path: buggy_source,
        VISIBLE_TESTS: visible,
    }
    instruction = (f"Some tests in {VISIBLE_TESTS} fail because of a bug in {module_path}. Find "
                   f"the bug and fix it. When you are done, answer <answer>done</answer>.")
    return {"id": task_id, "instruction": instruction, "files": files, "hidden_tests": {HIDDEN_TESTS: hidden},
            "allowed_files": [module_path], "bug_kind": kind, "family": repo.family,
            "fix": {"path": module_path, "old": buggy, "new": correct}}


def make_tasks(n: int, seed: int = 0, split: str = "train",
               seen: set[str] | None = None) -> list[dict[str, Any]]:
    """`n` tasks of `split`, cycling through the families and their bugs.

    Drawn from the random stream 2 * seed (train) or 2 * seed + 1 (test). A repository already in
    `seen` (the concatenated file contents) is redrawn; the new ones are added to it.
    """
    stream = 2 * seed + (split == "test")
    rng = random.Random(stream)
    seen = set() if seen is None else seen
    tasks: list[dict[str, Any]] = []
    attempts = 0
    while len(tasks) < n:
        i = len(tasks)
        family = FAMILIES[i % len(FAMILIES)]
        repo = family(rng)
        bug = repo.bugs[(i // len(FAMILIES)) % len(repo.bugs)]
        task = _make_task(repo, bug, rng.choice(PACKAGES), f"code_fix-{split}-{stream}-{i}")
        key = "".join(task["files"].values()) if task else ""
        if task is None or key in seen:  # tests that miss the bug, or a repository drawn before: redraw
            attempts += 1
            if attempts > 50 * n:
                raise RuntimeError(f"{family.__name__}: cannot draw a task whose tests catch the bug")
            continue
        seen.add(key)
        tasks.append(task)
    return tasks


def generate(out_dir: Path, seed: int = 0) -> None:
    """Write `train.jsonl` (200 tasks) and `test.jsonl` (50) into `out_dir`, byte-reproducibly.

    Test repositories are drawn from another random stream and never repeat a training repository.
    """
    seen: set[str] = set()
    write_jsonl(Path(out_dir) / "train.jsonl", make_tasks(N_TRAIN, seed, "train", seen))
    write_jsonl(Path(out_dir) / "test.jsonl", make_tasks(N_TEST, seed, "test", seen))
