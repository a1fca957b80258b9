"""Shared fixtures: the real embedded model, loaded once per test session (no mocks of it), and the one
hand-made `Trajectory` factory for tests that need a trajectory of a known shape without running a model."""

import os
import shutil
from collections.abc import Hashable, Sequence
from pathlib import Path

import pytest
import torch

from course_lib.checkpoint import interruptible
from course_lib.models import course_threads
from course_lib.trajectory import Step, Trajectory

os.environ.setdefault("COURSE_FAST", "1")
# A suite started with & from a script (nohup, a CI wrapper) inherits SIGINT ignored: the tests that send
# themselves a Ctrl+C need it back, as the run scripts do.
interruptible()
torch.set_num_threads(course_threads())
# The model's device in the tests: CPU everywhere (CI has no GPU); COURSE_TEST_DEVICE=cuda runs the same
# tests through the CUDA path on a machine with a GPU.
TEST_DEVICE = os.environ.get("COURSE_TEST_DEVICE", "cpu")


@pytest.fixture(scope="session")
def policy():
    from course_lib.models import load_policy

    model, tokenizer = load_policy("smollm2-135m", device=TEST_DEVICE)
    return model, tokenizer


@pytest.fixture(scope="session")
def tokenizer(policy):
    return policy[1]


def logprob_atol(model, fp32: float) -> float:
    """Tolerance for comparing log-probs computed two ways (batched vs alone, cached vs recomputed):
    `fp32` for fp32 weights without autocast (CPU); 0.3 under bf16/fp16 (the CUDA default), whose 8-bit
    mantissa moves a logit of ~20 by ~0.1 when the same sums are taken in another order (measured on
    an H200 with bf16 autocast: up to 0.18 between a batched rollout and its recomputation, 0.13 between
    a cached and a recomputed context; the tokens themselves were identical)."""
    reduced = model.course_autocast is not None or next(model.parameters()).dtype != torch.float32
    return 0.3 if reduced else fp32


def make_trajectory(turns: Sequence[Hashable] | Sequence[tuple[Hashable, str]], reward: float = 0.0, *,
                    traj_id: str = "g#0", group_id: str = "g", task_id: str = "task",
                    prompt_ids: Sequence[int] = (1, 2), action_ids: Sequence[int] = (5, 6),
                    logprob: float = -1.0) -> Trajectory:
    """A trajectory of a known shape, laid out as `TrajectoryBuilder` lays one out (no model, no tokenizer).

    turns: one entry per turn, its anchor state, or (anchor, action kind) with kind "tool_call", "answer" or
    "malformed"; plain anchors are tool calls, the last one an answer. A malformed turn's observation
    starts with "Error:" (what `rewards.process_reward` penalises); the others read "ok".
    Tokens: `prompt_ids` (loss_mask 0, turn_index −1), then each turn's `action_ids` (loss_mask 1, log-prob
    `logprob`, turn_index k); no observation tokens. The last step is done and carries `reward`, as does the
    trajectory.
    """
    pairs = [t if isinstance(t, tuple) else (t, "answer" if k == len(turns) - 1 else "tool_call")
             for k, t in enumerate(turns)]
    traj = Trajectory(task_id=task_id, group_id=group_id, traj_id=traj_id, messages=[],
                      prompt_ids=list(prompt_ids),
                      token_ids=list(prompt_ids), loss_mask=[0] * len(prompt_ids),
                      logprobs=[0.0] * len(prompt_ids), turn_index=[-1] * len(prompt_ids), reward=reward)
    for k, (anchor, kind) in enumerate(pairs):
        last = k == len(pairs) - 1
        traj.steps.append(Step(action_ids=list(action_ids), action_text=f"action {k}",
                               logprobs=[logprob] * len(action_ids), anchor=anchor,
                               info={"action_kind": kind},
                               observation_text="Error: bad" if kind == "malformed" else "ok",
                               reward=reward if last else 0.0, done=last))
        traj.token_ids += action_ids
        traj.loss_mask += [1] * len(action_ids)
        traj.logprobs += [logprob] * len(action_ids)
        traj.turn_index += [k] * len(action_ids)
    return traj


# ----- `make test`'s disk: each notebook's runs dropped after its last cell --------------------------------
# `make test` runs every notebook in fast mode (nbval), in a pytest of their own beside these tests. With
# COURSE_TEST_DROP_RUNS=1 (the Makefile sets it, with COURSE_RUNS=runs/test) the run folders a notebook
# created are deleted once its last cell has run, so the disk's peak is one notebook's runs (about 3 GB), not
# all of them (9.3 GB measured). Warm starts stay: later notebooks reuse them. This is a hook of the whole
# session (pytest_runtest_protocol sees every item, the notebooks' cells too), so it lives here: a second
# conftest.py under notebooks/ would shadow this module for the tests that import from it.


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    notebook = Path(str(item.fspath))
    dropping = os.environ.get("COURSE_TEST_DROP_RUNS") == "1" and notebook.suffix == ".ipynb"
    if dropping and notebook not in _runs_before:
        _runs_before[notebook] = _run_folders()
    try:
        return (yield)
    finally:
        last_cell = nextitem is None or Path(str(nextitem.fspath)) != notebook
        if dropping and last_cell:
            for name in _run_folders() - _runs_before[notebook]:
                if "warm_start" not in name:
                    shutil.rmtree(_runs_root() / name, ignore_errors=True)


_runs_before: dict[Path, set[str]] = {}  # notebook -> the runs folder's entries when its first cell started


def _runs_root() -> Path:
    from course_lib import runs_dir

    return runs_dir()


def _run_folders() -> set[str]:
    root = _runs_root()
    return {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()

