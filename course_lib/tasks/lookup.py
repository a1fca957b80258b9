"""The lookup toy's tasks: a directory of four fictional agents, and a question about one of them.

`python -m course_lib.tasks --only lookup` writes data/lookup/{train,test}.jsonl (200 and 50 tasks).
The environment is `course_lib.envs.lookup`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from course_lib.tasks.files import write_jsonl

N_TRAIN, N_TEST = 200, 50

_SYLLABLES = ["ka", "lo", "mi", "ren", "to", "sa", "vu", "dor", "pel", "qui", "zan", "bri"]
_CITIES = ["Orvane", "Tessaly", "Brumholt", "Quenport", "Salvik", "Drennor", "Maelis", "Corvath"]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(3)).capitalize()


def make_tasks(n: int, seed: int = 0, split: str = "train",
               seen: set[str] | None = None) -> list[dict[str, Any]]:
    """`n` seeded tasks; each has a directory of 4 agents and asks for one agent's city.

    Drawn from the random stream 2 * seed (train) or 2 * seed + 1 (test). A toy: questions may repeat,
    so `seen` is only filled (with the questions drawn), never used to redraw.
    """
    stream = 2 * seed + (split == "test")
    rng = random.Random(stream)
    tasks = []
    for i in range(n):
        names = []
        while len(names) < 4:
            w = _word(rng)
            if w not in names:
                names.append(w)
        directory = {name: rng.choice(_CITIES) for name in names}
        target = rng.choice(names)
        tasks.append({"id": f"lookup-{stream}-{i}", "question": f"In which city is agent {target} stationed?",
                      "directory": directory, "target": target, "answer": directory[target]})
    if seen is not None:
        seen.update(t["question"] for t in tasks)
    return tasks


def generate(out_dir: Path, seed: int = 0) -> None:
    """Write train.jsonl and test.jsonl into `out_dir`."""
    write_jsonl(Path(out_dir) / "train.jsonl", make_tasks(N_TRAIN, seed, "train"))
    write_jsonl(Path(out_dir) / "test.jsonl", make_tasks(N_TEST, seed, "test"))
