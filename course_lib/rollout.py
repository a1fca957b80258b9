"""Multi-turn rollouts: the policy and the environments take turns until every episode is over.

    for each turn:
        contexts = the token ids of every live episode
        actions  = generate_turn(model, contexts)       # the model writes one turn per episode
        for each episode: env.step(action) -> observation, reward, done
        an episode that is done (or out of turns, or out of context) gets its final reward and leaves

Every live episode of every group advances together: one call of `generate_turn` per turn over all of them,
the environments step in a thread pool. The sampled token ids and their sampling-time log-probs go straight
into the trajectory (see `trajectory.py`): nothing the model wrote is ever re-tokenised.

`generate_turn` below is the plain version, to read: one context at a time, the model reads the whole
context again before every token. `rollout` uses the fast one, `course_lib.kv_cache.generate_turn`
(batched, with a KV cache carried from one turn to the next); it gives the same tokens under greedy decoding.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from course_lib import kv_cache
from course_lib.envs import Environment, make_env
from course_lib.kv_cache import PrefixCache
from course_lib.models import autocast_context, end_of_turn_id, sample_next
from course_lib.protocol import completes_stop_string
from course_lib.trajectory import Trajectory, TrajectoryBuilder, TrajectoryGroup

EnvFactory = Callable[[], Environment] | str

__all__ = ["EnvFactory", "PrefixCache", "RolloutStats", "expert_rollout", "generate_turn", "rollout",
           "success_rate"]


def _factory(env_factory: EnvFactory) -> Callable[[], Environment]:
    if isinstance(env_factory, str):
        name = env_factory
        return lambda: make_env(name)
    return env_factory


@dataclass
class RolloutStats:
    """What a rollout cost: for the throughput benchmark and the training metrics."""

    new_tokens: int = 0
    prefill_tokens: int = 0  # context tokens run through the model (cached and shared ones are not)
    generate_seconds: float = 0.0
    env_seconds: float = 0.0
    generate_calls: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Episode:
    env: Environment
    builder: TrajectoryBuilder
    done: bool = False
    cache: PrefixCache | None = None


@torch.no_grad()
def generate_turn(model, tokenizer, contexts: list[list[int]], *, max_new_tokens: int, temperature: float,
                  seed: int | None = None) -> tuple[list[list[int]], list[list[float]], list[bool]]:
    """One turn per context: the sampled action ids, their log-probs, and whether the turn was cut.

    The plain version, to read: one context at a time, and before every new token the model reads the whole
    context plus the tokens sampled so far again (no cache). Each token is drawn by `models.sample_next`:
    token ~ softmax(logits / temperature), log-prob = log softmax(logits / temperature)[token]; greedy
    (argmax) when temperature <= 0. A turn ends at the end-of-turn token, right after a stop string such as
    </tool_call>, or after max_new_tokens (then truncated = True).

    `kv_cache.generate_turn` gives the same tokens under greedy decoding, far faster; `rollout` uses it.
    """
    eot = end_of_turn_id(tokenizer)
    generator = torch.Generator(device=model.device).manual_seed(seed) if seed is not None else None
    all_ids, all_logprobs, all_truncated = [], [], []
    for context in contexts:
        ids, logprobs, text, truncated = [], [], "", True
        for _ in range(max_new_tokens):
            tokens = torch.tensor([context + ids], device=model.device)
            with autocast_context(model.device, getattr(model, "course_autocast", None)):
                logits = model(input_ids=tokens, use_cache=False, logits_to_keep=1).logits[:, -1]
            token, logprob = sample_next(logits, temperature, generator)
            ids.append(int(token))
            logprobs.append(float(logprob))
            if ids[-1] == eot:
                truncated = False
                break
            piece = tokenizer.decode(ids[-1:], skip_special_tokens=False)
            text += piece
            if completes_stop_string(text, piece):
                truncated = False
                break
        all_ids.append(ids)
        all_logprobs.append(logprobs)
        all_truncated.append(truncated)
    return all_ids, all_logprobs, all_truncated


def token_counter(tokenizer) -> Callable[[str], int]:
    """How many tokens `tokenizer` makes of a text: what an environment caps its observations with."""
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _start_episodes(tokenizer, envs: list[Environment], tasks: list[dict[str, Any]],
                    first_observations: list[str], *,
                    max_turns: int, seed: int) -> tuple[list[_Episode], list[TrajectoryGroup]]:
    """One episode per environment (tasks[i] has envs[i*G : (i+1)*G], G the group size), its context the
    system prompt and the task's first observation; and one `TrajectoryGroup` per task, its members
    these episodes."""
    group_size, eot = len(envs) // max(1, len(tasks)), end_of_turn_id(tokenizer)
    episodes, groups = [], []
    for i, task in enumerate(tasks):
        group_id, members = f"{task['id']}@{seed}", []
        for j in range(group_size):
            env = envs[i * group_size + j]
            env.max_turns = max_turns
            # its observations capped in tokens, not only characters
            env.count_tokens = token_counter(tokenizer)
            messages = [{"role": "system", "content": env.system_prompt()},
                        {"role": "user", "content": first_observations[i * group_size + j]}]
            builder = TrajectoryBuilder(tokenizer, messages, task_id=str(task["id"]), group_id=group_id,
                                        traj_id=f"{group_id}#{j}", end_of_turn_id=eot)
            _note_reference(builder.traj, task)
            episodes.append(_Episode(env, builder))
            members.append(builder.traj)
        groups.append(TrajectoryGroup(str(task["id"]), group_id, members))
    return episodes, groups


def _note_reference(trajectory, task: dict[str, Any]) -> None:
    """Keep the task's reference answer (its "answer" field, where it has one) in the trajectory's info: a
    reference-guided judge shows it (`course_lib.judge.scoring.score_group(reference=...)`). Never in the
    context."""
    if task.get("answer") is not None:
        trajectory.info["reference"] = str(task["answer"])


def _reset_all(make: Callable[[], Environment], tasks: list[dict[str, Any]], group_size: int,
               envs: list[Environment], pool: ThreadPoolExecutor, stats: RolloutStats) -> list[str]:
    """Build `group_size` environments per task into `envs` (one by one, so that the caller's `finally`
    closes those made before a failure) and reset them in the pool; returns their first observations."""
    t0 = time.perf_counter()
    for _ in range(len(tasks) * group_size):
        envs.append(make())
    pairs = [(envs[i * group_size + j], task) for i, task in enumerate(tasks) for j in range(group_size)]
    first = list(pool.map(lambda et: et[0].reset(et[1]), pairs))
    stats.env_seconds += time.perf_counter() - t0
    return first


def rollout(model, tokenizer, env_factory: EnvFactory, tasks: list[dict[str, Any]], group_size: int = 4,
            max_turns: int = 6, max_new_tokens: int = 96, temperature: float = 1.0, seed: int = 0, *,
            max_context: int = 2048, env_workers: int = 4, progress: bool = True,
            stats: RolloutStats | None = None, reuse_cache: bool = True,
            max_batch: int | None = 32) -> list[TrajectoryGroup]:
    """Run `group_size` episodes of each task, batched (turns by `kv_cache.generate_turn`); one group
    per task.

    env_factory: an environment name or a callable that builds a fresh environment (one per episode:
    each rollout has its own state and sandbox). temperature <= 0 means greedy decoding.
    max_context: no turn is generated from a context longer than max_context - max_new_tokens; an episode
    whose next observation would pass that ends there (info["context_limit"]), scored by the verifier.
    reuse_cache: keep each episode's keys and values between turns (False: every turn runs the model
    over the whole context again; the same tokens up to floating-point rounding, only slower).
    max_batch: at most this many episodes play at once (whole groups; None: all). Every live episode keeps
    its keys and values, about 46 KB a token in fp32, so 128 episodes of 2,000 tokens would hold 12 GB;
    the tasks beyond a batch play in the next one, with their own sampling seeds.
    """
    make = _factory(env_factory)
    stats = stats if stats is not None else RolloutStats()
    per_batch = len(tasks) if max_batch is None else max(1, max_batch // max(1, group_size))
    bar = tqdm(total=len(tasks) * group_size, desc="rollout episodes", disable=not progress, leave=False)
    groups: list[TrajectoryGroup] = []
    try:
        for k, start in enumerate(range(0, len(tasks), per_batch)):
            groups += _play(model, tokenizer, make, tasks[start:start + per_batch], group_size, seed, k,
                            max_turns=max_turns, max_new_tokens=max_new_tokens, temperature=temperature,
                            max_context=max_context, env_workers=env_workers, stats=stats,
                            reuse_cache=reuse_cache, bar=bar)
    finally:
        bar.close()
    return groups


def _play(model, tokenizer, make: Callable[[], Environment], tasks: list[dict[str, Any]], group_size: int,
          seed: int, batch_index: int, *, max_turns: int, max_new_tokens: int, temperature: float,
          max_context: int, env_workers: int, stats: RolloutStats, reuse_cache: bool,
          bar) -> list[TrajectoryGroup]:
    """One batch of `rollout`: every episode of `tasks`, turn by turn, until all have ended."""
    envs: list[Environment] = []
    pool = ThreadPoolExecutor(max_workers=env_workers)

    def end(e: _Episode, reward: float, last_observation: str, info: dict[str, Any],
            step_reward: float = 0.0) -> None:
        t = e.builder.finish(reward, last_observation=last_observation, done_info=info)
        t.steps[-1].reward += step_reward  # an episode cut at a limit keeps its last step's own reward
        t.verifier_reward, e.done, e.cache = t.reward, True, None
        bar.update(1)

    def fits(e: _Episode, extra: int) -> bool:
        # can a turn follow the context + `extra` tokens within max_context?
        return len(e.builder.token_ids) + extra + max_new_tokens <= max_context

    try:
        first_obs = _reset_all(make, tasks, group_size, envs, pool, stats)
        episodes, groups = _start_episodes(tokenizer, envs, tasks, first_obs, max_turns=max_turns, seed=seed)
        for e in (e for e in episodes if not fits(e, 0)):
            raise ValueError(f"the first prompt of task {e.builder.traj.task_id!r} is "
                             f"{len(e.builder.token_ids)} tokens: with max_new_tokens={max_new_tokens} no "
                             f"turn fits in max_context={max_context}; raise max_context")

        for turn in range(max_turns):
            live = [e for e in episodes if not e.done]
            if not live:
                break
            anchors = [e.env.state_key() for e in live]
            t0 = time.perf_counter()
            caches = [e.cache for e in live] if reuse_cache else None
            ids, lps, cut = kv_cache.generate_turn(model, tokenizer, [e.builder.token_ids for e in live],
                                                   max_new_tokens=max_new_tokens, temperature=temperature,
                                                   seed=seed * 1000 + turn + 7919 * batch_index,
                                                   caches=caches, stats=stats)
            for e, cache in zip(live, caches or []):
                e.cache = cache
            stats.generate_seconds += time.perf_counter() - t0
            stats.generate_calls += 1
            stats.new_tokens += sum(len(x) for x in ids)
            steps = [e.builder.add_action(a, lp, anchor=anc, truncated=c)
                     for e, a, lp, anc, c in zip(live, ids, lps, anchors, cut)]
            t0 = time.perf_counter()
            results = list(pool.map(lambda es: es[0].env.step(es[1].action_text), zip(live, steps)))
            stats.env_seconds += time.perf_counter() - t0
            for e, res in zip(live, results):
                if res.done:
                    end(e, res.reward, res.observation, res.info)
                    continue
                # The next turn is generated from context + observation (its template delta): it must fit.
                too_long = not fits(e, len(e.builder.observation_ids(res.observation)))
                if too_long or turn == max_turns - 1:
                    score = float(e.env.score())  # scoring fills env.info too (code_fix: its diff check)
                    info = dict(res.info, **e.env.info, context_limit=too_long, turn_limit=not too_long)
                    end(e, score, res.observation, info, step_reward=res.reward)
                else:
                    e.builder.add_observation(res.observation, reward=res.reward, info=res.info)
    finally:
        for env in envs:
            env.close()
        pool.shutdown(wait=True)
    return groups


def expert_rollout(tokenizer, env_factory: EnvFactory, tasks: list[dict[str, Any]], *,
                   max_turns: int = 12) -> list[Trajectory]:
    """Demonstrations: one trajectory per task, acted by the environment's expert policy.

    The expert's text is tokenised (it was never sampled) and closed with the end-of-turn token,
    so a warm-started model learns to end its turn. Log-probs are 0.
    """
    make = _factory(env_factory)
    eot = end_of_turn_id(tokenizer)
    out = []
    for task in tasks:
        env = make()
        try:
            env.max_turns = max_turns
            env.count_tokens = token_counter(tokenizer)
            obs = env.reset(task)
            messages = [{"role": "system", "content": env.system_prompt()}, {"role": "user", "content": obs}]
            b = TrajectoryBuilder(tokenizer, messages, task_id=str(task["id"]),
                                  group_id=f"{task['id']}@expert",
                                  traj_id=f"{task['id']}@expert#0", end_of_turn_id=eot)
            _note_reference(b.traj, task)
            while True:
                anchor = env.state_key()
                ids = tokenizer(env.expert_action(), add_special_tokens=False)["input_ids"] + [eot]
                step = b.add_action(ids, [0.0] * len(ids), anchor=anchor)
                res = env.step(step.action_text)
                if res.done:
                    b.finish(res.reward, last_observation=res.observation, done_info=res.info)
                    b.traj.verifier_reward = b.traj.reward
                    break
                b.add_observation(res.observation, reward=res.reward, info=res.info)
            out.append(b.traj)
        finally:
            env.close()
    return out


def success_rate(groups: list[TrajectoryGroup] | list[Trajectory]) -> float:
    trajs = [t for g in groups for t in (g if isinstance(g, TrajectoryGroup) else [g])]
    return sum(t.success for t in trajs) / max(1, len(trajs))


# Episode flags an environment records in `info`, logged as per-step rates by `train` and `evaluate`:
# code_fix's diff check and its attempted edits outside the allowed files (notebook 10).
EPISODE_FLAGS = ("hacked", "hack_attempt")


def flag_rates(trajs: list[Trajectory], keys: tuple[str, ...] = EPISODE_FLAGS) -> dict[str, float]:
    """The share of `trajs` whose `info[key]` is true, for each key that some trajectory records."""
    return {key: sum(bool(t.info.get(key)) for t in trajs) / len(trajs)
            for key in keys if trajs and any(key in t.info for t in trajs)}
