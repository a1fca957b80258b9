"""course_lib: the library behind "Agentic RL, hands-on".

Modules, in the order the course introduces them: models, protocol, envs, trajectory, rollout,
losses, credit, judge, batching, sft, train, checkpoint, evaluate, viz, integrations.

Here: the things every notebook needs first: the fast-mode switch, where runs and data live, the
course's size presets, and the 95% interval of a success rate.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

__version__ = "0.1.0"


def fast_mode() -> bool:
    """True when COURSE_FAST is set to anything but "", "0", "false", "no" or "off": every experiment
    shrinks to a tiny size (tests, CI, nbval). The one rule; every other place asks this function."""
    return os.environ.get("COURSE_FAST", "").strip().lower() not in ("", "0", "false", "no", "off")


def runs_dir() -> Path:
    """Where runs live: $COURSE_RUNS, else the repository's `runs/` folder (ignored by git)."""
    return Path(os.environ.get("COURSE_RUNS", Path(__file__).resolve().parents[1] / "runs"))


def data_dir() -> Path:
    """Where task data lives: $COURSE_DATA, else the repository's `data/` folder."""
    return Path(os.environ.get("COURSE_DATA", Path(__file__).resolve().parents[1] / "data"))


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a success rate: better than p ± 1.96·sqrt(p(1−p)/n) near 0 and 1."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The one form of the course's size presets (the demo's, the warm start's, the shoot-out's): a frozen
    dataclass whose fields are sizes. `options()` gives them as keyword arguments, `replace(**changes)` a
    copy with some changed; each preset comes as a `fast` and a `full` instance, picked by `fast_mode()`."""

    def options(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any):
        return dataclasses.replace(self, **changes)
