"""Checkpoints and the metrics file of a run, and a Ctrl+C that waits for the update to finish.

A run directory holds `checkpoint/` (model, optimizer, value head, step, RNG states, config; written
atomically), `metrics.jsonl` (one JSON row per line) and `config.json`. Everything here takes plain
data (paths, modules, dicts), not the training config.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import torch

from course_lib.lora import is_adapted


def checkpoint_bytes(model, value_head=None) -> int:
    """What `save_checkpoint` writes, give or take the tokenizer: the trained weights (all of them, or only
    the LoRA adapters), plus AdamW's two moments per weight (exp_avg, exp_avg_sq, same dtype), for the model
    and the value head: 3 x the trained parameters' bytes."""
    params = list(model.parameters()) + (list(value_head.parameters()) if value_head is not None else [])
    params = [p for p in params if p.requires_grad]
    return 3 * sum(p.numel() * p.element_size() for p in params)


def save_checkpoint(run_dir: Path, model, tokenizer, optimizer, value_head, step: int,
                    config: dict[str, Any]) -> None:
    """Write run_dir/checkpoint atomically: a temporary folder, then a rename (the old one goes last).
    `config` is the run's configuration as JSON-ready data (stored as config.json beside the weights).

    A failed write (a full disk, say) removes the partial folder, leaves the previous checkpoint as it was and
    raises an OSError that says how much space the disk has left."""
    tmp, final, old = run_dir / ".checkpoint-tmp", run_dir / "checkpoint", run_dir / ".checkpoint-old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        # a LoRA model saves its adapters only (no embedding layers: they are not adapted)
        options = {"save_embedding_layers": False} if is_adapted(model) else {}
        model.save_pretrained(tmp / "model", **options)
        tokenizer.save_pretrained(tmp / "model")
        rng = {"torch": torch.get_rng_state(), "python": random.getstate(),
               "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
        torch.save({"optimizer": optimizer.state_dict(), "rng": rng,
                    "value_head": value_head.state_dict() if value_head is not None else None},
                   tmp / "state.pt")
        (tmp / "config.json").write_text(json.dumps(config, indent=1))
        (tmp / "step.json").write_text(json.dumps({"step": step}))
    except Exception as e:  # a failed write is an OSError, a SafetensorError or torch.save's RuntimeError
        shutil.rmtree(tmp, ignore_errors=True)
        free = shutil.disk_usage(run_dir).free
        kept = f"the checkpoint in {final} is untouched" if final.exists() else "no earlier checkpoint exists"
        raise OSError(f"could not write the checkpoint of step {step} to {tmp} ({type(e).__name__}: {e}); "
                      f"{free / 2**30:.2f} GB are free on that disk and this checkpoint needs about "
                      f"{checkpoint_bytes(model, value_head) / 2**30:.2f} GB (weights and "
                      f"optimizer state); {kept}. Free some space (old run folders under runs/) and run "
                      f"again: train() resumes from the last checkpoint.") from e
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def check_disk_for_checkpoint(run_dir: Path, model, value_head) -> None:
    """Fail before the first rollout, not at the first save, when a checkpoint cannot fit on the run's disk
    (the new one is written next to the previous one, which goes only after the rename)."""
    need, free = checkpoint_bytes(model, value_head), shutil.disk_usage(run_dir).free
    if free < need:
        raise OSError(f"{run_dir} has {free / 2**30:.2f} GB free, and a checkpoint of this run needs about "
                      f"{need / 2**30:.2f} GB (weights and optimizer state); no step was run. "
                      "Free some space (old run folders under runs/) or choose a run_dir on a bigger disk "
                      "(COURSE_RUNS moves runs/).")


def find_checkpoint(run_dir: Path) -> Path | None:
    """The run's checkpoint, recovering the previous one when a save was cut between its two renames."""
    final, old = run_dir / "checkpoint", run_dir / ".checkpoint-old"
    if not (final / "step.json").exists() and (old / "step.json").exists():
        shutil.rmtree(final, ignore_errors=True)
        old.rename(final)
    return final if (final / "step.json").exists() else None


def restore_checkpoint(checkpoint: Path, optimizer, value_head=None) -> int:
    """Load the optimizer (and value head) state and the RNG states saved in `checkpoint`; returns its step.
    The model's weights are read by `load_policy(checkpoint / "model")`."""
    state = torch.load(checkpoint / "state.pt", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    if value_head is not None and state["value_head"] is not None:
        value_head.load_state_dict(state["value_head"])
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(state["rng"]["python"])
    return json.loads((checkpoint / "step.json").read_text())["step"]


def save_model(model, tokenizer, target: Path) -> None:
    """save_pretrained into a temporary folder, then rename: a half-written checkpoint is never seen."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".tmp-{target.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


# ------------------------------------------------------------------------------------------------------
# the metrics file
# ------------------------------------------------------------------------------------------------------


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The rows of run_dir/metrics.jsonl (none when it does not exist)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def log_metrics(path: Path, row: dict) -> None:
    """Append one row to a metrics file."""
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def nonfinite_in_a_row(rows: list[dict]) -> int:
    """How many of the last logged training steps in a row had a NaN/inf update (to resume the count)."""
    count = 0
    for row in reversed([r for r in rows if r["kind"] == "train"]):
        if not row.get("nonfinite"):
            break
        count += 1
    return count


def truncate_metrics(path: Path, last_step: int) -> None:
    """Keep only rows up to the checkpoint's step: a step logged after it will be run again."""
    rows = read_metrics(path.parent)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] <= last_step))


class DeferredInterrupt:
    """Holds a Ctrl+C (SIGINT) that arrives during an update until the update is done.

    Stopped half-way, the weights would be part-updated (some PPO epochs or some AdamW tensors done) and
    a checkpoint would store them under the previous step's number; held, the step finishes, is logged,
    and the checkpoint says where the weights are. `pending` tells the caller to stop after the step.
    """

    def __init__(self) -> None:
        self.pending = False

    @contextlib.contextmanager
    def hold(self):
        if threading.current_thread() is not threading.main_thread():
            yield  # only the main thread may set signal handlers (and only it receives Ctrl+C)
            return
        previous = signal.getsignal(signal.SIGINT)

        def remember(signum, frame) -> None:
            self.pending = True
            print("Ctrl+C: finishing this update, then saving a checkpoint.")

        signal.signal(signal.SIGINT, remember)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


def interruptible() -> None:
    """Let SIGINT (Ctrl+C, `kill -INT`) raise KeyboardInterrupt in a process that inherited it ignored.

    A command started with `&` from a script (a shell without job control) starts with SIGINT ignored, and
    Python then leaves it so: `kill -INT` did nothing outside an update, and such a run could only be
    stopped by a signal that skips its checkpoint. The run scripts call this first."""
    main = threading.current_thread() is threading.main_thread()  # only it may set handlers
    if main and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
