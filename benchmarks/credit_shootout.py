"""The credit-assignment shoot-out: outcome vs GiGPO vs turn-level vs critic, on one budget, over seeds.

    python benchmarks/credit_shootout.py --size cpu              # 2 CPU cores: search_qa, 4 methods x 5 seeds
    python benchmarks/credit_shootout.py --size cpu --report     # only rewrite the results file from
                                                                 # finished runs
    python benchmarks/credit_shootout.py --size gpu              # one GPU
    python benchmarks/credit_shootout.py --size tiny --seeds 0   # smoke size (the test uses it)
    COURSE_THREADS=2 python benchmarks/credit_shootout.py --size horizon --prepare-only  # alone, first

For each environment, every credit method starts from the same warm-start checkpoint and gets the same
budget and hyperparameters; a seed gives every method the same training tasks at every step (train()
draws them from (seed, step) alone) and the same sampling seed. Each (environment, method, seed) is one
run directory under runs/shootout/<size>-<preset hash>/. A run whose result.json exists is skipped, so
the script can be stopped and started again, run in pieces (--envs, --methods, --seeds), or run by
several worker processes at once (each run is claimed by one; the warm start is prepared by one).

Writes benchmarks/results/credit_shootout[_<size>].md from every finished run (so a partial run reports
the seeds it has): per method the final held-out success over seeds; every method against outcome,
paired by seed, with the t-interval, p-value and the smallest difference the run could detect; GiGPO's
step-group statistics. And a PNG of held-out success against RL step, and credit_shootout[_<size>]_runs.json:
every finished run's held-out curve, final per-task outcomes and per-step training statistics (no weights),
which notebook 06 plots as its reference runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import hashlib
import json
import math
import os
import platform
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from course_lib import Sizes, fast_mode, rewards, runs_dir, wilson_interval
from course_lib.checkpoint import interruptible, read_metrics
from course_lib.credit import CREDIT_METHODS, step_group_sizes
from course_lib.envs import load_tasks
from course_lib.evaluate import evaluate
from course_lib.models import course_threads, load_policy
from course_lib.rollout import rollout
from course_lib.sft import ensure_warm_start
from course_lib.tasks import filter_tasks
from course_lib.train.config import RolloutConfig, TrainConfig
from course_lib.train.loop import train
from course_lib.warm_starts import WarmStartSizes, course_warm_start

# the credit methods a preset may compare, in the reports' order (a preset's `methods` are fixed: runs pair
# up across workers)
METHODS = ("outcome", "gigpo", "turn", "turn_dense", "critic")
assert set(METHODS) <= set(CREDIT_METHODS), "every compared method is registered in course_lib.credit"
BASELINE = "outcome"  # every other method is compared with this one, seed by seed
RESULTS = Path(__file__).resolve().parent / "results"
ALPHA, POWER = 0.05, 0.80  # the paired test's level, and the power at which the detectable effect is stated


@dataclass(frozen=True)
class Preset(Sizes):
    """One budget, identical for every method."""

    steps: int  # RL steps per run
    tasks_per_step: int  # tasks per step
    group_size: int  # rollouts per task
    max_new_tokens: int  # tokens per model turn
    # held-out tasks per evaluation (the first ones of the test split that pass the RL filter)
    eval_tasks: int
    eval_every: int  # evaluation period in steps, and at the last step (step 0 is the shared start_eval)
    warm: WarmStartSizes | None  # the warm start shared by all methods; None: the course's learning-mode one
    envs: tuple[str, ...]  # environments run by default
    seeds: tuple[int, ...]  # seeds run by default
    lr: float = 2e-5
    lora_rank: int = 0  # OptimConfig.lora_rank: 0 trains every weight, >0 LoRA adapters of that rank
    max_turns: int | None = None  # None: the environment's turn limit (ENV_OPTIONS)
    sample_dtype: str = "float32"  # RolloutConfig.sample_dtype of the training rollouts
    methods: tuple[str, ...] = ("outcome", "gigpo", "turn", "critic")  # the methods run by default
    loss_type: str = "dapo"  # OptimConfig.loss_type: "dapo" weighs every token alike, "grpo" every episode
    temperature: float = 1.0  # RolloutConfig.temperature of the training rollouts (evaluation stays greedy)
    adam_eps: float = 1e-8  # OptimConfig.adam_eps


# the Preset fields added after runs were kept, with the default that keeps what those runs did
LATER_FIELDS = {"loss_type": "dapo", "temperature": 1.0, "adam_eps": 1e-8}


def budget(preset: Preset) -> dict:
    """The preset as a dict, the runs' budget and the source of its hash. A field at a default added after
    runs were kept (LATER_FIELDS: loss_type "dapo", temperature 1, adam_eps 1e-8) is left out, so those runs
    keep their hash and stay comparable."""
    out = asdict(preset)
    for field, default in LATER_FIELDS.items():
        if out[field] == default:
            del out[field]
    return out


PRESETS = {
    "tiny": Preset(steps=1, tasks_per_step=1, group_size=2, max_new_tokens=16, eval_tasks=2, eval_every=1,
                   warm=WarmStartSizes(n_demos=2, steps=1, batch_size=2), envs=("gridworld",), seeds=(0,),
                   max_turns=2),
    # cpu: `make demo`'s setting, the one known to learn on 2 CPU cores (two-hop search_qa from 0% to 67-82%
    # in 20 RL steps from the same warm start): half its RL steps, so that 4 methods x 5 seeds fit in 3
    # hours. Estimate, not a measurement: about 7 minutes per run on a loaded 2-core machine (10 steps of 16
    # episodes of up to 4 turns, two evaluations of 40 greedy episodes; the demo's 20 steps and 3 evaluations
    # took about 9 minutes on 2 idle cores), so 20 runs take about 140 minutes, plus the warm start, the
    # shared step-0 evaluation and the step-group rollouts (about 10 minutes, once).
    "cpu": Preset(steps=10, tasks_per_step=4, group_size=4, max_new_tokens=40, eval_tasks=40, eval_every=5,
                  warm=None, envs=("search_qa",), seeds=(0, 1, 2, 3, 4)),
    "gpu": Preset(steps=60, tasks_per_step=16, group_size=8, max_new_tokens=64, eval_tasks=200, eval_every=10,
                  warm=WarmStartSizes(n_demos=512, steps=96, batch_size=16), envs=("gridworld", "search_qa"),
                  seeds=(0, 1, 2, 3, 4)),
    # horizon: the horizon curve (issue 38) on gridworld_long at shortest paths of 4, 8 and 12 moves (turn
    # limits 8, 16, 24), all from one warm start on the three horizons' demonstrations. Evaluation on all 40
    # held-out maps of a horizon, at the last step only (40 greedy episodes of up to 24 turns take about 8
    # minutes on one core at h = 12); rollouts sample from the bf16 copy (benchmarks/sampler_dtype.py).
    # 10 steps, not 16: an RL step at h = 12 costs about 5 minutes on one shared core (episodes of up to 2,400
    # tokens), and 60 runs of 16 steps would be about two days of two workers.
    "horizon": Preset(steps=10, tasks_per_step=2, group_size=8, max_new_tokens=32, eval_tasks=40,
                      eval_every=10, warm=None,
                      envs=("gridworld_long-h4", "gridworld_long-h8", "gridworld_long-h12"),
                      seeds=(0, 1, 2, 3, 4), sample_dtype="bfloat16",
                      # LoRA r 16 at ten times full fine-tuning's lr: as fast a step, as good a learner, and
                      # a 63 MB checkpoint instead of 1.6 GB (benchmarks/lora_vs_full.py)
                      lr=2e-4, lora_rank=16,
                      # turn_dense: where most groups fail together, the turn rewards alone still move
                      # the policy (the tabular companion's working turn credit at every horizon)
                      methods=("outcome", "gigpo", "turn_dense", "critic")),
}
# The budget probe of the horizon preset (issue 38). At h = 4, ten LoRA updates at lr 2e-4 hardly changed
# which moves the policy samples (training success flat in every finished run), so the held-out differences
# at step 10 measured greedy episodes tipping on small weight changes. These presets keep everything of the
# horizon preset (the warm start, tasks, sampling seeds and cost of a step) but the learning rate, and
# evaluate at step 5 too: does a larger step learn in the same ten updates?
for _lr in (2e-4, 1e-3, 3e-3):
    PRESETS[f"horizon_lr{_lr:g}"] = PRESETS["horizon"].replace(lr=_lr, eval_every=5,
                                                              envs=("gridworld_long-h4",), seeds=(0, 1))
# At lr 1e-3 and 3e-3 held-out success fell from 0.325 to 0.025-0.050 within five updates of 2 maps x 8
# (benchmarks/README.md). The next probe: the same rollouts a step spread over 4 maps x 4, at lr 1e-3, so that
# an update is fitted to twice as many maps (does the collapse come from updates fitted to two maps?).
PRESETS["horizon_lr0.001_maps4"] = PRESETS["horizon_lr0.001"].replace(tasks_per_step=4, group_size=4)
# The other untested explanation: under "dapo" every token weighs alike, so the failing episodes (7-8 turns at
# h = 4 against about 4.5 for the successes) carry more of the loss than their advantages' sum says: the group
# normalisation makes the advantages sum to 0 over episodes, not over tokens, and the net push is down on the
# moves the policy samples. "grpo" averages each episode's tokens first, so every episode weighs alike.
PRESETS["horizon_lr0.001_grpo"] = PRESETS["horizon_lr0.001"].replace(loss_type="grpo")
# Neither held: the warm start is nearly deterministic (0.03-0.04 nats a token), and its sampled episodes
# succeed less often than its greedy ones (12.5% against 30%). The exploration probe brackets the rollout
# temperature (the loss divides the logits by the same one): above 1, more varied episodes to compare; below
# 1, sampled episodes closer to the greedy ones, so more groups that hold a success.
for _t in (1.5, 0.7):
    PRESETS[f"horizon_lr0.001_t{_t:g}"] = PRESETS["horizon_lr0.001"].replace(temperature=_t)
# Its control at temperature 1 on the same warm start: the horizon_lr0.001 budget under a name of its own,
# since that preset's committed runs come from another machine's warm start and a report keeps one run a seed.
PRESETS["horizon_lr0.001_t1"] = PRESETS["horizon_lr0.001"]
# Seed 1 of 0.7 and 1.5 fell by step 5 as well (0.050, 0.125): temperature is not it. What every probe at lr
# 1e-3 shares is AdamW's step: m/sqrt(v) is about sign(g), so each adapter weight moves by about lr at every
# update, whether the batch held one success in sixteen or five (grad norms 0.008-0.056, steps of one size).
# With ε far above the gradients' size, m/(sqrt(v) + ε) is about g/ε: a step in proportion to the gradient,
# SGD at lr/ε = 30 here, so a batch with little signal moves the policy little (steps of norm 0.24-1.7 for
# those grad norms, against about 1.6 for every AdamW step at lr 1e-3).
PRESETS["horizon_sgdlike"] = PRESETS["horizon_lr0.001"].replace(lr=3e-3, adam_eps=1e-4)
# Per environment: turn limit; the warm start's task filter (for presets with their own warm-start sizes) and
# its overrides of course_warm_start (for the others); the RL filter (training and held-out tasks).
ENV_OPTIONS = {
    "gridworld": {"max_turns": 6, "warm_filter": {"size": 4},
                  "course_overrides": {"task_filter": {"size": 4}}, "rl_filter": {"size": 4}},
    "search_qa": {"max_turns": 4, "warm_filter": {"hops": 1}, "course_overrides": {},
                  "rl_filter": {"hops": 2}},
}
# The long-horizon settings: one environment (`env`) at one horizon each, the turn limit twice the shortest
# path, a context that holds that many turns (about 240 + 91 tokens a turn), GiGPO's and the turn reward's
# ground in place (positions recur; `turn_reward` names the aligned per-turn reward of `course_lib.rewards`).
for _h in (4, 8, 12, 16):
    ENV_OPTIONS[f"gridworld_long-h{_h}"] = {
        "env": "gridworld_long", "max_turns": 2 * _h, "max_context": 300 + 100 * 2 * _h + 64,
        "warm_filter": {"horizon": _h}, "course_overrides": {}, "rl_filter": {"horizon": _h},
        "turn_reward": "path_distance_turn_rewards"}
# The second long-horizon family, search_chain at k = 2, 6 and 10 hops: the turn limit is the task's horizon,
# k searches, the answer and one turn of slack; the context holds that many turns. Measured with SmolLM2's
# tokenizer on the expert's episodes: a prompt of about 206 tokens and a full turn (a search of at most 33
# tokens and three sentences back, about 76) of 76 to 112, so 160 a turn leaves room for a sampled action of
# up to 64 tokens. The task filter is on hops (so these settings do not join gridworld's horizon table,
# whose columns are shortest paths); the turn reward is the aligned chain-progress one.
for _k in (2, 6, 10):
    ENV_OPTIONS[f"search_chain-k{_k}"] = {
        "env": "search_chain", "max_turns": _k + 2, "max_context": 300 + 160 * (_k + 2) + 64,
        "warm_filter": {"hops": _k}, "course_overrides": {}, "rl_filter": {"hops": _k},
        "turn_reward": "chain_progress_turn_rewards"}


def env_of(setting: str) -> str:
    """The environment a setting (a key of ENV_OPTIONS) runs: its `env`, else the key itself."""
    return ENV_OPTIONS[setting].get("env", setting)


def max_context_of(setting: str) -> int:
    return ENV_OPTIONS[setting].get("max_context", RolloutConfig.max_context)


def turn_reward_fn_of(setting: str, method: str):
    """The per-turn reward a turn-credit run of this setting trains with (None: the trainer's process
    reward)."""
    name = ENV_OPTIONS[setting].get("turn_reward")
    return getattr(rewards, name) if name and method in ("turn", "turn_dense") else None


# ------------------------------------------------------------------------------------------------------
# statistics
# ------------------------------------------------------------------------------------------------------


def paired_comparison(a: Sequence[float], b: Sequence[float], *, alpha: float = ALPHA,
                      power: float = POWER) -> dict[str, float]:
    """Paired comparison of two methods run on the same seeds: d_i = a_i − b_i, i = 1..n.

        mean  d̄ = Σ d_i / n,    s_d = sqrt(Σ (d_i − d̄)² / (n − 1)),    se = s_d / √n
        (1 − α) interval:  d̄ ± t_{1−α/2, n−1} · se
        paired t-test of H0 "mean difference 0":  t = d̄ / se,  p = 2 · P(T_{n−1} > |t|)  (two-sided)
        minimum detectable difference:  MDE = (t_{1−α/2, n−1} + t_{power, n−1}) · s_d / √n

    The MDE is the true mean difference that this test, with n seeds and this spread of differences, would
    find at level α with probability `power` (the usual approximation of the noncentral t by a shifted
    central one). With α = 0.05, power 0.8 and n = 5 it is 1.66 · s_d.
    When every seed gives the same difference (s_d = 0) the seeds do not measure the noise: t, p and the
    MDE are NaN and the interval is the single value d̄. Returns n, mean_diff, sd_diff, low, high, t, p, mde.
    """
    d = np.asarray(a, float) - np.asarray(b, float)
    n = len(d)
    if n < 2:
        raise ValueError(f"a paired comparison needs at least two seeds, got {n}")
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    t_crit, t_power = float(stats.t.ppf(1 - alpha / 2, n - 1)), float(stats.t.ppf(power, n - 1))
    if sd == 0:
        return {"n": n, "mean_diff": mean, "sd_diff": 0.0, "low": mean, "high": mean, "t": math.nan,
                "p": math.nan, "mde": math.nan}
    t = mean / se
    return {"n": n, "mean_diff": mean, "sd_diff": sd, "low": mean - t_crit * se, "high": mean + t_crit * se,
            "t": t, "p": float(2 * stats.t.sf(abs(t), n - 1)), "mde": (t_crit + t_power) * se}


def binomial_mde(n_seeds: int, n_tasks: int, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The MDE of `paired_comparison` with s_d from the evaluation's binomial noise alone, at its largest:
    each seed's success is a rate over n_tasks greedy episodes, Var ≤ 0.25 / n_tasks, so a difference of two
    independent ones has s_d ≤ sqrt(0.5 / n_tasks). Used when the seeds' differences have no spread."""
    t_sum = stats.t.ppf(1 - alpha / 2, n_seeds - 1) + stats.t.ppf(power, n_seeds - 1)
    return float(t_sum * math.sqrt(0.5 / n_tasks) / math.sqrt(n_seeds))


def verdict(name_a: str, name_b: str, comparison: dict[str, float], n_tasks: int, *,
            alpha: float = ALPHA) -> str:
    """One honest line: which of the two is better when the paired test resolves it, else the smallest
    difference the run could have detected."""
    c = comparison
    if c["sd_diff"] == 0:
        return (f"not resolved: every seed gave the same difference ({c['mean_diff']:+.3f}), so the seeds "
                f"do not measure the noise; with the evaluation's binomial noise at its largest, the run "
                f"could detect differences of about {binomial_mde(c['n'], n_tasks):.2f} or larger")
    if c["p"] < alpha:
        order = ">" if c["mean_diff"] > 0 else "<"
        return f"resolved: {name_a} {order} {name_b} (p={c['p']:.2g})"
    return (f"not resolved (p={c['p']:.2f}); the run could detect differences of about {c['mde']:.2f} or "
            "larger")


def t_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean over seeds and its 95% t-interval, x̄ ± t_{0.975, n−1} · s / √n (the mean itself for one seed)."""
    x = np.asarray(values, float)
    mean = float(x.mean())
    if len(x) < 2:
        return mean, mean, mean
    half = float(stats.t.ppf(0.975, len(x) - 1)) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return mean, mean - half, mean + half


# ------------------------------------------------------------------------------------------------------
# runs
# ------------------------------------------------------------------------------------------------------


def short_hash(data: object) -> str:
    return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]


def preset_dir(size: str) -> Path:
    """runs/shootout/<size>-<hash of the preset>: a changed preset starts afresh."""
    return runs_dir() / "shootout" / f"{size}-{short_hash(budget(PRESETS[size]))}"


def env_dir(size: str, env: str) -> Path:
    """<preset dir>/<env>-<hash of its options>: the cached per-environment results and every run of it."""
    return preset_dir(size) / f"{env}-{short_hash(ENV_OPTIONS[env])}"


def run_dir_of(size: str, env: str, method: str, seed: int) -> Path:
    return env_dir(size, env) / method / f"seed{seed}"


def cached_json(path: Path, compute) -> dict:
    """json.load(path) when it exists; else compute(), written to path (so reruns and other workers reuse
    it)."""
    if path.exists():
        return json.loads(path.read_text())
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return result


def max_turns_of(preset: Preset, env: str) -> int:
    return preset.max_turns or ENV_OPTIONS[env]["max_turns"]


def warm_start_of(size: str, env: str) -> Path:
    """The preset's warm start: its own sizes, or (warm=None) the course's learning-mode warm start."""
    preset, opts = PRESETS[size], ENV_OPTIONS[env]
    if preset.warm is not None:
        return ensure_warm_start(env_of(env), task_filter=opts["warm_filter"], progress=False,
                                 **preset.warm.options())
    if fast_mode():
        raise SystemExit(f"the {size} preset starts from the course's learning-mode warm start; "
                         "unset COURSE_FAST")
    return course_warm_start(env_of(env), progress=False, **opts["course_overrides"])


def start_eval(size: str, env: str, warm_path: Path) -> dict:
    """Held-out success of the warm start, i.e. step 0 of every run of this environment: greedy decoding
    from one checkpoint gives the same result for every method and seed, so it is computed once, with
    the runs' tasks and limits, and shared by every preset with the same warm start and evaluation (a
    probe that changes only the training, such as the learning rate, does not evaluate it again). Refuses
    a warm start other than the one the earlier runs started from."""
    preset = PRESETS[size]
    settings = {"env": env_of(env), "n_tasks": preset.eval_tasks,
                "task_filter": ENV_OPTIONS[env]["rl_filter"], "max_turns": max_turns_of(preset, env),
                "max_new_tokens": preset.max_new_tokens, "max_context": max_context_of(env)}

    def compute() -> dict:
        t0 = time.perf_counter()
        result = evaluate(str(warm_path), **settings)
        return {**result, "seconds": time.perf_counter() - t0, "warm_start": warm_path.name,
                "warm_id": warm_id(warm_path), "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M")}

    shared = runs_dir() / "shootout" / "start_evals" / f"{warm_path.name}-{short_hash(settings)}.json"
    start = cached_json(env_dir(size, env) / "start_eval.json", lambda: cached_json(shared, compute))
    if start["warm_start"] != warm_path.name:
        raise SystemExit(f"{env_dir(size, env)} holds runs from warm start {start['warm_start']}, not "
                         f"{warm_path.name} (the warm start changed): move that folder away to start afresh")
    return start


def warm_id(warm_path: Path) -> str:
    """A hash of the warm start's weights. The same recipe trained on another machine gives other weights
    (other floating-point kernels), so every run records which warm start it started from."""
    digest = hashlib.sha1()
    for path in sorted(Path(warm_path).glob("*.safetensors")):
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 24), b""):
                digest.update(chunk)
    return digest.hexdigest()[:8]


START_KEYS = ("success", "ci_low", "ci_high", "n", "mean_turns_success", "warm_id", "machine", "date")


def identified_start(size: str, env: str, warm_path: Path, start: dict) -> dict:
    """The step-0 evaluation with its warm start's identity (hash, machine, date). `start_eval` records
    them when it measures; a start_eval.json from before that gets them here, dated by its file's time,
    and written back."""
    if "warm_id" not in start:
        path = env_dir(size, env) / "start_eval.json"
        start = {**start, "warm_id": warm_id(warm_path), "machine": machine(),
                 "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))}
        path.write_text(json.dumps(start))
    return start


def step_group_stats(size: str, env: str, warm_path: Path, seed: int = 0) -> dict:
    """GiGPO's step groups on one step's rollouts of the warm-start model on the RL tasks: how often
    states recur. Cached per environment."""
    preset = PRESETS[size]

    def compute() -> dict:
        model, tokenizer = load_policy(str(warm_path))
        tasks = filter_tasks(load_tasks(env_of(env), "train"),
                             ENV_OPTIONS[env]["rl_filter"])[: preset.tasks_per_step]
        groups = rollout(model, tokenizer, env_of(env), tasks, group_size=preset.group_size,
                         max_turns=max_turns_of(preset, env), max_new_tokens=preset.max_new_tokens,
                         temperature=preset.temperature, seed=seed, max_context=max_context_of(env),
                         progress=False)
        anchors = [s.anchor for g in groups for t in g for s in t.steps]
        group_ids = [t.group_id for g in groups for t in g for _ in t.steps]
        return group_summary(step_group_sizes(anchors, group_ids), len(anchors))

    return cached_json(env_dir(size, env) / "group_stats.json", compute)


def group_summary(sizes: Sequence[int] | Counter, rows: int) -> dict:
    """Step rows, the share of them in step groups of size >= 2, and the histogram {size: groups}."""
    hist = Counter(sizes) if not isinstance(sizes, Counter) else sizes
    return {"rows": rows,
            "fraction_in_groups_ge2": sum(k * v for k, v in hist.items() if k >= 2) / max(1, rows),
            "histogram": {str(k): v for k, v in sorted(hist.items())}}


def prepare(size: str, env: str) -> tuple[Path, dict]:
    """Warm start, step-group statistics and step-0 evaluation of one environment, under a file lock: workers
    started together wait for the first one instead of training the same warm start twice."""
    directory = env_dir(size, env)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "prepare.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when the process dies
        warm = warm_start_of(size, env)
        step_group_stats(size, env, warm)
        start = identified_start(size, env, warm, start_eval(size, env, warm))
    return warm, start


def claim(run_dir: Path) -> bool:
    """Take a run for this process (several workers can share the job list): False when another live
    process holds it. A claim left by a dead process is taken over (the run resumes from its checkpoint)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "claimed_by"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(path.read_text() or 0)
                os.kill(pid, 0)  # raises when no such process
                return pid == os.getpid()
            except (ValueError, ProcessLookupError):
                path.unlink(missing_ok=True)  # stale: its process is gone
                continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True
    return False


def eval_steps(preset: Preset) -> list[int]:
    """The steps a run is evaluated at: every eval_every steps, and the last."""
    every = preset.eval_every or preset.steps
    return sorted({*range(every, preset.steps + 1, every), preset.steps})


def train_config(size: str, env: str, method: str, seed: int, warm_path: Path) -> TrainConfig:
    """One run's config. It evaluates only at the end of a call: run_one calls train() up to each
    evaluation step in turn (resuming from the checkpoint saved there), so no run repeats the shared step-0
    evaluation."""
    preset = PRESETS[size]
    return TrainConfig(env=env_of(env), model=str(warm_path),
                       run_dir=str(run_dir_of(size, env, method, seed)),
                       credit=method, steps=preset.steps, tasks_per_step=preset.tasks_per_step,
                       group_size=preset.group_size, optim=dict(lr=preset.lr, lora_rank=preset.lora_rank,
                                                          loss_type=preset.loss_type,
                                                          adam_eps=preset.adam_eps),
                       eval_every=0, eval_tasks=preset.eval_tasks,
                       rollout=dict(max_turns=max_turns_of(preset, env),
                                    max_new_tokens=preset.max_new_tokens, max_context=max_context_of(env),
                                    sample_dtype=preset.sample_dtype, temperature=preset.temperature),
                       checkpoint_every=0, seed=seed, task_filter=ENV_OPTIONS[env]["rl_filter"],
                       progress=False)


def run_one(size: str, env: str, method: str, seed: int, warm_path: Path, start: dict) -> dict | None:
    """One training run (skipped when its result.json exists); returns its result, or None when another
    worker is running it. Its checkpoint is deleted at the end; metrics.jsonl and result.json stay."""
    preset = PRESETS[size]
    config = train_config(size, env, method, seed, warm_path)
    run_dir = Path(config.run_dir)
    result_path = run_dir / "result.json"
    if result_path.exists():
        return json.loads(result_path.read_text())
    if not claim(run_dir):
        return None
    if result_path.exists():  # finished by a worker that exited between the check above and the claim
        return json.loads(result_path.read_text())
    t0 = time.perf_counter()
    for stop in eval_steps(preset):
        if train(dataclasses.replace(config, steps=stop),
                 turn_reward_fn=turn_reward_fn_of(env, method))["interrupted"]:
            raise KeyboardInterrupt  # train() saved a checkpoint; the next invocation resumes this run
    rows = read_metrics(run_dir)
    evals = [r for r in rows if r["kind"] == "eval"]
    trains = [r for r in rows if r["kind"] == "train"]
    sizes: Counter = Counter()
    for r in trains:
        sizes.update({int(k): v for k, v in (r.get("step_group_sizes") or {}).items()})
    result = {"env": env, "method": method, "seed": seed, "size": size, "preset": budget(preset),
              "start": {k: start.get(k) for k in START_KEYS},
              "curve": [(0, start["success"])] + [(r["step"], r["success"]) for r in evals],
              "final": evals[-1]["success"], "outcomes": evals[-1].get("outcomes"),  # 1/0 per held-out task
              "mean_turns_success": evals[-1].get("mean_turns_success"), "seconds": time.perf_counter() - t0,
              "train_tokens": sum(r.get("train_tokens", 0) for r in trains), "steps_run": len(trains),
              "equal_reward_groups": sum(r.get("equal_reward_groups", 0) for r in trains),
              "nonzero_advantage_tokens": float(np.mean([r.get("nonzero_advantage_tokens", 0.0)
                                                         for r in trains] or [0.0])),
              "updates": sum(not r.get("skipped_update") for r in trains),
              "step_group_sizes": dict(sizes), "step_rows": sum(k * v for k, v in sizes.items()),
              "machine": machine(), "threads": torch.get_num_threads(), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d %H:%M")}
    result_path.write_text(json.dumps(result))
    shutil.rmtree(run_dir / "checkpoint", ignore_errors=True)  # ~1.6 GB each with the optimizer state
    return result


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores, {gpu}"


def finished_results(size: str, committed: Sequence[dict] = ()) -> list[dict]:
    """Every finished run of this preset, from earlier invocations and other workers too, and the `committed`
    runs (an earlier machine's, from the results file) that this machine has not run. Only runs in their
    method's own folder count: a folder moved aside (e.g. `critic_whitened`, an older variant) is ignored."""
    found = ((p, json.loads(p.read_text())) for p in sorted(preset_dir(size).glob("*/*/seed*/result.json")))
    local = [r for p, r in found if p == run_dir_of(size, r["env"], r["method"], r["seed"]) / "result.json"]
    here = {run_key(r) for r in local}
    return local + [r for r in committed if run_key(r) not in here]


def run_key(r: dict) -> tuple[str, str, int]:
    return r["env"], r["method"], r["seed"]


def runs_path(out: Path, size: str) -> Path:
    """The results file's runs as data: credit_shootout[_<size>]_runs.json."""
    return out / f"credit_shootout{'' if size == 'cpu' else '_' + size}_runs.json"


def committed_results(path: Path, budget: dict | None = None) -> list[dict]:
    """The runs in a `_runs.json` results file (the committed ones: what earlier machines finished, whose
    run folders are gone), as results. A file written before runs recorded their warm start gives each run
    its curve's step 0, with the warm start's identity unknown, and sums its per-step rows for the totals.
    Refuses a file whose budget is not `budget` (the preset changed since those runs)."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    if budget is not None:
        # a field the file lacks was added later, with a default that keeps what the runs did before
        saved = {f.name: f.default for f in dataclasses.fields(Preset)} | data.get("budget", {})
        changed = [k for k, v in json.loads(json.dumps(budget)).items()
                   if json.loads(json.dumps(saved.get(k))) != v]
        if changed:
            raise SystemExit(f"{path} holds runs of another budget than the {data.get('preset')} preset's "
                             f"now ({', '.join(changed)}): move it aside (or restore the preset) first")
    results = []
    for run in data["runs"]:
        train, n = run.get("train") or [], len(run.get("outcomes") or [])
        s0 = run["curve"][0][1]
        low, high = wilson_interval(round(s0 * n), n) if n else (math.nan, math.nan)
        results.append({
            "equal_reward_groups": sum(t.get("equal_reward_groups") or 0 for t in train),
            "train_tokens": sum(t.get("train_tokens") or 0 for t in train),
            # None where the rows predate the count (the report prints "-")
            "nonzero_advantage_tokens": None if not any("nonzero_advantage_tokens" in t for t in train)
            else float(np.mean([t.get("nonzero_advantage_tokens") or 0.0 for t in train])),
            "step_group_sizes": {}, "step_rows": 0, "torch": "not recorded",
            "start": {"success": s0, "ci_low": low, "ci_high": high, "n": n, "mean_turns_success": None,
                      "warm_id": None, "machine": run.get("machine"), "date": None},
            **{k: v for k, v in run.items() if v is not None}, "committed": True})
    return results


def start_of(size: str, r: dict) -> dict:
    """The step-0 evaluation a run started from: recorded in the run, else (a run on this machine from
    before runs recorded it) its environment's start_eval.json here, else its curve's step 0."""
    if r.get("start"):
        return r["start"]
    path = env_dir(size, r["env"]) / "start_eval.json"
    if path.exists():
        return json.loads(path.read_text())
    return {"success": r["curve"][0][1], "ci_low": math.nan, "ci_high": math.nan, "n": 0, "warm_id": None}


def starts_of(size: str, env: str, results: list[dict]) -> list[dict]:
    """The distinct warm starts (step-0 evaluations) of an environment's runs, each with its number of runs
    (`runs`); this machine's start_eval.json too when no run has used it yet."""
    found: dict[tuple, dict] = {}
    for r in results:
        if r["env"] == env:
            st = start_of(size, r)
            key = (st.get("warm_id"), st["success"])
            found.setdefault(key, {**st, "runs": 0})["runs"] += 1
    path = env_dir(size, env) / "start_eval.json"
    if path.exists():
        st = json.loads(path.read_text())
        found.setdefault((st.get("warm_id"), st["success"]), {**st, "runs": 0})
    return list(found.values())


def start_label(st: dict, several: bool) -> str:
    if not several:
        return "*warm start (step 0)*"
    who = st.get("warm_id") or "not recorded"
    return f"*warm start {who} (step 0, {st['runs']} runs)*"


# ------------------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------------------


def by_seed(results: list[dict], env: str, method: str) -> dict[int, dict]:
    return {r["seed"]: r for r in results if r["env"] == env and r["method"] == method}


def method_rows(size: str, env: str, methods: list[str], results: list[dict]) -> list[str]:
    """The per-method table rows of one environment, after the warm start's row."""
    preset = PRESETS[size]
    lines = []
    starts = starts_of(size, env, results)
    for st in starts:
        turns = st.get("mean_turns_success")
        lines.append(f"| {env} | {start_label(st, len(starts) > 1)} | - | 0: {st['success']:.3f} | "
                     f"{st['success']:.3f} | - | "
                     f"95% Wilson interval [{st['ci_low']:.3f}, {st['ci_high']:.3f}] on {st['n']} tasks | "
                     f"{'-' if turns is None else f'{turns:.2f}'} | - | - | - | - | - |")
    for m in methods:
        rs = list(by_seed(results, env, m).values())
        if not rs:
            continue
        finals = [r["final"] for r in rs]
        sd = f"{np.std(finals, ddof=1):.3f}" if len(rs) > 1 else "-"
        steps = [s for s, _ in rs[0]["curve"]]
        curve = ", ".join(f"{s}: {np.mean([dict(r['curve'])[s] for r in rs]):.3f}" for s in steps)
        per_seed = ", ".join(f"{r['seed']}: {r['final']:.3f}" for r in rs)
        turns = [r["mean_turns_success"] for r in rs if r.get("mean_turns_success") is not None]
        runs = sum(r["steps_run"] for r in rs)
        shares = [r["nonzero_advantage_tokens"] for r in rs if r.get("nonzero_advantage_tokens") is not None]
        signal = f"{np.mean(shares):.2f}" if shares else "-"
        equal = sum(r["equal_reward_groups"] for r in rs) / max(1, runs * preset.tasks_per_step)
        lines.append(f"| {env} | {m} | {len(rs)} | {curve} | {np.mean(finals):.3f} | {sd} | {per_seed} | "
                     f"{f'{np.mean(turns):.2f}' if turns else '-'} | "
                     f"{equal:.2f} | {sum(r['updates'] for r in rs)}/{runs} | "
                     f"{np.mean([r['seconds'] for r in rs]) / 60:.1f} | "
                     f"{np.mean([r['train_tokens'] for r in rs]):.0f} | {signal} |")
    return lines


def comparison_rows(size: str, env: str, methods: list[str], results: list[dict]) -> list[str]:
    """Every method against the baseline, and against the warm start, paired by seed."""
    n_tasks = PRESETS[size].eval_tasks
    lines = []
    pairs = [(m, BASELINE) for m in methods if m != BASELINE] + [(m, "warm start") for m in methods]
    for a, b in pairs:
        runs_a = by_seed(results, env, a)
        # against the warm start: each run against the step 0 of the warm start it started from
        runs_b = by_seed(results, env, b) if b != "warm start" else {
            s: {"final": start_of(size, r)["success"]} for s, r in runs_a.items()}
        seeds = sorted(set(runs_a) & set(runs_b))
        if not seeds:
            continue
        if len(seeds) < 2:
            lines.append(f"| {env} | {a} - {b} | {len(seeds)} | - | - | - | - | "
                         "not tested: one paired seed so far |")
            continue
        c = paired_comparison([runs_a[s]["final"] for s in seeds], [runs_b[s]["final"] for s in seeds])
        p = "-" if math.isnan(c["p"]) else f"{c['p']:.2g}"
        mde = "-" if math.isnan(c["mde"]) else f"{c['mde']:.3f}"
        lines.append(f"| {env} | {a} - {b} | {c['n']} | {c['mean_diff']:+.3f} | "
                     f"[{c['low']:+.3f}, {c['high']:+.3f}] | "
                     f"{p} | {mde} | {verdict(a, b, c, n_tasks)} |")
    return lines


def per_task_rows(env: str, methods: list[str], results: list[dict]) -> list[str]:
    """Every method against the baseline, task by task on the seeds both have: discordant pairs and the
    exact McNemar test, p = P(|K − m/2| ≥ |k − m/2|) for K ~ Binomial(m, 1/2), m = discordant pairs."""
    lines = []
    base = by_seed(results, env, BASELINE)
    for m in methods:
        runs = by_seed(results, env, m)
        seeds = [s for s in sorted(set(runs) & set(base))
                 if runs[s].get("outcomes") and base[s].get("outcomes")]
        if m == BASELINE or not seeds:
            continue
        pairs = [(x, y) for s in seeds for x, y in zip(runs[s]["outcomes"], base[s]["outcomes"])]
        only_a, only_b = sum(x > y for x, y in pairs), sum(y > x for x, y in pairs)
        p = stats.binomtest(only_a, only_a + only_b).pvalue if only_a + only_b else 1.0
        lines.append(f"| {env} | {m} - {BASELINE} | {len(seeds)} | {only_a} | {only_b} | {p:.2g} |")
    return lines


def group_rows(size: str, envs: list[str], results: list[dict]) -> list[str]:
    """GiGPO's step groups: on the warm start's rollouts (cached by prepare), and during the gigpo runs."""
    lines = []
    for env in envs:
        path = env_dir(size, env) / "group_stats.json"
        if path.exists():
            s = json.loads(path.read_text())
            lines.append(f"| {env} | warm start, one step's rollouts | {s['rows']} | "
                         f"{s['fraction_in_groups_ge2']:.2f} | "
                         f"{', '.join(f'{k}: {v}' for k, v in s['histogram'].items())} |")
        gigpo = [r for r in results if r["env"] == env and r["method"] == "gigpo" and r["step_rows"]]
        if gigpo:
            hist: Counter = Counter()
            for r in gigpo:
                hist.update({int(k): v for k, v in r["step_group_sizes"].items()})
            s = group_summary(hist, sum(r["step_rows"] for r in gigpo))
            lines.append(f"| {env} | gigpo runs, all steps of {len(gigpo)} seeds | {s['rows']} | "
                         f"{s['fraction_in_groups_ge2']:.2f} | "
                         f"{', '.join(f'{k}: {v}' for k, v in s['histogram'].items())} |")
    return lines


def header(size: str, results: list[dict]) -> list[str]:
    """What ran where: preset, machines, threads, torch, dates (from the runs' result.json files)."""
    p = PRESETS[size]
    warm = ("the course's learning-mode warm start (`course_lib.warm_starts.course_warm_start(env)`)"
            if p.warm is None
            else f"a warm start on {p.warm.n_demos} expert demonstrations, {p.warm.steps} steps of batch "
                 f"{p.warm.batch_size}, lr {p.warm.lr}")
    filters = "; ".join(f"{env}: {ENV_OPTIONS[env]['rl_filter']}, {max_turns_of(p, env)} turns"
                        for env in sorted({r["env"] for r in results}))
    dates = sorted(r["date"] for r in results)
    seen = sorted({f"{r['machine']}, {r['threads']} torch threads per worker, torch {r['torch']}"
                   for r in results})
    lora = f", LoRA adapters of rank {p.lora_rank}" if p.lora_rank else ""
    starts = {(st.get("warm_id"), st.get("machine")): st for st in (start_of(size, r) for r in results)}
    several = ("" if len(starts) < 2 else
               f" The runs come from {len(starts)} warm starts of the same recipe (retrained on each new "
               "machine, other floating-point kernels give other weights), named by a hash of their weights: "
               + "; ".join(f"{w or 'not recorded'} ({m or 'machine not recorded'})" for w, m in starts)
               + ". Seeds pair methods across them where a seed's runs span machines.")
    return [f"# Credit-assignment shoot-out ({size} preset)", "",
            f"Machine: {'; '.join(seen)}. Runs finished {dates[0]} to {dates[-1]}; this file written "
            f"{time.strftime('%Y-%m-%d %H:%M')}.",
            f"Budget per run: {p.steps} RL steps x {p.tasks_per_step} tasks x group {p.group_size}, at most "
            f"{p.max_new_tokens} new tokens per turn, lr {p.lr}{lora}; RL and held-out tasks ({filters}); "
            f"held-out success (greedy, one episode per task) on the first {p.eval_tasks} test tasks at "
            f"steps {', '.join(map(str, [0] + eval_steps(p)))}. Every run starts from {warm}; step 0 is its "
            "evaluation, computed once per warm start. A seed gives every method the same training tasks at "
            f"every step.{several}", ""]


def write_report(size: str, results: list[dict], out_md: Path, out_png: Path) -> None:
    """The results file and the plot, from whatever runs have finished (each table says how many seeds)."""
    envs = sorted({r["env"] for r in results})
    methods = [m for m in METHODS if any(r["method"] == m for r in results)]
    lines = header(size, results) + [
        "## Held-out success per method", "",
        "Final success: mean over seeds, its standard deviation over seeds (the spread of training runs on "
        "these test tasks; intervals for differences are in the next table), and each seed's value. "
        "Equal-reward groups: the share of sampled groups whose rollouts all got the same reward (outcome "
        "and turn credit skip them; GiGPO keeps those whose step advantages are not all zero; the critic "
        "trains on all). Updates: optimizer steps taken out of the steps run, over all seeds. Turns of "
        "successes: the mean number of turns of the successful held-out episodes at the last step "
        "(shorter paths to the answer). Wall time and training tokens: means per run. Tokens with A != 0: "
        "the share of the sampled episodes' model tokens that carried a nonzero advantage, mean over steps "
        "(skipped groups carry none): how much of each step the update could move.", "",
        "| environment | method | seeds | mean success by step | final success | SD over seeds | per seed | "
        "turns of successes | equal-reward groups | updates | wall time (min) | train tokens | "
        "tokens with A != 0 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for env in envs:
        lines += method_rows(size, env, methods, results)
    lines += critic_variant_lines(size, results)
    lines += ["", "## Paired comparisons (by seed, final success)", "",
              f"Difference a - b over the seeds both have; 95% t-interval of the mean difference; two-sided "
              f"paired t-test p-value (per comparison, not corrected for the several comparisons); MDE: the "
              f"smallest true mean difference the test would detect at alpha {ALPHA} with power {POWER}, "
              "(t_{0.975,n-1} + t_{0.80,n-1}) * sd_diff / sqrt(n), from the observed spread of the "
              "differences. 'b = warm start' tests whether RL changed success at all.", "",
              "| environment | a - b | seeds | mean difference | 95% interval | p | MDE | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    for env in envs:
        lines += comparison_rows(size, env, methods, results)
    lines += ["", "## Per task, pooled over seeds", "",
              "The final evaluations of a and b on the same seed and the same held-out task, pooled over "
              "seeds: how often only a succeeded, how often only b did, and the exact two-sided sign test "
              "(McNemar) of those counts. It treats the pairs as independent, but every seed meets the same "
              "tasks, so its p-value is optimistic; the verdicts above come from the seed-paired test.", "",
              "| environment | a - b | seeds | only a succeeded | only b succeeded | sign-test p |",
              "|---|---|---|---|---|---|"]
    task_rows = [row for env in envs for row in per_task_rows(env, methods, results)]
    lines += task_rows or ["| - | no method has a seed in common with outcome yet | | | | |"]
    lines += ["", "## GiGPO step groups", "",
              "How many step rows share their anchor state with another row of the same group. GiGPO's "
              "step-level advantage is zero for singleton groups.", "",
              "| environment | rollouts | step rows | fraction in groups of size >= 2 "
              "| group-size histogram (size: groups) |",
              "|---|---|---|---|---|"] + group_rows(size, envs, results)
    by_horizon = horizon_settings(envs)
    if by_horizon:
        lines += ["", "## Final success against the horizon", "",
                  "Per method and horizon (shortest path in moves; the turn limit is twice that): the mean "
                  "final held-out success over seeds with its 95% t-interval, and the number of seeds. The "
                  "warm start's row is its step-0 evaluation with the 95% Wilson interval.", "",
                  "| method | " + " | ".join(f"h = {h}" for h in by_horizon) + " |",
                  "|---|" + "---|" * len(by_horizon)] + horizon_rows(size, by_horizon, methods, results)
        plot_horizon(size, by_horizon, methods, results, out_png.with_name(out_png.stem + "_curve.png"))
    out_md.write_text("\n".join(lines) + "\n")
    plot(size, envs, methods, results, out_png)
    write_runs(size, results, out_md.with_name(out_md.stem + "_runs.json"))  # = runs_path(out, size)


def horizon_settings(envs: list[str]) -> dict[int, str]:
    """{horizon: setting} of the long-horizon settings among `envs` (empty when fewer than two)."""
    found = {ENV_OPTIONS[e]["rl_filter"]["horizon"]: e for e in envs
             if "horizon" in ENV_OPTIONS[e]["rl_filter"]}
    return dict(sorted(found.items())) if len(found) >= 2 else {}


def horizon_rows(size: str, by_horizon: dict[int, str], methods: list[str], results: list[dict]) -> list[str]:
    cells = [" / ".join(f"{st['success']:.3f} [{st['ci_low']:.3f}, {st['ci_high']:.3f}]"
                        for st in starts_of(size, env, results)) or "-" for env in by_horizon.values()]
    lines = ["| *warm start (step 0)* | " + " | ".join(cells) + " |"]
    for m in methods:
        cells = []
        for env in by_horizon.values():
            finals = [r["final"] for r in by_seed(results, env, m).values()]
            mean, low, high = t_interval(finals) if finals else (math.nan,) * 3
            if not finals:
                cells.append("-")
            elif len(finals) == 1:  # one seed has no interval over seeds
                cells.append(f"{mean:.3f} (n=1, no interval)")
            else:
                cells.append(f"{mean:.3f} [{low:.3f}, {high:.3f}] (n={len(finals)})")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return lines


def plot_horizon(size: str, by_horizon: dict[int, str], methods: list[str], results: list[dict],
                 path: Path) -> None:
    """Final held-out success against the horizon: per method the mean over seeds with its 95% t-interval
    (methods offset slightly in x), and the warm start's step-0 success with its Wilson interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.plots import method_color

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    horizons = list(by_horizon)
    by_warm: dict = {}  # one grey line per warm start
    for h, e in by_horizon.items():
        for st in starts_of(size, e, results):
            by_warm.setdefault(st.get("warm_id"), []).append((h, st))
    for k, points in enumerate(by_warm.values()):
        st = [s for _, s in points]
        ax.errorbar([h for h, _ in points], [s["success"] for s in st],
                    yerr=[[s["success"] - s["ci_low"] for s in st],
                          [s["ci_high"] - s["success"] for s in st]],
                    color="grey", ls="--", marker="s", capsize=3,
                    label=None if k else f"warm start (step 0){'s' if len(by_warm) > 1 else ''}")
    for i, m in enumerate(methods):
        points = [(h, t_interval([r["final"] for r in by_seed(results, e, m).values()]),
                   len(by_seed(results, e, m))) for h, e in by_horizon.items() if by_seed(results, e, m)]
        if not points:
            continue
        x = np.array([h for h, _, _ in points]) + 0.15 * (i - (len(methods) - 1) / 2)
        mean = np.array([b[0] for _, b, _ in points])
        ax.errorbar(x, mean, yerr=[mean - [b[1] for _, b, _ in points], [b[2] for _, b, _ in points] - mean],
                    color=method_color(m), marker="o", capsize=3, lw=2,
                    label=f"{m} ({min(n for *_, n in points)}-{max(n for *_, n in points)} seeds)")
    ax.set_xticks(horizons)
    ax.set_xlabel("horizon: shortest path to the goal (moves); turn limit = 2 x horizon")
    ax.set_ylabel(f"held-out success after {PRESETS[size].steps} RL steps")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"gridworld_long: final success against the horizon ({size} preset)\n"
                 "mean over seeds, 95% t-interval")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def critic_variant_lines(size: str, results: list[dict]) -> list[str]:
    """Which critic runs let the value loss's gradient into the policy's layers, read from each run's
    config.json (a config without `value_trains_backbone` predates the option, when it always did)."""
    shared = []
    for r in results:
        config_path = run_dir_of(size, r["env"], "critic", r["seed"]) / "config.json"
        if r["method"] == "critic" and config_path.exists():
            saved = json.loads(config_path.read_text())  # a flat config predates TrainConfig's parts
            critic = saved.get("critic", {"trains_backbone": saved.get("value_trains_backbone", True)})
            if critic["trains_backbone"]:
                shared.append(f"{r['env']} seed {r['seed']}")
    if not shared:
        return []
    return ["", f"Critic runs whose value loss also trained the policy's layers: {', '.join(shared)}. "
            "The trainer's default changed on 2026-12-02 (`TrainConfig.value_trains_backbone=False`): in "
            "notebook 08 such a run collapsed, as the value loss's gradient moved the shared layers. These "
            "runs measure that older critic."]


RUN_FIELDS = ("env", "method", "seed", "curve", "final", "outcomes", "mean_turns_success", "updates",
              "steps_run", "seconds", "machine", "threads", "date", "equal_reward_groups", "train_tokens",
              "nonzero_advantage_tokens", "step_group_sizes", "step_rows", "torch")
TRAIN_KEYS = ("success", "reward", "turns", "equal_reward_groups", "skipped_groups", "advantage_std",
              "nonzero_advantage_tokens", "step_group_size_mean", "train_tokens")


def write_runs(size: str, results: list[dict], path: Path) -> None:
    """Every finished run as data (the reference runs notebooks plot): its held-out curve, its final per-task
    outcomes and, per training step, TRAIN_KEYS read from the run's metrics.jsonl (when it is still there)."""
    runs = []
    rank = {m: k for k, m in enumerate(METHODS)}
    for r in sorted(results, key=lambda r: (r["env"], rank.get(r["method"], 99), r["seed"])):
        metrics_path = run_dir_of(size, r["env"], r["method"], r["seed"]) / "metrics.jsonl"
        if r.get("committed"):  # an earlier machine's run: its rows as committed
            train = r.get("train") or []
        else:
            train_rows = [row for row in read_metrics(metrics_path.parent) if row["kind"] == "train"] \
                if metrics_path.exists() else []
            train = [{"step": row["step"], **{k: row.get(k) for k in TRAIN_KEYS}} for row in train_rows]
        runs.append({k: r.get(k) for k in RUN_FIELDS} | {"start": start_of(size, r), "train": train})
    head = json.dumps({"preset": size, "budget": budget(PRESETS[size])})[:-1]
    # a run a line
    path.write_text(head + ', "runs": [\n' + ",\n".join(json.dumps(run) for run in runs) + "\n]}\n")


def plot(size: str, envs: list[str], methods: list[str], results: list[dict], path: Path) -> None:
    """Held-out success against RL step, one panel per environment: per method the mean over seeds with its
    95% t-band, and each seed as a thin line. Methods are offset slightly in x, so coinciding curves show."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.plots import method_color

    fig, axes = plt.subplots(1, len(envs), figsize=(6 * len(envs), 4.2), dpi=100, squeeze=False)
    for ax, env in zip(axes[0], envs):
        steps_seen: set[int] = set()
        for i, m in enumerate(methods):
            rs = list(by_seed(results, env, m).values())
            if not rs:
                continue
            steps = [s for s, _ in rs[0]["curve"]]
            steps_seen.update(steps)
            x = np.array(steps) + 0.012 * max(steps) * (i - (len(methods) - 1) / 2)
            values = np.array([[v for _, v in r["curve"]] for r in rs])
            for row in values:
                ax.plot(x, row, color=method_color(m), alpha=0.25, lw=0.8)
            bands = [t_interval(col) for col in values.T]
            ax.plot(x, [b[0] for b in bands], marker="o", lw=2, color=method_color(m),
                    label=f"{m} ({len(rs)} seeds)")
            ax.fill_between(x, [max(0, b[1]) for b in bands], [min(1, b[2]) for b in bands],
                            color=method_color(m), alpha=0.15)
        ax.set_xticks(sorted(steps_seen))
        ax.set_title(f"{env}: held-out success ({size} preset)\n"
                     f"mean over seeds, 95% t-band; thin lines: seeds")
        ax.set_xlabel("RL step")
        ax.set_ylabel("held-out success rate")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--envs", nargs="+", choices=list(ENV_OPTIONS), help="default: the preset's")
    ap.add_argument("--methods", nargs="+", choices=list(METHODS), help="default: the preset's")
    ap.add_argument("--seeds", nargs="+", type=int, help="default: the preset's")
    ap.add_argument("--report", action="store_true",
                    help="train nothing: write the results file from finished runs")
    ap.add_argument("--prepare-only", action="store_true",
                    help="only the warm start, step groups and step-0 evaluations, then stop: run it alone "
                         "with 2 threads before 1-thread workers, which would wait on one another")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    # COURSE_THREADS=1 for workers side by side: two 2-thread workers on 2 cores ran one step 4-10x slower
    # (measured: rollout 244 s vs 67 s, update 181 s vs 19 s).
    torch.set_num_threads(course_threads())
    interruptible()  # started with & from a script, SIGINT would be ignored: Ctrl+C keeps the checkpoint
    preset = PRESETS[args.size]
    # runs finished on earlier machines, with the same budget
    committed = committed_results(runs_path(args.out, args.size), budget(preset))
    done_elsewhere = {run_key(r): r for r in committed}
    prepared = {}
    for env in [] if args.report else args.envs or preset.envs:
        prepared[env] = warm, start = prepare(args.size, env)
        print(f"{env:<10} warm start {warm.name}: held-out success {start['success']:.3f} "
              f"on {start['n']} tasks", flush=True)
    if args.prepare_only:
        return {"prepared": {env: (str(warm), start["success"]) for env, (warm, start) in prepared.items()}}
    # seed by seed (then setting by setting): partial results pair up, at every setting
    for seed in args.seeds if args.seeds is not None else preset.seeds:
        for env, (warm, start) in prepared.items():
            for method in args.methods or preset.methods:
                local = run_dir_of(args.size, env, method, seed) / "result.json"
                if (env, method, seed) in done_elsewhere and not local.exists():
                    r = done_elsewhere[(env, method, seed)]
                    print(f"{env:<10} {method:<8} seed {seed}: committed from {r['machine']} "
                          f"(final success {r['final']:.3f})", flush=True)
                    continue
                r = run_one(args.size, env, method, seed, warm, start)
                if r is None:
                    print(f"{env:<10} {method:<8} seed {seed}: another worker is running it", flush=True)
                    continue
                print(f"{env:<10} {method:<8} seed {seed}: final success {r['final']:.3f} "
                      f"({r['seconds']:.0f} s)", flush=True)
    results = finished_results(args.size, committed)
    suffix = "" if args.size == "cpu" else f"_{args.size}"
    out_md, out_png = args.out / f"credit_shootout{suffix}.md", args.out / f"credit_shootout{suffix}.png"
    if results:
        args.out.mkdir(parents=True, exist_ok=True)
        write_report(args.size, results, out_md, out_png)
        print(out_md.read_text())
    else:
        print(f"no finished runs under {preset_dir(args.size)} yet")
    return {"results": results, "markdown": out_md, "plot": out_png, "preset": budget(preset),
            "run_root": preset_dir(args.size)}


if __name__ == "__main__":
    main()
