"""The controlled companion of the credit chapters: `course_lib.credit` driving table policies on gridworld.

    python benchmarks/tabular_credit.py               # 20 seeds per method, a few minutes on one core
    python benchmarks/tabular_credit.py --seeds 3     # a quick look

Three experiments, each a paired comparison over seeds (seed i of every method trains on the same maps
from the same uniform start and the same random stream):

    gigpo   eight 4x4 test maps, groups of 8, 60 updates: outcome vs GiGPO. Once every rollout of a
            group succeeds, outcome credit is 0 for all of them; GiGPO's step groups still compare the
            discounted returns of moves made from the same cell, so the shorter way keeps winning.
    turn    eight 6x6 test maps, groups of 8, 80 updates: outcome vs turn-level credit (`turn_dense`: it
            also trains groups whose rollouts all failed, as notebook 07's runs) with a path reward of
            +/-0.1 per move, aligned (distance around the holes) or misaligned (straight-line distance,
            which ignores them).
    critic  the same 6x6 maps with ONE rollout per task (no group baseline exists), 200 updates:
            a tabular critic (GAE with gamma=1, lambda=0.95, V(s) fitted to its returns) vs REINFORCE
            with no baseline.

Every arm computes its advantages through `credit.advantages` with the trainer's defaults (gigpo gamma 0.95,
turn gamma 0.95 and turn_weight 0.5, critic gae_gamma 1 and gae_lambda 0.95, reinforce gae_gamma 1): the maths
of the LLM runs.

Prints the table and writes benchmarks/results/tabular_credit.json (mean curves per method, per-seed
summaries) and tabular_credit.md. The notebooks plot the JSON next to the LLM runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from course_lib.course.tabular import paired_test, pick_maps, train_table, window_mean
from course_lib.envs import load_tasks

RESULTS = Path(__file__).resolve().parent / "results"

# name -> (map size, updates, group size, {label: train_table options}, [(metric, window start, stop)])
EXPERIMENTS = {
    "gigpo": (4, 60, 8, {"outcome": {"method": "outcome"}, "gigpo": {"method": "gigpo"}},
              [("success", 50, None), ("moves_when_solved", 50, None), ("zero_share", 50, None)]),
    "turn": (6, 80, 8, {"outcome": {"method": "outcome"},
                        "turn (aligned)": {"method": "turn_dense", "process": "path"},
                        "turn (misaligned)": {"method": "turn_dense", "process": "line"}},
             [("success", 5, 15), ("success", 70, None)]),
    "critic": (6, 200, 1, {"reinforce": {"method": "reinforce"}, "critic": {"method": "critic"}},
               [("advantage_var", 0, None), ("success", 150, None)]),
}


def run_experiment(name: str, seeds: int, maps_seed: int = 0) -> dict:
    size, updates, group, arms, windows = EXPERIMENTS[name]
    maps = pick_maps(load_tasks("gridworld", "test"), size, 8, seed=maps_seed)
    histories = {label: [] for label in arms}
    for label, options in arms.items():
        for seed in tqdm(range(seeds), desc=f"{name}: {label}", leave=False):
            opts = dict(options)
            histories[label].append(train_table(opts.pop("method"), maps, seed=seed, updates=updates,
                                                group_size=group, **opts))
    summary = {}
    for key, start, stop in windows:
        window = f"{key}[{start}:{stop if stop is not None else updates}]"
        per_seed = {label: [window_mean(h, key, start, stop) for h in hs] for label, hs in histories.items()}
        labels = list(arms)
        summary[window] = {
            "per_seed": per_seed,
            "mean": {lab: float(np.nanmean(v)) for lab, v in per_seed.items()},
            "paired_vs_first": {lab: paired_test(per_seed[lab], per_seed[labels[0]]) for lab in labels[1:]},
        }
    with warnings.catch_warnings():  # moves_when_solved is NaN in every seed until one episode succeeds
        warnings.simplefilter("ignore", RuntimeWarning)
        curves = {label: {key: np.nanmean([[row[key] for row in h] for h in hs], axis=0).tolist()
                          for key in ("success", "moves_when_solved", "advantage_var", "zero_share")}
                  for label, hs in histories.items()}
    return {"map_size": size, "updates": updates, "group_size": group, "seeds": seeds,
            "maps": [m["id"] for m in maps],
            "optimum_moves": float(np.mean([m["shortest_path_len"] for m in maps])),
            "summary": summary, "curves": curves}


def markdown(results: dict, header: str) -> str:
    lines = [header, ""]
    for name, res in results.items():
        lines += [f"## {name}: {res['map_size']}x{res['map_size']} maps, group {res['group_size']}, "
                  f"{res['updates']} updates, {res['seeds']} seeds "
                  f"(optimum {res['optimum_moves']:.3f} moves)", "",
                  "| window | " + " | ".join(res["curves"]) + " | difference vs first [95% CI], paired p |",
                  "|---|" + "---|" * (len(res["curves"]) + 1)]
        for window, s in res["summary"].items():
            diffs = "; ".join(f"{lab}: {t['mean_diff']:+.3f} [{t['low']:+.3f}, {t['high']:+.3f}], "
                              f"p={t['p']:.2g}" for lab, t in s["paired_vs_first"].items())
            lines.append(f"| {window} | " + " | ".join(f"{m:.3f}" for m in s["mean"].values())
                         + f" | {diffs} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS), choices=list(EXPERIMENTS))
    parser.add_argument("--out", type=Path, default=RESULTS / "tabular_credit.json")
    args = parser.parse_args()
    started = time.time()
    results = {name: run_experiment(name, args.seeds) for name in args.experiments}
    minutes = (time.time() - started) / 60
    header = (f"# Tabular credit companion\n\n{time.strftime('%Y-%m-%d %H:%M')}, "
              f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, one process: "
              f"{minutes:.1f} min for {args.seeds} seeds per arm.")
    text = markdown(results, header)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"header": header, "results": results}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(text + "\n")


if __name__ == "__main__":
    main()
