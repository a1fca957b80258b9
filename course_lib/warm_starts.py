"""The course's warm starts: the recipe each environment is warm-started with before RL (notebooks 05-11).

The first notebook that needs a checkpoint trains it, cached under runs/warm_start/ by its options
(`sft.ensure_warm_start`); the others reuse it. Most environments take the standard sizes of WARM_START; an
environment whose entry in `course_lib.envs.ENVIRONMENTS` names a `warm_start` recipe takes that instead:

    course_warm_start("gridworld")            # the checkpoint's path (trained on first use)
    course_warm_start("search_qa", steps=8)   # the recipe with some options overridden

A recipe is a function `(fast: bool, seed: int) -> options`, the keywords of `sft.warm_start`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course_lib import Sizes, fast_mode
from course_lib.envs import environment, imported, load_tasks


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
    rng = random.Random(seed)
    picked = [dict(t) for t in rng.sample(load_tasks("code_fix", "train"), n_demos)]
    for task in picked[: round(hack_fraction * n_demos)]:
        task["demonstration"] = "hack"
    rng.shuffle(picked)
    return picked


# ----- the recipes the table names (`EnvSpec.warm_start`) ----------------------------------------------


def standard_warm_start_options(fast: bool, seed: int = 0) -> dict[str, Any]:
    """The recipe of an environment whose entry names none: WARM_START's sizes for the mode (no seed key:
    `sft.warm_start`'s default seed, and the cache keys of the checkpoints already trained)."""
    return WARM_START["fast" if fast else "full"].options()


def code_fix_warm_start_options(fast: bool, seed: int = 0) -> dict[str, Any]:
    """Notebook 10's warm start (demonstrations played in code_fix_naive): HACK_FRACTION of the
    demonstrations hack, the rest fix the bug."""
    # Learning mode: one pass over 48 demonstrations, 4 per step. Fast mode: a tiny one (CI).
    n_demos, steps, batch_size = (4, 2, 2) if fast else (48, 12, 4)
    return {"n_demos": n_demos, "steps": steps, "batch_size": batch_size, "lr": 1e-4, "seed": seed,
            "tasks": hack_demo_tasks(n_demos, HACK_FRACTION, seed)}


def search_qa_warm_start_options(fast: bool, seed: int = 0) -> dict[str, Any]:
    """The search_qa warm start of the learning mode and `make demo` (224 one-hop + 32 two-hop demos, 32
    steps of batch 8), so that RL has two-hop questions to improve on; in fast mode the small one-hop recipe
    of WARM_START["fast"]."""
    if fast:
        return {**WARM_START["fast"].options(), "task_filter": {"hops": 1}}
    return {"n_demos": 256, "steps": 32, "batch_size": 8, "lr": 5e-5, "seed": seed,
            "tasks": mixed_hop_tasks(224, 32, seed)}


def gridworld_warm_start_options(fast: bool, seed: int = 0) -> dict[str, Any]:
    """The standard sizes; in fast mode on 4x4 grids only (short demonstrations: the 6x6 ones cost about
    6 GB per step)."""
    options = standard_warm_start_options(fast, seed)
    return {**options, "task_filter": {"size": 4}} if fast else options


LONG_HORIZONS = (4, 8, 12)  # the gridworld_long horizons its warm start demonstrates (and RL runs on)


def gridworld_long_warm_start_options(fast: bool, seed: int = 0) -> dict[str, Any]:
    """gridworld_long's warm start: the expert's shortest paths on training maps of horizons 4, 8 and 12,
    shuffled (240 demonstrations, two passes in 60 steps of 8 at lr 1e-4; turn limit 24, so the 12-move paths
    fit). The expert sees the whole map and the model only its 5x5 window, so imitation stays imperfect. One
    pass at lr 5e-5 was too weak: greedy held-out success 0.050 at horizon 4 and 0.000 at 8 and 12 (40 maps
    each; it mostly walked at the goal, then bumped into a wall), which left outcome credit almost nothing to
    compare (benchmarks/README.md, the LLM horizon curve). Fast mode: a tiny one on horizon-4 maps (CI)."""
    if fast:
        return {"n_demos": 4, "steps": 2, "batch_size": 2, "lr": 1e-4, "seed": seed, "max_turns": 8,
                "task_filter": {"horizon": 4}}
    tasks = [t for t in load_tasks("gridworld_long", "train") if t["horizon"] in LONG_HORIZONS]
    random.Random(seed).shuffle(tasks)
    return {"n_demos": len(tasks), "steps": 60, "batch_size": 8, "lr": 1e-4, "seed": seed, "max_turns": 24,
            "tasks": tasks}


CHAIN_HOPS = (2, 6, 10)  # the search_chain hops its warm start demonstrates (and RL runs on)
CHAIN_DEMOS_PER_HOP = 80


def search_chain_warm_start_options(fast: bool, seed: int = 0) -> dict[str, Any]:
    """search_chain's warm start, on gridworld_long's pattern: the expert's climbs of 80 training questions of
    each of 2, 6 and 10 hops, shuffled (240 demonstrations, two passes in 60 steps of 8 at lr 1e-4; turn
    limit 12, so the 10-hop climbs and their answer fit). Not yet measured on the model: how far imitation
    gets, and so how much room RL has, is open. Fast mode: a tiny one on 2-hop questions (CI)."""
    if fast:
        return {"n_demos": 4, "steps": 2, "batch_size": 2, "lr": 1e-4, "seed": seed, "max_turns": 4,
                "task_filter": {"hops": 2}}
    rng = random.Random(seed)
    train = load_tasks("search_chain", "train")
    tasks = [t for hops in CHAIN_HOPS for t in rng.sample([t for t in train if t["hops"] == hops],
                                                          CHAIN_DEMOS_PER_HOP)]
    rng.shuffle(tasks)
    return {"n_demos": len(tasks), "steps": 60, "batch_size": 8, "lr": 1e-4, "seed": seed,
            "max_turns": max(CHAIN_HOPS) + 2, "tasks": tasks}


def warm_start_options(env: str, fast: bool | None = None, seed: int = 0) -> dict[str, Any]:
    """The options of `env`'s warm start: the recipe its table entry names, else the standard one.
    `fast` defaults to `fast_mode()`."""
    recipe = environment(env).warm_start
    fast = fast_mode() if fast is None else fast
    return (imported(recipe) if recipe else standard_warm_start_options)(fast, seed)


def course_warm_start(env: str, **overrides: Any) -> Path:
    """Path of the course's standard warm-start checkpoint for `env` (trained once, then cached):
    `warm_start_options(env)` with `overrides` on top."""
    from course_lib.sft import ensure_warm_start

    return ensure_warm_start(env, **{**warm_start_options(env), **overrides})


__all__ = ["WarmStartSizes", "WARM_START", "mixed_hop_tasks", "HACK_FRACTION", "hack_demo_tasks",
           "standard_warm_start_options", "code_fix_warm_start_options", "search_qa_warm_start_options",
           "gridworld_warm_start_options", "LONG_HORIZONS", "gridworld_long_warm_start_options", "CHAIN_HOPS",
           "CHAIN_DEMOS_PER_HOP", "search_chain_warm_start_options", "warm_start_options",
           "course_warm_start"]
