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

A decode step reads every weight once, so its time at small batches is set by weight bytes / memory
bandwidth (`benchmarks/rollout_throughput.py` measures both). Two switches act on that: `sampling_copy` gives
training a bf16 copy of the policy to sample from (half the bytes), the trained weights staying fp32 (`synced`
refreshes the copy before each rollout); `PREALLOCATE` writes each step's keys and values into room kept in
the cache (`RoomyLayer`) instead of concatenating, which copies the whole cache every step.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from course_lib import lora
from course_lib.models import autocast_context, bf16_is_fast, end_of_turn_id, sample_next
from course_lib.protocol import completes_stop_string


@dataclass
class PrefixCache:
    """The model's keys and values for the tokens `ids` (the start of one episode's context).

    `layers` holds one (K, V) pair per layer, each [kv_heads, len(ids), head_dim]. The next turn's
    context starts with these tokens, so only the tokens after them need a forward pass.
    """

    ids: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]


SAMPLE_DTYPES = ("float32", "bfloat16")


def check_sample_dtype(sample_dtype: str) -> None:
    """ValueError unless `sample_dtype` is one of `SAMPLE_DTYPES`."""
    if sample_dtype not in SAMPLE_DTYPES:
        raise ValueError(f"sample_dtype must be one of {', '.join(map(repr, SAMPLE_DTYPES))}, "
                         f"got {sample_dtype!r}")


def sampling_copy(model, sample_dtype: str = "float32"):
    """The model that training's rollouts sample from: `model` itself for "float32"; for "bfloat16" a copy
    whose weights are bf16 (2 bytes a weight instead of 4: half the bytes each decode step reads), while
    `model` keeps the fp32 master weights that the optimizer updates. The copy costs 2 bytes per weight
    (269 MB for the embedded model); `synced` makes it equal to the master weights, rounded to bf16, again
    before each rollout. A model with LoRA adapters gets a merged copy (`lora.merged_copy`) in either
    dtype.

    On a device without bf16 matrix units (`models.bf16_is_fast`: a CPU with AVX2 only, say) a bf16 decode
    step is slower, not faster, so "bfloat16" samples from fp32 weights there, with a warning."""
    check_sample_dtype(sample_dtype)
    device = next(model.parameters()).device
    if sample_dtype == "bfloat16" and not bf16_is_fast(device):
        warnings.warn(f"this {device.type} has no bf16 matrix units (AVX512-BF16 or AMX on x86): rollouts "
                      "sample from the fp32 weights instead of a bf16 copy (COURSE_BF16=1 forces the copy)",
                      stacklevel=2)
        sample_dtype = "float32"
    if lora.is_adapted(model):  # a merged copy in either dtype: decode steps do not pay for the adapters
        return lora.merged_copy(model, getattr(torch, sample_dtype))
    if sample_dtype == "float32":
        return model
    sampler = copy.deepcopy(model)
    for p in sampler.parameters():  # parameters, not buffers: the rotary frequencies stay fp32
        p.requires_grad_(False)
        p.data = p.data.to(getattr(torch, sample_dtype))
    sampler.course_autocast = None  # bf16 weights run in bf16: no autocast casts
    return sampler.eval()


@torch.no_grad()
def refresh_sampler(sampler, model) -> None:
    """Copy `model`'s (master) weights into the sampling copy, each rounded to the copy's dtype (nothing to do
    when there is no copy: `sampler` None or the model itself)."""
    if sampler is None or sampler is model:
        return
    if lora.is_adapted(model):
        lora.refresh_merged(sampler, model)
        return
    for s, m in zip(sampler.parameters(), model.parameters(), strict=True):
        s.copy_(m)


def synced(sampler, model):
    """The model to sample from now: `model` when there is no sampling copy, else the copy, refreshed first
    (`refresh_sampler`), so a rollout always samples from the current weights."""
    refresh_sampler(sampler, model)
    return model if sampler is None else sampler


@torch.no_grad()
def sampler_gap(batch: dict, logprobs: torch.Tensor) -> float:
    """Σ |ℓ_sampled − ℓ| over the trained tokens of a micro-batch: the log-probs the sampler drew the tokens
    with (`batch["old_logprobs"]`) against the trainer's (`logprobs`); divided by the token count it is the
    mean gap between the policy that sampled and the policy being trained."""
    mask = batch["loss_mask"].to(logprobs.device)
    return float(((batch["old_logprobs"].to(logprobs.device) - logprobs.detach()).abs() * mask).sum())


# False: transformers' DynamicCache, which grows each layer's keys and values by torch.cat (a copy of the
# whole cache every decode step). True: `RoomyLayer`, which writes each step into room kept at the end of its
# buffers. Measured side by side (benchmarks/README.md, 2026-12-04, 2 cores): with rows left-padded as the
# engine pads them, a decode step at batch 16-32 took 0.81-0.96x the time of concatenation, and 0.72-0.91x at
# 1,000 cached tokens in fp32; so it is on by default.
PREALLOCATE = True


class RoomyLayer(DynamicLayer):
    """A cache layer whose keys and values [B, kv_heads, length, head_dim] are views into larger buffers
    [B, kv_heads, length + room, head_dim]: `update` writes the new tokens into the room, so a decode step
    copies one token's keys and values instead of the whole cache. The buffers are reallocated, with `room`
    free positions, only when the room is used up or the layer's tensors were replaced (rows left the batch:
    `batch_select_indices` keeps the selected rows in a new, compact tensor)."""

    room = 64

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, new = self.get_seq_length(), key_states.shape[-2]
        buffer = getattr(self, "_key_buffer", None)
        if (buffer is None or n == 0 or self.keys.data_ptr() != buffer.data_ptr()
                or n + new > buffer.shape[-2]):
            shape = (*key_states.shape[:2], n + new + self.room, key_states.shape[-1])
            self._key_buffer, self._value_buffer = key_states.new_empty(shape), value_states.new_empty(shape)
            if n:
                self._key_buffer[:, :, :n], self._value_buffer[:, :, :n] = self.keys, self.values
        self._key_buffer[:, :, n:n + new], self._value_buffer[:, :, n:n + new] = key_states, value_states
        self.keys, self.values = self._key_buffer[:, :, :n + new], self._value_buffer[:, :, :n + new]
        return self.keys, self.values


def new_cache(layers: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> Cache:
    """The engine's cache: empty, or holding one (K, V) pair per layer; `RoomyLayer`s when `PREALLOCATE`."""
    if not PREALLOCATE:
        return DynamicCache(ddp_cache_data=layers)
    if layers is None:
        return Cache(layer_class_to_replicate=RoomyLayer)
    cache = Cache(layers=[RoomyLayer() for _ in layers])
    for layer, (k, v) in zip(cache.layers, layers):
        layer.update(k, v)
    return cache


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


def _batch_cache(contexts: list[list[int]], caches: list[PrefixCache | None], width: int) -> Cache | None:
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
    return new_cache(layers)


def _row_cache(cache: Cache, b: int, pad: int, ids: list[int]) -> PrefixCache:
    """Batch row b's own keys and values (left padding dropped): they belong to the tokens `ids`."""
    return PrefixCache(ids=ids, layers=[(layer.keys[b, :, pad:].clone(), layer.values[b, :, pad:].clone())
                                        for layer in cache.layers])


def _prefix_cache(model, ids: list[int]) -> PrefixCache:
    """Run `ids` through the model once (batch of one) and keep their keys and values."""
    device = model.device
    out = model(input_ids=torch.tensor([ids], device=device), cache=new_cache(),
                use_cache=True, logits_to_keep=1)
    return _row_cache(out.cache, 0, 0, list(ids))


def _prefill(model, contexts: list[list[int]],
             caches: list[PrefixCache | None] | None, input_ids: torch.Tensor,
             attention_mask: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, Cache, int]:
    """Run the contexts through the model: (last logits per row [B, V], the batch's cache, tokens run).

    Identical contexts are run once (their keys and values are then copied to each of their rows), and
    what is cached is skipped: the rows' carried `caches`, else the start all contexts share.
    """
    device, width = input_ids.device, input_ids.shape[1]
    first: dict[tuple[int, ...], int] = {}
    source = [first.setdefault(tuple(c), i) for i, c in enumerate(contexts)]
    unique = sorted(first.values())
    position = {row: k for k, row in enumerate(unique)}
    rows, expand = torch.tensor(unique,
                                device=device), torch.tensor([position[i] for i in source], device=device)
    cache, prefill = _batch_cache(contexts, caches, width) if caches is not None else None, 0
    if cache is None and len(unique) > 1:  # nothing cached: run the start all contexts share once
        shared = min(min(_shared_prefix(contexts[0], c) for c in contexts[1:]), min(map(len, contexts)) - 1)
        if shared > 0:
            cache = _batch_cache(contexts,
                                 [_prefix_cache(model, contexts[0][:shared])] * len(contexts), width)
            prefill += shared
    start = cache.get_seq_length() if cache is not None else 0
    if cache is not None:
        for layer in cache.layers:
            layer.batch_select_indices(rows)
    out = model(input_ids=input_ids[rows, start:], attention_mask=attention_mask[rows],
                position_ids=positions[rows, start:], cache=cache if cache is not None else new_cache(),
                use_cache=True, logits_to_keep=1)
    for layer in out.cache.layers:
        layer.batch_select_indices(expand)
    prefill += int(attention_mask[rows, start:].sum())
    return out.logits[:, -1][expand], out.cache, prefill


@torch.no_grad()
def generate_turn(model, tokenizer, contexts: list[list[int]], *, max_new_tokens: int, temperature: float,
                  seed: int | None = None, caches: list[PrefixCache | None] | None = None,
                  stats: PrefillCounter | None = None) -> tuple[list[list[int]],
                                                                list[list[float]], list[bool]]:
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
                elif caches is not None:
                    # the cache holds the context and every action token but this last one
                    new_caches[row] = _row_cache(cache, b, width - len(contexts[row]),
                                                 contexts[row] + ids[row][:-1])
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
            out = model(input_ids=chosen[:, None], attention_mask=mask, position_ids=pos,
                        cache=cache, use_cache=True)
            cache = out.cache
            logits = out.logits[:, -1]
    if caches is not None:
        caches[:] = new_caches
    return ids, lps, truncated
