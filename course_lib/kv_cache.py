"""The fast `generate_turn`: the same tokens as `rollout.generate_turn`, without recomputing the context.

`rollout.generate_turn` is the readable version: one context at a time, and the model reads the whole
context again before every new token. This one gives the same tokens under greedy decoding
(`tests/test_kv_cache.py` pins it) and is what `rollout` uses. Four things make it fast:

1. **Batching.** All contexts decode together, left-padded to one width; a row leaves the batch the moment
   its turn ends, so the remaining rows do not pay for finished ones.
2. **A KV cache within the turn.** The context is run through the model once (the *prefill*); each new token
   then attends to the stored keys and values, so a step costs one token's forward pass.
3. **Work shared between rows is done once.** Identical contexts (a group's rollouts on their first turn)
   are run once and their keys and values copied to each row; the start every context has in common (the
   system prompt) is run once.
4. **The cache is carried across turns** (`PrefixCache`). The next turn's context is this turn's context +
   action + observation, so only the observation's tokens need a forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import DynamicCache

from course_lib.models import autocast_context, end_of_turn_id, sample_next
from course_lib.protocol import completes_stop_string


@dataclass
class PrefixCache:
    """The model's keys and values for the tokens `ids` (the start of one episode's context).

    `layers` holds one (K, V) pair per layer, each [kv_heads, len(ids), head_dim]. The next turn's
    context starts with these tokens, so only the tokens after them need a forward pass.
    """

    ids: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]


class PrefillCounter(Protocol):
    """Where `generate_turn` adds the number of context tokens it ran through the model (`RolloutStats`)."""

    prefill_tokens: int


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


def _prefill(model, contexts: list[list[int]], caches: list[PrefixCache | None] | None, input_ids: torch.Tensor,
             attention_mask: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, DynamicCache, int]:
    """Run the contexts through the model: (last logits per row [B, V], the batch's cache, tokens run).

    Identical contexts are run once (their keys and values are then copied to each of their rows), and
    what is cached is skipped: the rows' carried `caches`, else the start all contexts share.
    """
    device, width = input_ids.device, input_ids.shape[1]
    first: dict[tuple[int, ...], int] = {}
    source = [first.setdefault(tuple(c), i) for i, c in enumerate(contexts)]
    unique = sorted(first.values())
    position = {row: k for k, row in enumerate(unique)}
    rows, expand = torch.tensor(unique, device=device), torch.tensor([position[i] for i in source], device=device)
    cache, prefill = _batch_cache(contexts, caches, width) if caches is not None else None, 0
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
    for layer in out.cache.layers:
        layer.batch_select_indices(expand)
    prefill += int(attention_mask[rows, start:].sum())
    return out.logits[:, -1][expand], out.cache, prefill


@torch.no_grad()
def generate_turn(model, tokenizer, contexts: list[list[int]], *, max_new_tokens: int, temperature: float,
                  seed: int | None = None, caches: list[PrefixCache | None] | None = None,
                  stats: PrefillCounter | None = None) -> tuple[list[list[int]], list[list[float]], list[bool]]:
    """One batched turn: for each context, the sampled action ids, their log-probs and a truncated flag.

    Same contract as `rollout.generate_turn` (same sampling rule `models.sample_next`, same end of turn);
    greedy decoding gives the same tokens. With sampling (temperature > 0) the random draws are taken
    for the whole batch at once, so a seed gives other samples than the plain version's.

    caches: optional, one `PrefixCache` (or None) per context. The cached start of each context is not
    run again; the list is then updated in place with each row's cache for context + action.
    stats: optional (a `RolloutStats`); its `prefill_tokens` counts the context tokens actually run
    through the model.
    """
    eot = end_of_turn_id(tokenizer)
    device = model.device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    input_ids, attention_mask = _left_pad(contexts, tokenizer.pad_token_id, device)
    width = input_ids.shape[1]
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    with autocast_context(device, getattr(model, "course_autocast", None)):
        logits, cache, prefill = _prefill(model, contexts, caches, input_ids, attention_mask, positions)
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
            chosen, chosen_lp = sample_next(logits, temperature, generator)
            keep = []
            for b, (row, tid, lp) in enumerate(zip(alive, chosen.tolist(), chosen_lp.tolist())):
                ids[row].append(tid)
                lps[row].append(lp)
                stopped = tid == eot
                if not stopped:
                    piece = tokenizer.decode([tid], skip_special_tokens=False)
                    texts[row] += piece
                    stopped = completes_stop_string(texts[row], piece)
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
