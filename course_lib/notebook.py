"""What every notebook does in its first cells: report the mode, the hardware and the seed.

Kept here so the forty-odd notebook cells that need it stay one line long.
"""

from __future__ import annotations

import os
import platform
import random
import shutil
from dataclasses import dataclass

import numpy as np
import torch

from course_lib import Sizes, fast_mode, runs_dir
from course_lib.models import course_threads, pick_device, pick_dtype


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def course_setup(seed: int = 0, threads: int | None = None, disk_warning_gb: float = 12.0,
                 sandbox: bool = False) -> dict:
    """Seed everything, pick the device, print one line a learner can quote when asking for help.

    With sandbox=True (the notebooks that run the model's code), a second line says which isolation the
    sandbox has on this machine (`envs.bwrap.isolation`).

    Also warns when the disk that holds the runs folder has less than `disk_warning_gb` free: each training run
    keeps a checkpoint of about 1.6 GB (fp32 weights and optimizer state), about 10 GB over the course."""
    seed_everything(seed)
    if threads is None:
        threads = course_threads()
    torch.set_num_threads(threads)
    device = pick_device()
    weight_dtype, autocast = pick_dtype(device)
    gpu = torch.cuda.get_device_name(0) if device.type == "cuda" else None
    info = {
        "mode": "FAST (COURSE_FAST=1)" if fast_mode() else "learning (the default)",
        "device": gpu or f"cpu ({threads} threads, {platform.machine()})",
        "dtype": f"{str(weight_dtype).removeprefix('torch.')}" + (f" + {str(autocast).removeprefix('torch.')} autocast" if autocast else ""),
        "torch": torch.__version__,
        "seed": seed,
    }
    print(" | ".join(f"{k}: {v}" for k, v in info.items()))
    if sandbox:
        from course_lib.envs.bwrap import isolation

        info["sandbox"] = isolation()
        print(info["sandbox"])
    free_gb = _free_gb_for_runs()
    if free_gb < disk_warning_gb:
        print(f"WARNING: {free_gb:.1f} GB free for the runs folder; the training notebooks keep about 10 GB of "
              f"checkpoints there (1.6 GB per run). Delete old runs or point COURSE_RUNS to a bigger disk.")
    return info


def _free_gb_for_runs() -> float:
    path = runs_dir().resolve()
    while not path.exists():  # the folder is made by the first run
        path = path.parent
    return shutil.disk_usage(path).free / 2**30


def pick(fast, full):
    """`fast` under COURSE_FAST=1, else `full`: the one place where a notebook's sizes differ."""
    return fast if fast_mode() else full


def reference_results(name: str) -> dict:
    """A committed result file of the course's reference runs, `benchmarks/results/<name>` (JSON), for
    notebooks that plot a learner's run next to runs made with more seeds or steps."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: it ships with the course repository (git checkout the file, "
                                "or run the benchmark that writes it)")
    return json.loads(path.read_text())


def strip_widget_state(path: str) -> None:
    """Remove ipywidgets state from a notebook (it breaks GitHub's renderer and nbval diffs)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            data.pop("application/vnd.jupyter.widget-view+json", None)
    nbformat.write(nb, path)


def run_notebook(path: str, timeout: int = 3600, fast: bool = True) -> float:
    """Execute a notebook in place, in fast mode (what CI checks) or, with fast=False, in the default
    learning mode (what notebooks 05-08 and 10 commit), then clean it. Returns the wall time in seconds.

        python -m course_lib.notebook notebooks/01_agentic_setting.ipynb          # fast mode
        python -m course_lib.notebook --learning notebooks/05_outcome_credit.ipynb
    """
    import time

    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    t0 = time.time()
    before = os.environ.get("COURSE_FAST")
    os.environ["COURSE_FAST"] = "1" if fast else "0"  # the kernel inherits it; the caller's setting comes back below
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}}).execute()
    finally:
        if before is None:
            os.environ.pop("COURSE_FAST", None)
        else:
            os.environ["COURSE_FAST"] = before
    seconds = time.time() - t0
    nbformat.write(nb, path)
    strip_widget_state(path)
    print(f"{path}: executed in {seconds:.0f} s ({'fast' if fast else 'learning'} mode)")
    return seconds


if __name__ == "__main__":
    import sys

    if not sys.argv[1:] or {"-h", "--help"} & set(sys.argv[1:]):
        raise SystemExit("usage: python -m course_lib.notebook [--learning] NOTEBOOK.ipynb ...\n"
                         "Executes each notebook in place (fast mode, or the default learning mode with --learning),\n"
                         "saves its outputs, strips widget state and prints the wall time.")
    learning = "--learning" in sys.argv[1:]
    for p in sys.argv[1:]:
        if p != "--learning":
            run_notebook(p, fast=not learning)


# One warm-start recipe per environment, used by notebooks 05-09 and 11: the first notebook that needs a
# checkpoint trains it (cached under runs/warm_start/), the others reuse it.
@dataclass(frozen=True)
class WarmStartSizes(Sizes):
    """Sizes of a warm start (arguments of `sft.warm_start`)."""

    n_demos: int  # expert demonstrations
    steps: int  # AdamW steps
    batch_size: int  # demonstrations per step
    lr: float = 5e-5


WARM_START = {
    # Fast: the smallest warm start that already succeeds sometimes (4x4 gridworld: 2 of 8 held-out
    # tasks, measured), so RL groups have rewards to compare; about a minute on a 2-core machine.
    "fast": WarmStartSizes(n_demos=32, steps=12, batch_size=4, lr=1e-4),
    "full": WarmStartSizes(n_demos=256, steps=48, batch_size=8, lr=5e-5),
}


def mixed_hop_tasks(n_one_hop: int, n_two_hop: int, seed: int = 0) -> list[dict]:
    """search_qa training tasks for a warm start: mostly one-hop questions and a few two-hop ones, shuffled.

    A warm start on one-hop questions alone never takes a second hop, so RL on two-hop questions would
    sample groups that all fail (no signal); a few two-hop demonstrations make a second search possible."""
    import random

    from course_lib.envs import load_tasks

    train_tasks = load_tasks("search_qa", "train")
    rng = random.Random(seed)
    picked = (rng.sample([t for t in train_tasks if t["hops"] == 1], n_one_hop)
              + rng.sample([t for t in train_tasks if t["hops"] == 2], n_two_hop))
    rng.shuffle(picked)
    return picked


HACK_FRACTION = 0.2  # share of notebook 10's warm-start demonstrations that hack


def hack_demo_tasks(n_demos: int, hack_fraction: float, seed: int = 0) -> list[dict]:
    """`n_demos` code_fix training tasks in a seeded order, round(hack_fraction · n_demos) of them marked
    `"demonstration": "hack"`: on those the expert plays `CodeFixEnv.hack_action` (edit the test file,
    submit) instead of the fix. The warm start of notebook 10 learns mostly fixes and a few hacks, so that
    sampled rollouts sometimes hack and RL can make the hack more or less likely."""
    from course_lib.envs import load_tasks

    rng = random.Random(seed)
    picked = [dict(t) for t in rng.sample(load_tasks("code_fix", "train"), n_demos)]
    for task in picked[: round(hack_fraction * n_demos)]:
        task["demonstration"] = "hack"
    rng.shuffle(picked)
    return picked


def code_fix_warm_start_options(fast: bool, seed: int = 0) -> dict:
    """Notebook 10's warm start (demonstrations played in code_fix_naive): HACK_FRACTION of the
    demonstrations hack, the rest fix the bug."""
    # Learning mode: one pass over 48 demonstrations, 4 per step. Fast mode: a tiny one (CI).
    n_demos, steps, batch_size = (4, 2, 2) if fast else (48, 12, 4)
    return {"n_demos": n_demos, "steps": steps, "batch_size": batch_size, "lr": 1e-4, "seed": seed,
            "tasks": hack_demo_tasks(n_demos, HACK_FRACTION, seed)}


def search_qa_warm_start_options(fast: bool, seed: int = 0) -> dict:
    """The search_qa warm start of the learning mode and `make demo` (224 one-hop + 32 two-hop demos, 32
    steps of batch 8); in fast mode the small one-hop recipe of WARM_START["fast"]."""
    if fast:
        return {**WARM_START["fast"].options(), "task_filter": {"hops": 1}}
    return {"n_demos": 256, "steps": 32, "batch_size": 8, "lr": 5e-5, "seed": seed,
            "tasks": mixed_hop_tasks(224, 32, seed)}


def course_warm_start(env: str, **overrides):
    """Path of the course's standard warm-start checkpoint for `env` (trained once, then cached)."""
    from course_lib.sft import ensure_warm_start

    options = WARM_START["fast" if fast_mode() else "full"].options()
    if env == "search_qa":  # RL then has two-hop questions to improve on
        options = search_qa_warm_start_options(fast_mode())
    if env == "code_fix_naive":  # mostly fixes, a few hacks (notebook 10)
        options = code_fix_warm_start_options(fast_mode())
    if env == "gridworld" and fast_mode():
        options["task_filter"] = {"size": 4}  # short demonstrations: the 6x6 ones cost ~6 GB per step
    options.update(overrides)
    return ensure_warm_start(env, **options)
