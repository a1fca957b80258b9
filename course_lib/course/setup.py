"""What every notebook does in its first cells: report the mode, the hardware and the seed.

Kept here so the forty-odd notebook cells that need it stay one line long.

    course_setup        seed, threads, device: one line a learner can quote (and a low-disk warning)
    pick                the fast-mode size or the learning-mode one
    reference_results   a committed result file of the reference runs (benchmarks/results/)
    seed_everything     random, numpy and torch from one seed
"""

from __future__ import annotations

import platform
import random
import shutil

import numpy as np
import torch

from course_lib import fast_mode, runs_dir
from course_lib.models import course_threads, pick_device, pick_dtype


def seed_everything(seed: int) -> None:
    """Seed Python's `random`, NumPy and torch with `seed`."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def course_setup(seed: int = 0, threads: int | None = None, disk_warning_gb: float = 12.0,
                 sandbox: bool = False) -> dict:
    """Seed everything, pick the device, print one line a learner can quote when asking for help.

    With sandbox=True (the notebooks that run the model's code), a second line says which isolation the
    sandbox has on this machine (`envs.bwrap.isolation`).

    Also warns when the disk that holds the runs folder has less than `disk_warning_gb` free: each training
    run keeps a checkpoint of about 1.6 GB (fp32 weights and optimizer state), about 10 GB over the course.
    """
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
        "dtype": str(weight_dtype).removeprefix("torch.")
        + (f" + {str(autocast).removeprefix('torch.')} autocast" if autocast else ""),
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
        print(
            f"WARNING: {free_gb:.1f} GB free for the runs folder; the training notebooks keep about 10 GB "
            f"of checkpoints there (1.6 GB per run). Delete old runs or point COURSE_RUNS to a bigger disk."
        )
    return info


def _free_gb_for_runs() -> float:
    """Free space, in GiB, on the disk that holds (or will hold) the runs folder."""
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

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: it ships with the course repository (git checkout the "
                                "file, or run the benchmark that writes it)")
    return json.loads(path.read_text())
