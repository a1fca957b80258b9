"""How well does a judge agree with a verifier? Prints one table row per (environment, judge).

    python benchmarks/judge_quality.py                                   # the embedded model, both methods
    python benchmarks/judge_quality.py --base-url http://host:8000/v1 --model Qwen2.5-14B-Instruct

Each group mixes expert demonstrations (reward 1) with base-policy rollouts (mostly reward 0), so the
verifier ranks them; the judge, which never sees the reward, should rank them the same way. Columns:
pairwise accuracy (pairs with different rewards ordered like the verifier; ties count half, so a
judge that gives everyone the same score gets 0.5), Kendall τ-b within groups, the share of scores that
move when only the order changes (group judging only: pointwise has no order), the share of judgings
that failed, and the cost per judging. The embedded model is measured both ways: pointwise (P(yes) per
trajectory) and group (one JSON answer per group); an endpoint given with --base-url is asked in groups.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time

import torch

from course_lib.judge import LocalJudge, OpenAIJudge
from course_lib.judge_quality import judge_agreement, verifier_groups
from course_lib.models import course_threads, load_policy


def fmt(x: float) -> str:
    return "  n/a" if isinstance(x, float) and math.isnan(x) else f"{x:5.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", default="search_qa,gridworld")
    parser.add_argument("--groups", type=int, default=3, help="groups per environment")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--judge-max-tokens", type=int, default=96, help="answer length of the local JSON judge")
    parser.add_argument("--max-retries", type=int, default=1)
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible judge endpoint to add")
    parser.add_argument("--model", default=None, help="the model name at --base-url")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rollout-tokens", type=int, default=64, help="max new tokens per policy turn")
    args = parser.parse_args()

    torch.set_num_threads(course_threads())
    model, tokenizer = load_policy(device="cpu" if not torch.cuda.is_available() else None)
    local = LocalJudge(model=model, tokenizer=tokenizer)
    # (judge, method, answer length of a group judging)
    judges = [(local, "pointwise", 0), (local, "group", args.judge_max_tokens)]
    if args.base_url:
        judges.append((OpenAIJudge(base_url=args.base_url, model=args.model, timeout=120), "group", 1024))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch threads {torch.get_num_threads()}, cuda={torch.cuda.is_available()}; seed {args.seed}; "
          f"{args.groups} groups x {args.group_size} per env ({args.group_size // 2} expert + "
          f"{args.group_size - args.group_size // 2} policy); group judging reads each in 2 orders, pointwise once")
    header = (f"{'env':10} {'judge':38} {'reward':>6} {'pair acc':>8} {'pairs':>5} {'tau':>5} "
              f"{'pos bias':>8} {'fail':>5} {'tok/judging':>11} {'s/judging':>9}")
    print(header)
    print("-" * len(header))
    calls = judgings = failed = 0
    for env in args.envs.split(","):
        t0 = time.time()
        groups = verifier_groups(env, args.groups, group_size=args.group_size, model=model, tokenizer=tokenizer,
                                 seed=args.seed, max_new_tokens=args.rollout_tokens, progress=True)
        print(f"{env:10} (rollouts: {time.time() - t0:.0f} s)", flush=True)
        for judge, method, max_tokens in judges:
            t0 = time.time()
            r = judge_agreement(env, judge, args.groups, method=method, group_size=args.group_size, seed=args.seed,
                                groups=groups, max_retries=args.max_retries, judge_max_tokens=max_tokens)
            calls, judgings, failed = calls + r["calls"], judgings + r["judgings"], failed + r["failed_judgings"]
            label = f"{judge.name} ({method})"
            print(f"{env:10} {label[:38]:38} {r['mean_verifier_reward']:6.2f} {fmt(r['pairwise_accuracy']):>8} "
                  f"{r['pairs']:5d} {fmt(r['kendall_tau']):>5} {fmt(r['position_bias_rate']):>8} "
                  f"{r['failed_judgings_rate']:5.2f} {r['tokens_per_judging']:11.0f} {r['seconds_per_judging']:9.1f}"
                  f"   ({time.time() - t0:.0f} s)", flush=True)
            if r["last_errors"]:
                print(f"{'':10} last judge errors: {r['last_errors'][-1][:100]}")
    print(f"judge calls in total: {calls}, judgings: {judgings}, failed judgings: {failed}")


if __name__ == "__main__":
    main()
