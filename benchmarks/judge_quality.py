"""How well does a judge agree with a verifier? The base embedded judge and the warm-started one, side
by side.

    python benchmarks/judge_quality.py                  # 40 groups per env; trains the judge warm start
                                                        # first if needed
    COURSE_FAST=1 python benchmarks/judge_quality.py    # the tiny size (tests)
    python benchmarks/judge_quality.py --judge runs/judge_warm_start/judge-<hash>/judge --out results.json
    python benchmarks/judge_quality.py --base-url http://host:8000/v1 --model Qwen2.5-14B-Instruct
                                                        # adds an endpoint

Groups (`course_lib.judge.warm_start.labelled_groups`): per task, the expert's demonstration and rollouts of
a warm-started policy (`policy_warm_start`: the environment's course warm start, temperature 1); a task
enters when a rollout failed, and its group is the expert, one failed rollout and group_size - 2 more
rollouts. So the negatives are the policy's own failures, and some positives are the policy's own
successes. Environments:

* `--envs` (default `TRAIN_ENVS`: search_qa, gridworld): the judge warm start trained on their *train* tasks;
  measured on *test* tasks;
* `--held-out` (lookup): an environment the judge never trained on (its train and test tasks both). The
  script stops with a message when the judge's judge_warm_start.json says it trained on one of them.

Every judge reads each group twice, in a seeded order and in that order reversed (`judge_agreement`,
forced-position group judging). Columns: groups, and how many hold two different verifier rewards (`mixed`);
then, each with a 95% interval (bootstrap over groups; Wilson for the failure rate): pairwise accuracy
(pairs with different verifier rewards ordered like the verifier; judge ties count half, so a constant judge
gets 0.5), the same over pairs of two policy rollouts alone (`policy-only`: every group holds the expert,
and an expert against a failure is the easy pair; this is the hard part), Kendall tau-b within groups
(tie-corrected: with a binary
verifier most pairs are tied, and a perfect judge gets 0.71 on a group of one success and three failures,
not 1), position bias (share of scores that move by more than 0.01 when only the order changes) and shift
(mean |score change| then), and the failure rate (share of groups with a failed judging). Before the table:
per environment, the share of trajectories with a turn cut at --max-new-tokens (such a negative may fail for
its length alone). --out is rewritten after every finished row, so a late crash keeps the rows done.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
from pathlib import Path

import torch

from course_lib import runs_dir
from course_lib.course.setup import pick
from course_lib.judge.backends import LocalJudge, OpenAIJudge
from course_lib.judge.quality import judge_agreement
from course_lib.judge.warm_start import (
    DEFAULT_TURNS,
    FORMAT,
    LIGHT_WARM_START,
    LIGHT_WARM_START_ENVS,
    ROLLOUT_TURNS,
    TRAIN_ENVS,
    ensure_judge_warm_start,
    labelled_groups,
)
from course_lib.models import EMBEDDED, HUB_MODELS, course_threads
from course_lib.train.config import RolloutConfig


def interval(value: float, ci: tuple[float, float]) -> str:
    """ "0.54 [0.41, 0.66]", or "n/a" for a value that could not be measured."""
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default=",".join(TRAIN_ENVS),
                        help="environments the judge trained on (test tasks)")
    parser.add_argument("--held-out", default="lookup",
                        help="environments it never trained on (all their tasks)")
    parser.add_argument("--groups", type=int, default=pick(2, 40), help="groups per environment")
    parser.add_argument("--group-size", type=int, default=pick(3, 4))
    parser.add_argument("--samples", type=int, default=pick(2, 4), help="policy rollouts per task")
    parser.add_argument("--max-new-tokens", type=int, default=RolloutConfig.max_new_tokens,
                        help="token limit of one policy turn (default: RL training's)")
    parser.add_argument("--chunk", type=int, default=pick(2, 8), help="tasks rolled out together")
    parser.add_argument("--policy", default=None,
                        help="one policy for every environment (default: each env's warm start)")
    parser.add_argument("--judge", default=None,
                        help="the warm-started judge's folder (default: ensure_judge_warm_start()), "
                             f"a model name ({EMBEDDED}, {', '.join(HUB_MODELS)}), or none")
    parser.add_argument("--no-base", action="store_true", help="leave out the base embedded judge")
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible judge endpoint to add")
    parser.add_argument("--model", default=None, help="the model name at --base-url")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the results (no timings) as JSON here")
    return parser.parse_args(argv)


def benchmark_groups(env: str, split: str, args: argparse.Namespace) -> list:
    """The groups of one environment, cached under runs/judge_quality/ by their options (a rerun, or one after
    Ctrl+C, rolls out only what is missing)."""
    options = {"env": env, "split": split, "groups": args.groups, "group_size": args.group_size,
               "samples": args.samples, "max_new_tokens": args.max_new_tokens, "chunk": args.chunk,
               "policy": args.policy, "seed": args.seed,
               "fast": os.environ.get("COURSE_FAST", ""), "format": FORMAT, "rollout_turns": ROLLOUT_TURNS,
               "default_turns": DEFAULT_TURNS, "light_warm_start": [LIGHT_WARM_START, LIGHT_WARM_START_ENVS]}
    key = hashlib.sha1(json.dumps(options, sort_keys=True).encode()).hexdigest()[:10]
    return labelled_groups(env, args.groups, split=split, policy=args.policy, group_size=args.group_size,
                           samples=args.samples, max_new_tokens=args.max_new_tokens,
                           seed=args.seed, chunk=args.chunk,
                           cache=runs_dir() / "judge_quality" / f"groups-{env}-{split}-{key}.jsonl")


def check_judge(args: argparse.Namespace, held_out: list[str]) -> None:
    """Stop early, before any model loads or rollout, when --judge names no judge or when the judge trained
    on a --held-out environment (its judge_warm_start.json records its envs; the default judge trains on
    TRAIN_ENVS)."""
    path = args.judge
    if path not in (None, "none", EMBEDDED, *HUB_MODELS) and not (Path(path) / "config.json").exists():
        raise SystemExit(f"--judge {path}: no judge there ({Path(path) / 'config.json'} does not exist). "
                         "Give the folder a judge warm start wrote "
                         "(runs/judge_warm_start/judge-<hash>/judge), a model name, or none.")
    trained = list(TRAIN_ENVS) if path is None else []
    record = Path(path) / "judge_warm_start.json" if path not in (None, "none") else None
    if record and record.exists():
        trained = json.loads(record.read_text()).get("envs", [])
    if overlap := sorted(set(trained) & set(held_out)):
        raise SystemExit(f"--held-out {','.join(overlap)}: the judge trained on "
                         f"{'them' if len(overlap) > 1 else 'it'} "
                         f"(its envs: {', '.join(trained)}); it is not held out. Pick another --held-out.")


def judges(args: argparse.Namespace) -> list[tuple[str, object]]:
    """(label, backend) of every judge compared: the base embedded model, the warm-started judge, an
    endpoint."""
    path = args.judge or str(ensure_judge_warm_start())  # first: training it needs the memory alone
    out = [] if args.no_base else [("base", LocalJudge())]
    if path != "none":
        out.append(("warm-started", LocalJudge(path)))
    if args.base_url:
        out.append(("endpoint", OpenAIJudge(base_url=args.base_url, model=args.model, timeout=120)))
    return out


def truncated_share(groups: list) -> float:
    """The share of a benchmark's trajectories with a turn cut at max_new_tokens."""
    members = [t for g in groups for t in g]
    return sum(bool(t.info.get("truncated")) for t in members) / max(1, len(members))


def table_row(env: str, split: str, label: str, mixed: int, r: dict) -> str:
    """One printed row: the counts, then each measure with its interval."""
    return (f"{env:12} {split:5} {label:12} {r['groups']:6d} {mixed:5d} {r['mean_verifier_reward']:6.2f} "
            f"{interval(r['pairwise_accuracy'], r['pairwise_accuracy_ci']):>18} {r['pairs']:5d} "
            f"{interval(r['policy_pairwise_accuracy'], r['policy_pairwise_accuracy_ci']):>18} "
            f"{r['policy_pairs']:5d} "
            f"{interval(r['kendall_tau'], r['kendall_tau_ci']):>19} "
            f"{interval(r['position_bias_rate'], r['position_bias_rate_ci']):>18} "
            f"{interval(r['position_shift'], r['position_shift_ci']):>18} "
            f"{interval(r['failure_rate'], r['failure_rate_ci']):>18}")


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    torch.set_num_threads(course_threads())
    held_out = [e for e in args.held_out.split(",") if e]
    check_judge(args, held_out)
    envs = [(e, "test") for e in args.envs.split(",") if e] + [(e, "all") for e in held_out]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads "
          f"{torch.get_num_threads()}, cuda={torch.cuda.is_available()}; seed {args.seed}; "
          f"{args.groups} groups per env of {args.group_size} (1 expert, 1 failed rollout, "
          f"{args.group_size - 2} more rollouts); each read in 2 orders")
    groups = {env: benchmark_groups(env, split, args) for env, split in envs}
    for env, g in groups.items():
        print(f"{env}: {truncated_share(g):.0%} of the trajectories have a turn cut at "
              f"{args.max_new_tokens} tokens")
    compared = judges(args)
    header = (f"{'env':12} {'tasks':5} {'judge':12} {'groups':>6} {'mixed':>5} {'reward':>6} "
              f"{'pairwise accuracy':>18} {'pairs':>5} {'policy-only acc.':>18} {'pairs':>5} "
              f"{'Kendall tau-b':>19} {'position bias':>18} "
              f"{'position shift':>18} {'failure rate':>18}")
    print(header)
    print("-" * len(header))
    rows = []
    for env, split in envs:
        mixed = sum(len({t.reward for t in g}) > 1 for g in groups[env])
        for label, judge in compared:
            r = judge_agreement(env, judge, len(groups[env]), method="group", group_size=args.group_size,
                                n_expert=1, groups=groups[env], seed=args.seed, max_retries=0)
            print(table_row(env, split, label, mixed, r), flush=True)
            if r["last_errors"]:
                print(f"{'':12} last judge error: {r['last_errors'][-1][:100]}")
            rows.append({"env": env, "tasks": split, "judge_label": label, "mixed_groups": mixed,
                         "truncated_share": truncated_share(groups[env]),
                         **{k: v for k, v in r.items() if "seconds" not in k}})
            if args.out:  # after every row: a crash later keeps what is done
                Path(args.out).write_text(json.dumps(rows, indent=1, default=float))
    if len(groups) and min(len(g) for g in groups.values()) < args.groups:
        print("fewer groups than asked where the tasks ran out of failed rollouts: "
              + ", ".join(f"{e} {len(g)}" for e, g in groups.items()))
    return rows


if __name__ == "__main__":
    main()
