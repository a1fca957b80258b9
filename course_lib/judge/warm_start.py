"""A judge warm start: the embedded model fine-tuned as a group judge on verifier-labelled groups.

The untrained 135M judge ranks by position, not by quality (issue 19's probe: pairwise accuracy 0.54 on
search_qa, scores rising with the position in the prompt). So it is taught, as a policy is warm-started:

* **groups** (`labelled_groups`): for each *train* task of an environment with a verifier, the expert's
  demonstration and `samples` rollouts of a warm-started policy (`policy_warm_start`: the environment's
  `course_warm_start`, smaller for two of them; temperature 1). A task enters when at least one rollout
  failed; its group is the expert, one failed rollout, and `group_size - 2` more rollouts drawn from the
  rest (failures or successes). Every label is the verifier's reward, the expert's too. The negatives are
  the policy's own failures (a two-hop question answered with the first hop's city, a walk into a hole),
  not a base model's noise.
* **the reading** (`judge_readings`): the judge is shown each group exactly as `score_group` shows it
  (`group_layout`, `forced_group_prompt` with the task's reference answer where it has one, the answer
  forced to ``Scores:\\nid <id> (recap): ``, see `score_line`), in rotations of
  a shuffled order. The shuffle never looks at the labels, so over the groups a success is as likely as
  a failure at every position: the position says nothing about the label and cannot be learned. Each
  trajectory itself stands at every position equally often only when `orders` is a multiple of the
  group's distinct trajectories n (the full size reads groups of 4 in 2 orders: each trajectory at two
  opposite positions, which ones drawn by the shuffle).
* **the loss** (`judge_sft_step`): at each id's forced position, cross-entropy toward a target digit
  ``d*(R) = LOW_DIGIT + (HIGH_DIGIT - LOW_DIGIT) * R``, rounded: 8 for a success (R = 1), 1 for a failure
  (R = 0). Loss = mean over ids of -log P(d* | prompt, "Scores:\\n", "id <id> (recap): "); no other token is
  trained. Why 8 and 1 rather than 9 and 0: the verifier only says pass or fail, while the rubric asks for
  more (fewer wasted steps among successes, partial credit among failures); targets one step in from the
  ends keep the expected digit off its bounds, so the judge can still order two successes, and a reward
  read as E[digit]/9 does not saturate.

    path = ensure_judge_warm_start()    # trained once per set of options, cached under runs/judge_warm_start/
    judge = LocalJudge(str(path))       # a LocalJudge loads it by path; score_group(group, judge=judge)

Training is resumable like `course_lib.train`: groups are cached per environment as they are built, a
checkpoint is written every `save_every` steps, and a Ctrl+C finishes the update, saves, and stops;
calling again resumes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from course_lib import Sizes, fast_mode, runs_dir
from course_lib.batching import loss_scale, unscale_gradients
from course_lib.checkpoint import (
    DeferredInterrupt,
    find_checkpoint,
    log_metrics,
    restore_checkpoint,
    save_checkpoint,
    save_model,
    truncate_metrics,
)
from course_lib.envs import ENVIRONMENTS, load_tasks
from course_lib.judge.backends import LocalJudge
from course_lib.judge.errors import JudgeRequestRejected
from course_lib.judge.prompts import DEFAULT_RUBRIC, SCORES_HEADER, forced_group_prompt, score_line
from course_lib.judge.scoring import group_layout
from course_lib.models import bf16_is_fast
from course_lib.trajectory import Trajectory

TRAIN_ENVS = tuple(name for name, spec in ENVIRONMENTS.items() if spec.teaches_judge)  # search_qa, gridworld
HIGH_DIGIT, LOW_DIGIT = 8, 1  # target digits for verifier reward 1 and 0 (see the module's docstring)
# Turn limits of the policy's rollouts, the table's `rollout_turns` (search_qa: two searches and an answer,
# one turn to spare; gridworld: room to wander); other environments get DEFAULT_TURNS.
ROLLOUT_TURNS = {name: spec.rollout_turns for name, spec in ENVIRONMENTS.items() if spec.rollout_turns}
DEFAULT_TURNS = 6
# The version of what the code makes of the options: the groups' records, the rollouts, the readings' prompts
# (here and in judge.prompts / judge.scoring.group_layout) and the targets. Bump it on any such change: it is
# part of every cache key (`ensure_judge_warm_start`, benchmarks/judge_quality.py), so old caches are not
# reused.
FORMAT = 2  # 2: reference-guided prompts (`task_reference`), score lines that recall each trajectory's ending
# The judge is trained on prompts cut as `LocalJudge` cuts them when it scores: one limit, LocalJudge's
# default.
JUDGE_PROMPT_TOKENS: int = LocalJudge.__init__.__kwdefaults__["max_prompt_tokens"]
# The token limit of one policy turn in the rollouts the judge learns from: the RL runs' default
# (`max_new_tokens` of the trainer's rollout config, 48). Its own constant, so that the judge never imports
# the trainer; change both together.
POLICY_TURN_TOKENS = 48


@dataclass(frozen=True)
class JudgeWarmStartSizes(Sizes):
    """Sizes of a judge warm start."""

    groups_per_env: int  # training groups per environment (tasks where the policy failed at least once)
    group_size: int  # trajectories per group: the expert, one failed rollout, group_size - 2 more rollouts
    samples: int  # policy rollouts per task: the pool a group's rollouts are drawn from
    epochs: int  # passes over the groups
    orders: int  # readings of each group per epoch, in rotations of a shuffled order
    batch_size: int  # readings per AdamW step
    lr: float = 5e-5
    max_new_tokens: int = POLICY_TURN_TOKENS  # token limit of one policy turn (as in RL training)


JUDGE_WARM_START = {
    "fast": JudgeWarmStartSizes(groups_per_env=2, group_size=3, samples=2, epochs=1, orders=2, batch_size=2),
    "full": JudgeWarmStartSizes(groups_per_env=64, group_size=4, samples=4, epochs=1, orders=2, batch_size=8,
                                lr=1e-4),
    # notebook 09's learning mode: one environment (search_qa), half the groups, 32 steps of 4 readings.
    # Measured (benchmarks/README.md, judge_quality): learning starts after about 80 readings; 8 steps of 8
    # were not enough.
    "notebook": JudgeWarmStartSizes(groups_per_env=32, group_size=4, samples=4, epochs=2, orders=2,
                                    batch_size=4, lr=1e-4),
}


def target_digit(reward: float) -> int:
    """The digit a judge is trained to give a trajectory with verifier reward R in [0, 1]:
    round(LOW_DIGIT + (HIGH_DIGIT - LOW_DIGIT) * R)."""
    return round(LOW_DIGIT + (HIGH_DIGIT - LOW_DIGIT) * min(1.0, max(0.0, reward)))


# ----- the groups ------------------------------------------------------------------------------------


def _group_record(env: str, expert: Trajectory, rollouts: list[Trajectory], group_size: int,
                  rng: random.Random) -> dict[str, Any] | None:
    """A group as JSON-ready data: the expert, one failed rollout, and group_size - 2 more rollouts
    (None when no rollout failed). Each member keeps its messages, its verifier reward, its source, and
    whether any of its turns was cut at max_new_tokens (`truncated`)."""
    failed = [t for t in rollouts if not t.success]
    if not failed:
        return None
    first = rng.choice(failed)
    rest = [t for t in rollouts if t is not first]
    members = [(expert, "expert"), (first, "policy")] + [
        (t, "policy") for t in rng.sample(rest, min(len(rest), group_size - 2))]
    return {"env": env, "task_id": expert.task_id,
            "trajectories": [{"messages": t.messages, "reward": float(t.reward), "source": source,
                              "truncated": any(s.truncated for s in t.steps)} for t, source in members]}


def task_reference(env: str, task_id: str) -> str | None:
    """The task's reference answer (its "answer" field: search_qa, lookup, data_analysis), looked up among
    the environment's train and test tasks; None where the task has none (gridworld)."""
    answer = _answers(env).get(str(task_id))
    return None if answer is None else str(answer)


@functools.cache
def _answers(env: str) -> dict[str, Any]:
    """Task id -> "answer" field, over all of an environment's tasks (read once per process)."""
    return {str(t["id"]): t.get("answer") for t in _split_tasks(env, "all")}


def as_trajectories(record: dict[str, Any]) -> list[Trajectory]:
    """A cached group record as `Trajectory` objects (messages, reward; source, truncated and the task's
    reference answer, `task_reference`, in `info`; no tokens), which `score_group` and `judge_agreement`
    take."""
    group_id = f"{record['env']}:{record['task_id']}"
    reference = task_reference(record["env"], record["task_id"])
    return [Trajectory(task_id=record["task_id"], group_id=group_id, traj_id=f"{group_id}#{k}",
                       messages=t["messages"], prompt_ids=[], reward=t["reward"],
                       info={"source": t["source"], "truncated": t.get("truncated", False),
                             **({"reference": reference} if reference is not None else {})})
            for k, t in enumerate(record["trajectories"])]


def _split_tasks(env: str, split: str) -> list[dict[str, Any]]:
    """The tasks of `split`: "train", "test", or "all" (both: for an environment the judge never trained
    on)."""
    return load_tasks(env, "train") + load_tasks(env, "test") if split == "all" else load_tasks(env, split)


# The warm start whose failures are the negatives, where the course's own recipe would cost more than the
# judge needs: the full gridworld recipe (256 demonstrations, 48 steps of 8 long episodes) is the costliest of
# the course and no notebook uses it; lookup's is used nowhere either. A quarter of the steps still gives a
# policy that calls the tools and fails in its own ways (how often is measured by the groups it yields).
LIGHT_WARM_START = {"n_demos": 64, "steps": 16, "batch_size": 4, "lr": 1e-4}
# sorted: the order the cache keys of the judges already trained have them in
LIGHT_WARM_START_ENVS = tuple(sorted(name for name, spec in ENVIRONMENTS.items() if spec.light_judge_policy))


def policy_warm_start(env: str) -> Path:
    """The warm-started policy that rolls out in `env` (trained once, cached): `course_warm_start(env)`, or in
    the full size for the environments of LIGHT_WARM_START_ENVS, that recipe with LIGHT_WARM_START's sizes."""
    from course_lib.warm_starts import course_warm_start

    if env in LIGHT_WARM_START_ENVS and not fast_mode():
        return course_warm_start(env, **LIGHT_WARM_START)
    return course_warm_start(env)


def _load_policy_for(env: str, policy: Any):
    """(model, tokenizer) of the policy that rolls out: `policy` as a pair, a `load_policy` name or path,
    or None for `policy_warm_start(env)`."""
    from course_lib.models import load_policy

    if isinstance(policy, tuple):
        return policy
    return load_policy(str(policy if policy is not None else policy_warm_start(env)))


def _read_chunks(path: Path | None) -> list[dict[str, Any]]:
    """The chunks a groups cache holds, one JSON line each. A last line that does not parse (the process was
    killed while writing it) is dropped, from the file too, so the next chunk is appended on a clean line;
    a bad line before the last is real damage and raises."""
    if not path or not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    try:
        done = [json.loads(line) for line in lines]
    except json.JSONDecodeError:
        done = [json.loads(line) for line in lines[:-1]]
        path.write_text("".join(line + "\n" for line in lines[:-1]))
        print(f"{path}: dropped an unfinished last line (a run stopped while writing it)")
    return done


def labelled_groups(env: str, n_groups: int, *, split: str = "train", policy: Any = None, group_size: int = 4,
                    samples: int = 4, temperature: float = 1.0, max_new_tokens: int = POLICY_TURN_TOKENS,
                    seed: int = 0, chunk: int = 8, max_tasks: int | None = None,
                    cache: str | Path | None = None, progress: bool = True) -> list[list[Trajectory]]:
    """Up to `n_groups` verifier-labelled groups of `env`: per task, the expert and rollouts of `policy`
    with at least one failure among them (see the module's docstring). Tasks of `split` are visited in a
    seeded shuffled order, `chunk` at a time (one batched rollout each), until `n_groups` are found or
    `max_tasks` were tried. Fewer groups come back when the tasks run out: the caller reports how many.

    policy: (model, tokenizer), a checkpoint path or model name, or None for `policy_warm_start(env)`.
    cache: a JSON-lines file, one line per chunk: a rerun (after Ctrl+C or a kill too) reads the chunks
    done and rolls out only the rest; the policy loads only when a chunk has to be rolled out.
    """
    from course_lib.rollout import expert_rollout, rollout

    tasks = _split_tasks(env, split)
    random.Random(seed).shuffle(tasks)
    tasks = tasks[:max_tasks]
    path = Path(cache) if cache else None
    done = _read_chunks(path)
    records = [g for c in done for g in c["groups"]]
    loaded = None
    starts = range(done[-1]["start"] + chunk if done else 0, len(tasks), chunk)
    bar = tqdm(total=n_groups, initial=min(len(records), n_groups), desc=f"judge groups ({env})",
               disable=not progress)
    for start in starts:
        if len(records) >= n_groups:
            break
        loaded = loaded or _load_policy_for(env, policy)
        model, tokenizer = loaded
        part = tasks[start:start + chunk]
        experts = expert_rollout(tokenizer, env, part)
        rolled = rollout(model, tokenizer, env, part, group_size=samples,
                         max_turns=ROLLOUT_TURNS.get(env, DEFAULT_TURNS), max_new_tokens=max_new_tokens,
                         temperature=temperature, seed=seed * 1000 + start, progress=False)
        rng = random.Random(seed * 1000 + start)
        found = [r for e, g in zip(experts, rolled) if (r := _group_record(env, e, list(g), group_size, rng))]
        records += found
        bar.update(min(len(records), n_groups) - bar.n)
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as f:
                f.write(json.dumps({"start": start, "groups": found}) + "\n")
    bar.close()
    return [as_trajectories(r) for r in records[:n_groups]]


# ----- the readings and the update ---------------------------------------------------------------------


@dataclass
class Reading:
    """One reading of a group: the judge's messages, the ids in the order read, their forced score lines
    (`score_line`: the id and a recap of its trajectory), and each id's target digit."""

    messages: list[dict[str, str]]
    ids: list[str]
    lines: list[str]
    digits: list[int]


def judge_readings(groups: list[list[Trajectory]], *, orders: int, seed: int = 0, epoch: int = 0,
                   rubric: str = DEFAULT_RUBRIC) -> list[Reading]:
    """`orders` readings of each group (one with a single distinct trajectory is never judged: skipped).

    A group's distinct trajectories are shuffled (seeded by seed, epoch and the group's place), and reading
    k uses that order rotated by k·n/orders places: with orders = n every trajectory stands at every
    position once. An id's target is `target_digit` of the mean verifier reward of the trajectories
    sharing it (identical trajectories share an id and, with a deterministic verifier, a reward).
    """
    out = []
    for g, group in enumerate(groups):
        prefix, remainders, ids = group_layout([t.messages for t in group])
        if len(remainders) < 2:
            continue
        rewards: dict[str, list[float]] = {}
        for i, t in zip(ids, group):
            rewards.setdefault(i, []).append(t.reward)
        order = list(remainders)
        random.Random(f"{seed}:{epoch}:{g}").shuffle(order)
        n = len(order)
        for k in range(orders):
            shift = (k * n // orders) % n
            read = order[shift:] + order[:shift]
            shown = {i: remainders[i] for i in read}
            messages = forced_group_prompt(prefix, shown, rubric, group[0].info.get("reference"))
            out.append(Reading(messages, read, [score_line(i, r) for i, r in shown.items()],
                               [target_digit(sum(rewards[i]) / len(rewards[i])) for i in read]))
    return out


def judge_sft_step(judge: LocalJudge, optimizer: torch.optim.Optimizer, readings: list[Reading], *,
                   max_grad_norm: float = 1.0) -> dict[str, float]:
    """One AdamW update of the judge's model on `readings`: loss = mean over readings of the mean over
    their ids of −log P(target digit | the group, "Scores:\\n", "id <id> (recap): "), the digits read as
    `LocalJudge.forced_scores` reads them. Returns the loss, the share of ids whose most likely digit is
    on the right side of 4.5, and the mean expected score E[d]/9 of the ids with target > 4.5 and ≤ 4.5.

    A reading whose prompt the judge cuts to `max_prompt_tokens` (as it would when scoring) is trained on
    as cut and counted (`cut_readings`); one it rejects (`JudgeRequestRejected`: even cut it does not fit)
    is left out and counted (`skipped_readings`), and the mean is over the readings used. `skipped` says
    the optimizer step was skipped (a non-finite gradient, or no reading left).
    """
    model = judge.model
    model.train()
    optimizer.zero_grad(set_to_none=True)
    scale = loss_scale(getattr(model, "course_autocast", None))
    loss_sum, right, high, low, used, cut = 0.0, 0, [], [], 0, 0
    for r in readings:
        lines = r.lines
        try:
            logits, _ = judge.forced_logits(r.messages, SCORES_HEADER, lines)
        except JudgeRequestRejected:
            continue
        used += 1
        cut += len(judge._prompt_ids(r.messages)) > judge.max_prompt_tokens
        targets = torch.tensor([judge.digit_token(line, d) for line, d in zip(lines, r.digits)],
                               device=logits.device)
        loss = torch.nn.functional.cross_entropy(logits.float(), targets)
        (loss * scale / len(readings)).backward()
        loss_sum += float(loss.detach())
        with torch.no_grad():
            tokens = torch.tensor([[judge.digit_token(line, d) for d in range(10)] for line in lines],
                                  device=logits.device)
            probs = torch.softmax(logits.float(), dim=-1).gather(1, tokens)
            expected = (probs * torch.arange(10, device=logits.device)).sum(1) / probs.sum(1) / 9
        for e, p, d in zip(expected.tolist(), probs.argmax(1).tolist(), r.digits):
            (high if d > 4.5 else low).append(e)
            right += (p > 4.5) == (d > 4.5)
    # The backward passes divided by len(readings); dividing by scale · used / len(readings) makes it the mean
    # over the readings used, unscaled.
    unscale_gradients(model.parameters(), scale * used / len(readings) if used else 1.0)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))
    skipped = not used or not math.isfinite(grad_norm)
    if skipped:
        optimizer.zero_grad(set_to_none=True)
    else:
        optimizer.step()
    model.eval()
    return {"loss": loss_sum / used if used else math.nan,
            "digit_accuracy": _ratio(right, len(high) + len(low)),
            "score_success": _mean(high), "score_failure": _mean(low), "grad_norm": grad_norm,
            "skipped": skipped, "cut_readings": cut, "skipped_readings": len(readings) - used}


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


# ----- training, resumable, and the cached warm start ---------------------------------------------------


def _plan(groups: list[list[Trajectory]], sizes: JudgeWarmStartSizes, seed: int,
          rubric: str) -> list[list[Reading]]:
    """Every step's readings: per epoch, all readings in a seeded shuffled order, cut into batches."""
    batches = []
    for epoch in range(sizes.epochs):
        readings = judge_readings(groups, orders=sizes.orders, seed=seed, epoch=epoch, rubric=rubric)
        random.Random(f"{seed}:{epoch}:batches").shuffle(readings)
        batches += [readings[i:i + sizes.batch_size] for i in range(0, len(readings), sizes.batch_size)]
    return batches


def warmup_lr(step: int, steps: int, lr: float) -> float:
    """The learning rate of update `step` (1-based) of `steps`: lr · min(1, step / w),
    w = max(1, steps // 10). Adam's first updates move every weight by about lr whatever the gradient's
    size (measured here: one step at lr 1e-4 sent every score of a tiny run toward the same digit);
    ramping over the first tenth avoids that jolt. A function of the step alone, so a resumed run needs no
    scheduler state."""
    return lr * min(1.0, step / max(1, steps // 10))


def training_dtype(on_cpu: bool) -> str | None:
    """The judge's dtype while it trains: bf16 autocast on a CPU with bf16 matrix units
    (`models.bf16_is_fast`), else the model's own choice (fp32 on a CPU without them)."""
    return "bf16-autocast" if on_cpu and bf16_is_fast(torch.device("cpu")) else None


def train_judge(run_dir: str | Path, groups: list[list[Trajectory]], sizes: JudgeWarmStartSizes, *,
                base: str = "smollm2-135m", seed: int = 0, rubric: str = DEFAULT_RUBRIC,
                device: str | None = None, save_every: int = 8, max_prompt_tokens: int = JUDGE_PROMPT_TOKENS,
                record: dict[str, Any] | None = None, progress: bool = True) -> Path:
    """Fine-tune `base` as a group judge on `groups`; returns run_dir/judge, a folder `LocalJudge` loads.

    Resumes from run_dir/checkpoint when there is one (the step plan is seeded, so the same readings
    follow); writes a checkpoint every `save_every` steps; a Ctrl+C finishes the update, saves a
    checkpoint and raises KeyboardInterrupt (call again to resume). On a CPU the forward runs under
    bf16 autocast, as the policy's warm start does. The learning rate warms up (`warmup_lr`).
    Prompts are cut to `max_prompt_tokens` as the judge cuts them when it scores (`LocalJudge`'s default).
    metrics.jsonl: one row per step (cut_readings and skipped_readings: see `judge_sft_step`).
    judge/judge_warm_start.json: the config (sizes, seed, base, FORMAT, the digits, the prompt limit, the
    rubric's sha1, and `record`: what the groups came from, e.g. envs and policies) and the totals of
    cut and skipped readings.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    final, metrics = run_dir / "judge", run_dir / "metrics.jsonl"
    plan = _plan(groups, sizes, seed, rubric)
    if not plan:
        raise ValueError("no group to train on: each needs two different trajectories (see labelled_groups)")
    checkpoint = find_checkpoint(run_dir)
    on_cpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cpu"
    judge = LocalJudge(str(checkpoint / "model") if checkpoint else base, device=device,
                       dtype=training_dtype(on_cpu), max_prompt_tokens=max_prompt_tokens)
    optimizer = torch.optim.AdamW(judge.model.parameters(), lr=sizes.lr, weight_decay=0.0)
    torch.manual_seed(seed)
    start = 0
    if checkpoint:
        start = restore_checkpoint(checkpoint, optimizer)
        truncate_metrics(metrics, start)
    else:
        metrics.write_text("")  # rows of a run stopped before its first checkpoint are not kept
    config = {"sizes": sizes.options(), "seed": seed, "base": base, "groups": len(groups), "steps": len(plan),
              "format": FORMAT, "digits": {"high": HIGH_DIGIT, "low": LOW_DIGIT},
              "max_prompt_tokens": max_prompt_tokens,
              "rubric_sha1": hashlib.sha1(rubric.encode()).hexdigest(), **(record or {})}
    held, completed = DeferredInterrupt(), start
    bar = tqdm(range(start + 1, len(plan) + 1), desc="judge warm start", initial=start, total=len(plan),
               disable=not progress)
    try:
        for step in bar:
            for param_group in optimizer.param_groups:
                param_group["lr"] = warmup_lr(step, len(plan), sizes.lr)
            with held.hold():
                row = {"step": step, **judge_sft_step(judge, optimizer, plan[step - 1]),
                       "lr": optimizer.param_groups[0]["lr"]}
                log_metrics(metrics, row)
                completed = step
            bar.set_postfix(loss=f"{row['loss']:.2f}", right=f"{row['digit_accuracy']:.2f}",
                            cut=row["cut_readings"], skipped=row["skipped_readings"])
            if held.pending:
                raise KeyboardInterrupt
            if step % save_every == 0 and step < len(plan):
                save_checkpoint(run_dir, judge.model, judge.tokenizer, optimizer, None, step, config)
    except KeyboardInterrupt:
        save_checkpoint(run_dir, judge.model, judge.tokenizer, optimizer, None, completed, config)
        print(f"Interrupted: judge checkpoint saved at step {completed} of {len(plan)} in {run_dir}; "
              "call again to resume.")
        raise
    finally:
        bar.close()
    save_model(judge.model, judge.tokenizer, final)
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    totals = {k: sum(row.get(k, 0) for row in rows) for k in ("cut_readings", "skipped_readings")}
    (final / "judge_warm_start.json").write_text(json.dumps({**config, **totals}, indent=1))
    # the optimizer state is twice the judge: not kept
    shutil.rmtree(run_dir / "checkpoint", ignore_errors=True)
    return final


def judge_warm_start(run_dir: str | Path, *, envs: tuple[str, ...] = TRAIN_ENVS,
                     sizes: JudgeWarmStartSizes | None = None, policies: dict[str, str] | None = None,
                     seed: int = 0, rubric: str = DEFAULT_RUBRIC, device: str | None = None,
                     progress: bool = True) -> Path:
    """Build the training groups of every env in `envs` (train tasks; cached in
    run_dir/groups-<env>.jsonl), then `train_judge` on all of them. policies: env -> policy name or path
    (default: `policy_warm_start(env)`). Returns the trained judge's folder (run_dir/judge); an existing
    one is returned as it is. Its judge_warm_start.json records the envs and policies (a benchmark reads
    them to keep its held-out environments held out)."""
    run_dir = Path(run_dir)
    sizes = sizes or JUDGE_WARM_START["fast" if fast_mode() else "full"]
    if (run_dir / "judge" / "config.json").exists():
        return run_dir / "judge"
    groups = []
    for env in envs:
        found = labelled_groups(env, sizes.groups_per_env, split="train", policy=(policies or {}).get(env),
                                group_size=sizes.group_size, samples=sizes.samples,
                                max_new_tokens=sizes.max_new_tokens, seed=seed,
                                chunk=min(8, sizes.groups_per_env), cache=run_dir / f"groups-{env}.jsonl",
                                progress=progress)
        if len(found) < sizes.groups_per_env:
            print(f"{env}: {len(found)} groups with a failed rollout (asked for {sizes.groups_per_env})")
        groups += found
    record = {"envs": list(envs),
              "policies": {env: str((policies or {}).get(env) or f"policy_warm_start({env!r})")
                           for env in envs},
              "rollout_turns": {env: ROLLOUT_TURNS.get(env, DEFAULT_TURNS) for env in envs},
              "light_warm_start": LIGHT_WARM_START if not fast_mode() else None}
    return train_judge(run_dir, groups, sizes, seed=seed, rubric=rubric, device=device, record=record,
                       progress=progress)


def ensure_judge_warm_start(**options: Any) -> Path:
    """The judge warm start for these options (`judge_warm_start`'s keywords; sizes default to the mode's
    `JUDGE_WARM_START`), trained once under runs/judge_warm_start/judge-<hash> and reused afterwards.
    Returns the folder to give `LocalJudge`. The hash covers the options (the rubric by its sha1, the
    default one too, and the default envs) and what the code makes of them: FORMAT, ROLLOUT_TURNS,
    LIGHT_WARM_START, the target digits and the prompt limit."""
    sizes = options.pop("sizes", None) or JUDGE_WARM_START["fast" if fast_mode() else "full"]
    key_options = {k: v for k, v in options.items() if k not in ("progress", "device")}
    key_options["rubric"] = hashlib.sha1(key_options.get("rubric", DEFAULT_RUBRIC).encode()).hexdigest()
    key_options.setdefault("envs", TRAIN_ENVS)
    code = {"format": FORMAT, "rollout_turns": ROLLOUT_TURNS, "default_turns": DEFAULT_TURNS,
            "light_warm_start": [LIGHT_WARM_START, LIGHT_WARM_START_ENVS], "digits": [HIGH_DIGIT, LOW_DIGIT],
            "max_prompt_tokens": JUDGE_PROMPT_TOKENS}
    key = json.dumps({"sizes": sizes.options(), **key_options, **code}, sort_keys=True, default=list)
    path = runs_dir() / "judge_warm_start" / f"judge-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    return judge_warm_start(path, sizes=sizes, **options)
