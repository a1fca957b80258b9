"""Batched multi-turn rollouts.

Every live episode of every group advances together: one decoding loop per turn over all of them
(left padding, KV cache; a row leaves the batch when its turn ends), the environments step in a thread
pool, finished episodes drop out. The
sampled token ids and their sampling-time log-probs go straight into the trajectory (see
`trajectory.py`): nothing the model wrote is ever re-tokenised.

Each episode keeps the keys and values of its context from one turn to the next (`PrefixCache`), so a
turn only runs the model over the tokens that are new since the last one (the observation), not over
the whole conversation again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache

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
    prefill_tokens: int = 0  # context tokens run through the model (cached and shared ones are not)
    generate_seconds: float = 0.0
    env_seconds: float = 0.0
    generate_calls: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PrefixCache:
    """The model's keys and values for the tokens `ids` (the start of one episode's context).

    `layers` holds one (K, V) pair per layer, each [kv_heads, len(ids), head_dim]. The next turn's
    context starts with these tokens, so only the tokens after them need a forward pass.
    """

    ids: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class _Episode:
    env: Environment
    builder: TrajectoryBuilder
    done: bool = False
    cache: PrefixCache | None = None


def _left_pad(seqs: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
        mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


def _shared_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return next(i for i in range(n) if a[i] != b[i])


def _batch_cache(contexts: list[list[int]], caches: list[PrefixCache | None], width: int) -> DynamicCache | None:
    """A left-padded cache for the whole batch, or None when there is nothing to reuse.

    Row i is left-padded by p_i = width - len(context_i) and has its first u_i tokens cached. The batch
    can reuse positions [0, C) with C = min_i (p_i + u_i): there every row holds either padding (zeros,
    masked out by the attention mask) or cached tokens. Rows with more cached than that recompute a few.
    """
    pads = [width - len(c) for c in contexts]
    usable = [0 if pc is None else _shared_prefix(pc.ids, ctx) for pc, ctx in zip(caches, contexts)]
    start = min(min(p + u for p, u in zip(pads, usable)), width - 1)  # the model must see >= 1 token
    if start <= 0:
        return None
    template = next(pc for pc in caches if pc is not None)
    layers = []
    for layer, (k0, v0) in enumerate(template.layers):
        keys = k0.new_zeros((len(contexts), k0.shape[0], start, k0.shape[2]))
        values = v0.new_zeros((len(contexts), v0.shape[0], start, v0.shape[2]))
        for i, (pc, pad) in enumerate(zip(caches, pads)):
            if start > pad:
                k, v = pc.layers[layer]
                keys[i, :, pad:] = k[:, : start - pad]
                values[i, :, pad:] = v[:, : start - pad]
        layers.append((keys, values))
    return DynamicCache(ddp_cache_data=layers)


def _row_cache(cache: DynamicCache, b: int, pad: int, ids: list[int]) -> PrefixCache:
    """Batch row b's own keys and values (left padding dropped): they belong to the tokens `ids`."""
    return PrefixCache(ids=ids, layers=[(layer.keys[b, :, pad:].clone(), layer.values[b, :, pad:].clone())
                                        for layer in cache.layers])


def _prefix_cache(model, ids: list[int]) -> PrefixCache:
    """Run `ids` through the model once (batch of one) and keep their keys and values."""
    device = model.device
    out = model(input_ids=torch.tensor([ids], device=device), cache=DynamicCache(), use_cache=True, logits_to_keep=1)
    return _row_cache(out.cache, 0, 0, list(ids))


def _stopped(tokenizer, text: str, token_id: int, eot: int) -> tuple[str, bool]:
    """Append a sampled token to a row's text; True when the turn is over (end-of-turn token, or a
    stop string such as </tool_call> just completed). Token-by-token decoding is exact for ASCII tags."""
    if token_id == eot:
        return text, True
    piece = tokenizer.decode([token_id], skip_special_tokens=False)
    text += piece
    # Only a stop string that ends inside the new piece can have just completed: look at the tail.
    return text, any(stop in text[-(len(stop) + len(piece)):] for stop in STOP_STRINGS)


@torch.no_grad()
def generate_turn(model, tokenizer, contexts: list[list[int]], *, max_new_tokens: int, temperature: float,
                  seed: int | None = None, caches: list[PrefixCache | None] | None = None,
                  stats: RolloutStats | None = None) -> tuple[list[list[int]], list[list[float]], list[bool]]:
    """One batched turn: for each context, the sampled action ids, their log-probs and a truncated flag.

    The decoding loop is ours (not `model.generate`) so that a row leaves the batch the moment its turn
    ends (end-of-turn token or a closing tag): the remaining rows do not pay for finished ones.
    Work shared between rows is done once: the start that every context has in common (the system
    prompt, on a first turn) and identical contexts (a group's rollouts on their first turn).

    Sampling is from the full distribution softmax(logits / temperature) (no top-k/top-p), so the
    stored log-probs log softmax(logits / temperature) are exact, and the loss recomputes the same
    quantity: the first importance ratio is 1 up to rounding when both run in the same precision (max
    |difference| about 1e-5 in fp32). On a CPU the rollout runs in fp32 and the update under bf16 autocast
    by default; then, with ppo_epochs > 1 (the only case that reads the stored log-probs), a few tokens
    start away from ratio 1 (measured on the course's 2-core Xeon, 2026-11-30, warm-started search_qa model,
    temperature 0.7: max |difference| 0.28 nats on 238 tokens, 0.4% of ratios outside [0.8, 1.2]). temperature <= 0 is greedy (log-probs at temperature 1).

    caches: optional, one `PrefixCache` (or None) per context. The cached start of each context is not
    run again; the list is then updated in place with each row's cache for context + action.
    stats: optional; its `prefill_tokens` counts the context tokens actually run through the model.
    """
    eot = end_of_turn_id(tokenizer)
    greedy, device = temperature <= 0, model.device
    scale = 1.0 if greedy else temperature
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    input_ids, attention_mask = _left_pad(contexts, tokenizer.pad_token_id, device)
    width = input_ids.shape[1]
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    # Identical contexts (a group's first turn) are run once; their keys/values are then copied to each row.
    first: dict[tuple[int, ...], int] = {}
    source = [first.setdefault(tuple(c), i) for i, c in enumerate(contexts)]
    unique = sorted(first.values())
    position = {row: k for k, row in enumerate(unique)}
    rows, expand = torch.tensor(unique, device=device), torch.tensor([position[i] for i in source], device=device)
    cache, prefill = _batch_cache(contexts, caches, width) if caches is not None else None, 0
    with autocast_context(device, getattr(model, "course_autocast", None)):
        if cache is None and len(unique) > 1:  # nothing cached: run the start all contexts share once
            shared = min(min(_shared_prefix(contexts[0], c) for c in contexts[1:]), min(map(len, contexts)) - 1)
            if shared > 0:
                cache = _batch_cache(contexts, [_prefix_cache(model, contexts[0][:shared])] * len(contexts), width)
                prefill += shared
        start = cache.get_seq_length() if cache is not None else 0
        if cache is not None:
            for layer in cache.layers:
                layer.batch_select_indices(rows)
        out = model(input_ids=input_ids[rows, start:], attention_mask=attention_mask[rows],
                    position_ids=positions[rows, start:], cache=cache if cache is not None else DynamicCache(),
                    use_cache=True, logits_to_keep=1)
        cache = out.cache
        for layer in cache.layers:
            layer.batch_select_indices(expand)
        logits = out.logits[:, -1][expand]
        prefill += int(attention_mask[rows, start:].sum())
        if stats is not None:
            stats.prefill_tokens += prefill

        alive = list(range(len(contexts)))  # batch row -> context index
        ids = [[] for _ in contexts]
        lps = [[] for _ in contexts]
        texts = [""] * len(contexts)
        truncated = [False] * len(contexts)
        new_caches: list[PrefixCache | None] = [None] * len(contexts)
        mask, pos = attention_mask, positions[:, -1:]
        for step in range(max_new_tokens):
            logp = torch.log_softmax(logits.float() / scale, dim=-1)
            if greedy:
                chosen = logp.argmax(-1)
            else:
                chosen = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
            chosen_lp = logp.gather(1, chosen[:, None]).squeeze(1).tolist()
            keep = []
            for b, (row, tid) in enumerate(zip(alive, chosen.tolist())):
                ids[row].append(tid)
                lps[row].append(chosen_lp[b])
                texts[row], stopped = _stopped(tokenizer, texts[row], tid, eot)
                if not stopped and step == max_new_tokens - 1:
                    stopped = truncated[row] = True
                if not stopped:
                    keep.append(b)
                elif caches is not None:  # the cache holds the context and every action token but this last one
                    new_caches[row] = _row_cache(cache, b, width - len(contexts[row]), contexts[row] + ids[row][:-1])
            if not keep:
                break
            if len(keep) < len(alive):
                index = torch.tensor(keep, device=device)
                for layer in cache.layers:
                    layer.batch_select_indices(index)
                mask, pos, chosen = mask[index], pos[index], chosen[index]
                alive = [alive[b] for b in keep]
            mask = torch.cat([mask, mask.new_ones((len(alive), 1))], dim=1)
            pos = pos + 1
            out = model(input_ids=chosen[:, None], attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
            cache = out.cache
            logits = out.logits[:, -1]
    if caches is not None:
        caches[:] = new_caches
    return ids, lps, truncated


def rollout(model, tokenizer, env_factory: EnvFactory, tasks: list[dict[str, Any]], group_size: int = 4,
            max_turns: int = 6, max_new_tokens: int = 96, temperature: float = 1.0, seed: int = 0, *,
            max_context: int = 2048, env_workers: int = 4, progress: bool = True,
            stats: RolloutStats | None = None, reuse_cache: bool = True) -> list[TrajectoryGroup]:
    """Run `group_size` episodes of each task, all batched together; returns one group per task.

    env_factory: an environment name or a callable that builds a fresh environment (one per episode:
    each rollout has its own state and sandbox). temperature <= 0 means greedy decoding.
    max_context: no turn is generated from a context longer than max_context - max_new_tokens; an episode
    whose next observation would pass that ends there (info["context_limit"]), scored by the verifier.
    reuse_cache: keep each episode's keys and values between turns (False: every turn runs the model
    over the whole context again; the same tokens up to floating-point rounding, only slower).
    """
    make = _factory(env_factory)
    eot = end_of_turn_id(tokenizer)
    stats = stats if stats is not None else RolloutStats()
    envs: list[Environment] = []
    episodes: list[_Episode] = []
    groups: list[TrajectoryGroup] = []
    pool = ThreadPoolExecutor(max_workers=env_workers)
    bar = tqdm(total=len(tasks) * group_size, desc="rollout episodes", disable=not progress, leave=False)

    def end(e: _Episode, reward: float, last_observation: str, info: dict[str, Any], step_reward: float = 0.0) -> None:
        e.builder.finish(reward, last_observation=last_observation, done_info=info)
        e.builder.traj.steps[-1].reward += step_reward  # an episode cut at a limit keeps its last step's own reward
        e.done, e.cache = True, None
        bar.update(1)

    def fits(e: _Episode, extra: int) -> bool:
        """Whether a turn can be generated from the context plus `extra` tokens without passing max_context."""
        return len(e.builder.token_ids) + extra + max_new_tokens <= max_context

    try:
        t0 = time.perf_counter()
        for _ in range(len(tasks) * group_size):  # one by one: `finally` closes those made before a failure
            envs.append(make())
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
                if not fits(episodes[-1], 0):
                    raise ValueError(
                        f"the first prompt of task {task['id']!r} is {len(builder.token_ids)} tokens: with "
                        f"max_new_tokens={max_new_tokens} no turn fits in max_context={max_context}; raise max_context"
                    )
            groups.append(TrajectoryGroup(str(task["id"]), group_id, members))

        for turn in range(max_turns):
            live = [e for e in episodes if not e.done]
            if not live:
                break
            anchors = [e.env.state_key() for e in live]
            t0 = time.perf_counter()
            caches = [e.cache for e in live] if reuse_cache else None
            ids, lps, cut = generate_turn(model, tokenizer, [e.builder.token_ids for e in live],
                                          max_new_tokens=max_new_tokens, temperature=temperature,
                                          seed=seed * 1000 + turn, caches=caches, stats=stats)
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
        bar.close()
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
                b.add_observation(res.observation, reward=res.reward, info=res.info)
            out.append(b.traj)
        finally:
            env.close()
    return out


def success_rate(groups: list[TrajectoryGroup] | list[Trajectory]) -> float:
    trajs = [t for g in groups for t in (g if isinstance(g, TrajectoryGroup) else [g])]
    return sum(t.success for t in trajs) / max(1, len(trajs))
