"""The tabular horizon curve (issue 38): how each credit method's success changes as episodes grow, on
gridworld_long's maps at every horizon, with the same budget at each.

    python benchmarks/tabular_horizon.py              # 20 seeds per arm and horizon; resumable
    python benchmarks/tabular_horizon.py --seeds 3    # a quick look

At each horizon h (shortest path of h moves, turn limit 2h, a 5x5 view: `course_lib.tasks.gridworld_long`)
every arm trains a table policy (`course_lib.course.tabular.train_table`, uniform logits to start) on the
same `MAPS` test maps of that horizon, with groups of `GROUP` and `UPDATES` updates: the same number of
updates and episodes at every horizon. Seed i of every arm samples from the same random stream, so
the arms are paired by seed. The arms:

    outcome       R normalised within the map's group, on every move (GRPO)
    gigpo         + step advantages within anchor-state groups (γ 0.95)
    turn (path)   turn_dense with the aligned turn reward: ±0.1 for a move that lowers/raises the fewest
                  moves to the goal around holes and walls (`rewards.path_distance_turn_rewards`' rule)
    turn (line)   turn_dense with the misaligned one: the same with the straight-line distance, which pays
                  walking into the dead ends three maps in four have
    turn strict (path)  credit="turn" with the aligned reward: the same advantages, but a group whose
                  rollouts all got one reward is skipped, as the trainer's "turn" does (turn_dense trains it)
    critic        GAE(γ 1, λ 0.95) with a tabular V fitted to its returns, no turn rewards

(the trainer's defaults throughout, through `credit.advantages`). The table's state is the environment's
anchor (`state_key()`): the window and the status line, which names the cell, so it is the full state.

Every finished run is kept in benchmarks/results/tabular_horizon_runs.json (per update: success and the
share of move rows with advantage 0), so an interrupted run resumes where it stopped; seeds run outermost,
so a partial run has every arm at every horizon on the same seeds. The report gives per horizon the mean
success over the late window (updates `WINDOW`) with its 95% t interval, the difference of each arm
against outcome paired by seed (`tabular.paired_test`) and the share of moves without signal, and writes
tabular_horizon.json, tabular_horizon.md and tabular_horizon.png (success against the horizon).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
from scipy import stats
from tqdm.auto import tqdm

from course_lib.course.tabular import paired_test, train_table, window_mean
from course_lib.envs import load_tasks
from course_lib.tasks import filter_tasks
from course_lib.tasks.gridworld_long import HORIZONS

RESULTS = Path(__file__).resolve().parent / "results"
MAPS, GROUP, UPDATES = 4, 8, 80  # per horizon: maps, rollouts per map, updates (the same at every horizon)
WINDOW = (60, 80)  # the late window: success over these updates
ARMS = {  # label -> train_table options
    "outcome": {"method": "outcome"},
    "gigpo": {"method": "gigpo"},
    "turn (path)": {"method": "turn_dense", "process": "path"},
    "turn (line)": {"method": "turn_dense", "process": "line"},
    "turn strict (path)": {"method": "turn", "process": "path"},
    "critic": {"method": "critic"},
}


def horizon_maps(horizon: int, n: int = MAPS) -> list[dict]:
    """The first `n` test maps of gridworld_long at `horizon`: with n = 4, three that need a detour and one
    drawn from any start (the generator's `TRAP_EVERY`), at every horizon."""
    return filter_tasks(load_tasks("gridworld_long", "test"), {"horizon": horizon})[:n]


def run_key(horizon: int, arm: str, seed: int) -> str:
    return f"{horizon}|{arm}|{seed}"


def run_all(seeds: int, horizons: list[int], arms: list[str], runs_path: Path) -> dict[str, dict]:
    """Every (seed, horizon, arm) run not yet in `runs_path`, each saved as soon as it ends."""
    runs = json.loads(runs_path.read_text()) if runs_path.exists() else {}
    todo = [(s, h, a) for s in range(seeds) for h in horizons for a in arms if run_key(h, a, s) not in runs]
    maps = {h: horizon_maps(h) for h in horizons}
    for seed, horizon, arm in tqdm(todo, desc="runs"):
        options = dict(ARMS[arm])
        history = train_table(options.pop("method"), maps[horizon], seed=seed, updates=UPDATES,
                              group_size=GROUP, **options)
        runs[run_key(horizon, arm, seed)] = {key: [round(row[key], 4) for row in history]
                                             for key in ("success", "zero_share")}
        tmp = runs_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(runs, separators=(",", ":")) + "\n")
        tmp.replace(runs_path)
    return runs


def mean_interval(values: list[float]) -> dict[str, float]:
    """Mean over seeds and its 95% t interval, mean ± t_{0.975, n−1} · s / √n."""
    x = np.asarray(values, float)
    mean, n = float(x.mean()), len(x)
    half = float(stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def history(run: dict[str, list[float]]) -> list[dict[str, float]]:
    """A kept run back as `train_table`'s rows (the metrics kept: success and zero_share)."""
    return [dict(zip(run, row)) for row in zip(*run.values())]


def summarise(runs: dict[str, dict], seeds: int, horizons: list[int], arms: list[str]) -> dict:
    """Per horizon and arm: late-window success per seed, its mean and interval, the paired difference
    against outcome, and the late-window share of move rows whose advantage is 0."""
    start, stop = WINDOW
    summary = {}
    for h in horizons:
        done = [s for s in range(seeds) if all(run_key(h, a, s) in runs for a in arms)]
        histories = {a: [history(runs[run_key(h, a, s)]) for s in done] for a in arms}
        success = {a: [window_mean(hist, "success", start, stop) for hist in hs]
                   for a, hs in histories.items()}
        summary[h] = {
            "seeds": done,
            "success": {a: {**mean_interval(v), "per_seed": v} for a, v in success.items()},
            "vs_outcome": {a: paired_test(success[a], success["outcome"]) for a in arms if a != "outcome"},
            "zero_share": {a: float(np.mean([window_mean(hist, "zero_share", start, stop) for hist in hs]))
                           for a, hs in histories.items()},
            "curve": {a: np.mean([[row["success"] for row in hist] for hist in hs], axis=0).round(4).tolist()
                      for a, hs in histories.items()},
        }
    return summary


def markdown(summary: dict, header: str) -> str:
    arms = list(next(iter(summary.values()))["success"])
    start, stop = WINDOW
    lines = [header, "", f"Mean success over updates {start}-{stop} [95% interval over seeds]:", "",
             "| horizon (moves) | turn limit | seeds | " + " | ".join(arms) + " |",
             "|---:|---:|---:|" + "---:|" * len(arms)]
    for h, s in summary.items():
        cells = [f"{m['mean']:.3f} [{m['low']:.3f}, {m['high']:.3f}]"
                 for m in (s["success"][a] for a in arms)]
        lines.append(f"| {h} | {2 * h} | {len(s['seeds'])} | " + " | ".join(cells) + " |")
    others = [a for a in arms if a != "outcome"]
    lines += ["", "Difference against outcome, paired by seed: mean [95% interval], p (paired t-test):", "",
              "| horizon | " + " | ".join(f"{a} − outcome" for a in others) + " |",
              "|---:|" + "---:|" * len(others)]
    for h, s in summary.items():
        cells = [f"{t['mean_diff']:+.3f} [{t['low']:+.3f}, {t['high']:+.3f}], p={t['p']:.2g}"
                 for t in (s["vs_outcome"][a] for a in others)]
        lines.append(f"| {h} | " + " | ".join(cells) + " |")
    lines += ["", f"Share of move rows whose advantage is 0 (no signal), updates {start}-{stop}:", "",
              "| horizon | " + " | ".join(arms) + " |", "|---:|" + "---:|" * len(arms)]
    for h, s in summary.items():
        lines.append(f"| {h} | " + " | ".join(f"{s['zero_share'][a]:.3f}" for a in arms) + " |")
    return "\n".join(lines)


def plot(summary: dict, out_png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from course_lib.plots import plot_learning_curves

    arms = list(next(iter(summary.values()))["success"])
    curves = {a: [(h, s["success"][a]["mean"], s["success"][a]["low"], s["success"][a]["high"])
                  for h, s in summary.items()] for a in arms}
    seeds = min(len(s["seeds"]) for s in summary.values())
    title = (f"Tabular credit on gridworld_long against the horizon\n"
             f"{MAPS} maps per horizon, {UPDATES} updates, {seeds} seeds, 95% intervals")
    ax = plot_learning_curves(curves, title,
                              ylabel=f"success, updates {WINDOW[0]}-{WINDOW[1]}",
                              xlabel="horizon: shortest path (moves); turn limit twice that",
                              figsize=(7.0, 4.2))
    ax.set_xticks(list(summary))
    ax.set_ylim(-0.02, 1.02)
    ax.figure.savefig(out_png)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--horizons", type=int, nargs="+", default=list(HORIZONS), choices=list(HORIZONS))
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--out", type=Path, default=RESULTS / "tabular_horizon.json")
    args = parser.parse_args()
    if "outcome" not in args.arms:
        parser.error("the arms are compared with outcome: keep it among --arms")
    runs_path = args.out.with_name(args.out.stem + "_runs.json")
    started = time.time()
    runs = run_all(args.seeds, args.horizons, args.arms, runs_path)
    summary = summarise(runs, args.seeds, args.horizons, args.arms)
    header = (f"# Tabular credit against the horizon (gridworld_long)\n\n{time.strftime('%Y-%m-%d %H:%M')}, "
              f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, one process; "
              f"{(time.time() - started) / 60:.1f} min in this call (runs already kept are not re-run). "
              f"{MAPS} test maps per horizon, groups of {GROUP}, {UPDATES} updates, lr 8, uniform start.")
    text = markdown(summary, header)
    print(text)
    args.out.write_text(json.dumps({"header": header, "maps": MAPS, "group_size": GROUP, "updates": UPDATES,
                                    "window": list(WINDOW), "maps_by_horizon": {
                                        h: [m["id"] for m in horizon_maps(h)] for h in args.horizons},
                                    "summary": summary}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(text + "\n")
    plot(summary, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
