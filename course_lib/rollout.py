"""Batched multi-turn rollouts.

Every live episode of every group advances together: one `generate` call per turn over all of them
(left padding, KV cache), the environments step in a thread pool, finished episodes drop out. The
sampled token ids and their sampling-time log-probs go straight into the trajectory (see
`trajectory.py`): nothing the model wrote is ever re-tokenised.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from course_lib.envs import Environment, make_env
from course_lib.models import autocast_context, end_of_turn_id
from course_lib.protocol import STOP_STRINGS
from course_lib.trajectory import Trajectory, TrajectoryBuilder, TrajectoryGroup

EnvFactory = Callable[[], Environment] | str


def _factory(env_factory: EnvFactory) -> Callable[[], Environment]:
    if isinstance(env_factory, str):
        name = env_factory
        return lambda: make_env(name)
    return env_factory


@dataclass
class RolloutStats:
    """What a rollout cost: for the throughput benchmark and the training metrics."""

    new_tokens: int = 0
    generate_seconds: float = 0.0
    env_seconds: float = 0.0
    generate_calls: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Episode:
    env: Environment
    builder: TrajectoryBuilder
    done: bool = False


def _cut_action(tokenizer, new_ids: list[int], eot: int) -> tuple[int, bool]:
    """How many of `new_ids` the model really produced for this turn, and whether it was cut short.

    A turn ends at the end-of-turn token (kept) or right after a stop string; `generate` pads the
    rest of a finished row. Re-scanning here makes the cut independent of the pad token (which is
    the end-of-turn token for SmolLM2).
    """
    text = ""
    for i, tid in enumerate(new_ids):
        if tid == eot:
            return i + 1, False
        text += tokenizer.decode([tid], skip_special_tokens=False)
        # A stop string can end inside a token; decoding token by token is exact for ASCII tags.
        if any(s in text for s in STOP_STRINGS):
            return i + 1, False
    return len(new_ids), True


def _left_pad(seqs: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
        mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


@torch.no_grad()
def generate_turn(model, tokenizer, contexts: list[list[int]], *, max_new_tokens: int, temperature: float,
                  seed: int | None = None) -> tuple[list[list[int]], list[list[float]], list[bool]]:
    """One batched `generate` call: for each context, the sampled action ids, their log-probs, truncated flag.

    Log-probs are log softmax(logits / temperature) of the raw logits (temperature 1 when greedy),
    the same quantity the loss recomputes, so the first importance ratio is 1 up to rounding.
    """
    eot = end_of_turn_id(tokenizer)
    input_ids, attention_mask = _left_pad(contexts, tokenizer.pad_token_id, model.device)
    if seed is not None:
        torch.manual_seed(seed)
    greedy = temperature <= 0
    with autocast_context(model.device, getattr(model, "course_autocast", None)):
        out = model.generate(
            input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=max_new_tokens,
            # Sampling from the full distribution (no top-k/top-p), so the stored log-probs are exact.
            **({"do_sample": False} if greedy else {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}),
            eos_token_id=eot, pad_token_id=tokenizer.pad_token_id, stop_strings=STOP_STRINGS,
            tokenizer=tokenizer, return_dict_in_generate=True, output_logits=True,
        )
    new = out.sequences[:, input_ids.shape[1]:].tolist()
    logits = torch.stack(out.logits, dim=1).float()  # [B, new, V]
    scale = 1.0 if greedy else temperature
    logp = torch.log_softmax(logits / scale, dim=-1)
    chosen = torch.gather(logp, 2, out.sequences[:, input_ids.shape[1]:].unsqueeze(-1)).squeeze(-1).tolist()
    ids, lps, cut = [], [], []
    for row, row_lp in zip(new, chosen):
        n, truncated = _cut_action(tokenizer, row, eot)
        ids.append(row[:n])
        lps.append(row_lp[:n])
        cut.append(truncated)
    return ids, lps, cut


def rollout(model, tokenizer, env_factory: EnvFactory, tasks: list[dict[str, Any]], group_size: int = 4,
            max_turns: int = 6, max_new_tokens: int = 96, temperature: float = 1.0, seed: int = 0, *,
            max_context: int = 2048, env_workers: int = 4, progress: bool = True,
            stats: RolloutStats | None = None) -> list[TrajectoryGroup]:
    """Run `group_size` episodes of each task, all batched together; returns one group per task.

    env_factory: an environment name or a callable that builds a fresh environment (one per episode:
    each rollout has its own state and sandbox). temperature <= 0 means greedy decoding.
    """
    make = _factory(env_factory)
    eot = end_of_turn_id(tokenizer)
    stats = stats if stats is not None else RolloutStats()
    episodes: list[_Episode] = []
    groups: list[TrajectoryGroup] = []
    pool = ThreadPoolExecutor(max_workers=env_workers)
    try:
        t0 = time.perf_counter()
        envs = [make() for _ in range(len(tasks) * group_size)]
        first_obs = list(pool.map(lambda et: et[0].reset(et[1]),
                                  [(envs[i * group_size + j], task) for i, task in enumerate(tasks) for j in range(group_size)]))
        stats.env_seconds += time.perf_counter() - t0
        for i, task in enumerate(tasks):
            group_id = f"{task['id']}@{seed}"
            members = []
            for j in range(group_size):
                env = envs[i * group_size + j]
                env.max_turns = max_turns
                messages = [{"role": "system", "content": env.system_prompt()},
                            {"role": "user", "content": first_obs[i * group_size + j]}]
                builder = TrajectoryBuilder(tokenizer, messages, task_id=str(task["id"]), group_id=group_id,
                                            traj_id=f"{group_id}#{j}", end_of_turn_id=eot)
                episodes.append(_Episode(env, builder))
                members.append(builder.traj)
            groups.append(TrajectoryGroup(str(task["id"]), group_id, members))

        bar = tqdm(total=len(episodes), desc="rollout episodes", disable=not progress, leave=False)
        for turn in range(max_turns):
            live = [e for e in episodes if not e.done]
            if not live:
                break
            anchors = [e.env.state_key() for e in live]
            t0 = time.perf_counter()
            ids, lps, cut = generate_turn(model, tokenizer, [e.builder.token_ids for e in live],
                                          max_new_tokens=max_new_tokens, temperature=temperature,
                                          seed=seed * 1000 + turn)
            stats.generate_seconds += time.perf_counter() - t0
            stats.generate_calls += 1
            stats.new_tokens += sum(len(x) for x in ids)
            steps = [e.builder.add_action(a, lp, anchor=anc, truncated=c)
                     for e, a, lp, anc, c in zip(live, ids, lps, anchors, cut)]
            t0 = time.perf_counter()
            results = list(pool.map(lambda es: es[0].env.step(es[1].action_text), zip(live, steps)))
            stats.env_seconds += time.perf_counter() - t0
            for e, res in zip(live, results):
                too_long = len(e.builder.token_ids) + max_new_tokens > max_context
                if res.done:
                    e.builder.finish(res.reward, last_observation=res.observation, done_info=res.info)
                elif too_long or turn == max_turns - 1:
                    reward = float(e.env.score())
                    info = dict(res.info, context_limit=too_long, turn_limit=not too_long)
                    e.builder.finish(reward, last_observation=res.observation, done_info=info)
                else:
                    e.builder.add_observation(res.observation, info=res.info)
                    continue
                e.done = True
                bar.update(1)
        bar.close()
    finally:
        for e in episodes:
            e.env.close()
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
            obs = env.reset(task)
            messages = [{"role": "system", "content": env.system_prompt()}, {"role": "user", "content": obs}]
            b = TrajectoryBuilder(tokenizer, messages, task_id=str(task["id"]), group_id=f"{task['id']}@expert",
                                  traj_id=f"{task['id']}@expert#0", end_of_turn_id=eot)
            while True:
                anchor = env.state_key()
                ids = tokenizer(env.expert_action(), add_special_tokens=False)["input_ids"] + [eot]
                step = b.add_action(ids, [0.0] * len(ids), anchor=anchor)
                res = env.step(step.action_text)
                if res.done:
                    b.finish(res.reward, last_observation=res.observation, done_info=res.info)
                    break
                b.add_observation(res.observation, info=res.info)
            out.append(b.traj)
        finally:
            env.close()
    return out


def success_rate(groups: list[TrajectoryGroup] | list[Trajectory]) -> float:
    trajs = [t for g in groups for t in (g if isinstance(g, TrajectoryGroup) else [g])]
    return sum(t.success for t in trajs) / max(1, len(trajs))
