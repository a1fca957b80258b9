"""How much of a decode step is transformers' own overhead: the model's step against a lean step on the same
weights, side by side in one run.

    python benchmarks/lean_decode.py                       # bf16 and fp32, batch 1, 16, 32, ~40 s on 2 cores
    python benchmarks/lean_decode.py --dtypes bfloat16 --batches 16 --steps 20

A decode step of SmolLM2-135M reads 269 MB of bf16 weights; at about 30 GB/s that bounds it at about 9 ms,
and the engine's step takes 0.17 of that bound (benchmarks/README.md, rollout_throughput). Run alone, the
step's matrix products take about a third of it. The rest is attention, cache writes, norms, rotary
embeddings, and the Python between them: transformers' modules, its cache object, its mask builder, a few
hundred small operators a step.

`lean_step` is the same computation written as one plain function over the same tensors, per layer:

    a = RMSNorm(h);  q, k, v = a [W_q; W_k; W_v]ᵀ              one product for the three projections
    q, k = rotary(q, k, position);  K[:, :, t], V[:, :, t] = k, v      the cache: a buffer written in place
    h = h + attention(q, K[:, :, :t+1], V[:, :, :t+1]) W_oᵀ           course_lib.decode_attention's kernel
    a = RMSNorm(h);  g, u = a [W_gate; W_up]ᵀ;  h = h + (silu(g) · u) W_downᵀ

then logits = RMSNorm(h) Eᵀ (the tied embedding). Its logits are checked against the model's at every timed
setting before it is timed (max |difference| printed: 0 in fp32 and bf16 on the development machine). The
rows are left-padded as the engine pads them, so both steps take the mask.

This is a measurement, not the engine: `course_lib.kv_cache` still decodes through the transformers model.
Timings depend on the machine and its load: run it on idle cores.
"""

from __future__ import annotations

import argparse
import statistics
import time

import rollout_throughput as rt  # benchmarks/, the script's own folder, is first on sys.path
import torch
import torch.nn.functional as F

from course_lib import kv_cache
from course_lib.decode_attention import grouped_decode_attention
from course_lib.models import load_policy


class LeanDecoder:
    """The model's weights regrouped for one-token steps: the q, k, v projections stacked into one matrix,
    gate and up into another; keys and values in one preallocated buffer per layer [B, kv_heads, T, d]."""

    def __init__(self, model):
        c = model.config
        self.heads, self.kv_heads, self.dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.eps = c.rms_norm_eps
        body = model.model
        self.embed = body.embed_tokens.weight
        self.final_norm = body.norm.weight
        self.lm_head = model.lm_head.weight
        self.layers = []
        for layer in body.layers:
            att, mlp = layer.self_attn, layer.mlp
            self.layers.append({
                "in_norm": layer.input_layernorm.weight, "post_norm": layer.post_attention_layernorm.weight,
                "qkv": torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]).contiguous(),
                "o": att.o_proj.weight, "gate_up": torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                "down": mlp.down_proj.weight})
        self.inv_freq = body.rotary_emb.inv_freq.float()
        self.rope_scale = getattr(body.rotary_emb, "attention_scaling", 1.0)
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def load_cache(self, cache, room: int) -> int:
        """Copy a prefill's keys and values into buffers with `room` free positions; returns the length."""
        self.keys, self.values = [], []
        for layer in cache.layers:
            b, h, n, d = layer.keys.shape
            k, v = layer.keys.new_empty((b, h, n + room, d)), layer.values.new_empty((b, h, n + room, d))
            k[:, :, :n], v[:, :, :n] = layer.keys, layer.values
            self.keys.append(k)
            self.values.append(v)
        return n

    def norm(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm as transformers' Llama computes it: normalised in fp32, cast back, then scaled."""
        return weight * F.rms_norm(h.float(), (h.shape[-1],), None, self.eps).to(h.dtype)

    def rotary(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor, t: int, mask: torch.Tensor) -> torch.Tensor:
        """One new token per row: tokens [B], positions [B] (rotary), t the cache column to write,
        mask [B, t+1] (bool, True = attend). Returns the logits [B, vocab]."""
        b = tokens.shape[0]
        h = F.embedding(tokens, self.embed)
        freqs = positions.float()[:, None] * self.inv_freq[None]
        emb = torch.cat([freqs, freqs], dim=-1)[:, None, :]  # [B, 1, d], broadcast over heads
        cos, sin = (emb.cos() * self.rope_scale).to(h.dtype), (emb.sin() * self.rope_scale).to(h.dtype)
        nq, nkv = self.heads * self.dim, self.kv_heads * self.dim
        attn_mask = mask[:, None, None, :]
        for w, keys, values in zip(self.layers, self.keys, self.values):
            a = self.norm(h, w["in_norm"])
            q, k, v = F.linear(a, w["qkv"]).split([nq, nkv, nkv], dim=-1)
            q = self.rotary(q.view(b, self.heads, self.dim), cos, sin)
            k = self.rotary(k.view(b, self.kv_heads, self.dim), cos, sin)
            keys[:, :, t] = k
            values[:, :, t] = v.view(b, self.kv_heads, self.dim)
            out = grouped_decode_attention(q[:, :, None], keys[:, :, :t + 1], values[:, :, :t + 1], attn_mask,
                                           self.dim ** -0.5)
            h = h + F.linear(out.reshape(b, nq), w["o"])
            a = self.norm(h, w["post_norm"])
            gate, up = F.linear(a, w["gate_up"]).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, w["down"])
        return F.linear(self.norm(h, self.final_norm), self.lm_head)


def _inputs(model, batch: int, context: int):
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, model.config.vocab_size - 100, (batch, context), generator=gen)
    mask = torch.ones_like(ids)
    for row in range(batch):  # left padding as the engine pads: 0, 8, 16 or 24 pad tokens
        mask[row, : 8 * (row % 4)] = 0
    return ids, mask


@torch.no_grad()
def compare(model, batch: int, context: int, steps: int) -> dict:
    """The model's step and the lean step from the same prefill, checked against each other, then each timed
    over `steps` steps (median), alternating in blocks so that drift hits both."""
    ids, mask = _inputs(model, batch, context)
    out = model(input_ids=ids, attention_mask=mask, cache=kv_cache.new_cache(), use_cache=True,
                logits_to_keep=1)
    token = out.logits[:, -1].argmax(-1)
    positions = mask.sum(1) - 1  # the last real token's position per row
    lean = LeanDecoder(model)
    # one step of each from the same cache: the check
    n = lean.load_cache(out.cache, room=steps * 4 + 8)
    hf_cache = out.cache
    hf_mask = torch.cat([mask, mask.new_ones((batch, 1))], dim=1)
    ref = model(input_ids=token[:, None], attention_mask=hf_mask, position_ids=(positions + 1)[:, None],
                cache=hf_cache, use_cache=True).logits[:, -1].float()
    got = lean.step(token, positions + 1, n, hf_mask.bool()).float()
    diff = (ref - got).abs().max().item()
    same_token = bool((ref.argmax(-1) == got.argmax(-1)).all())

    state = {"hf_mask": hf_mask, "pos": positions + 1, "t": n, "tok": token, "cache": hf_cache}

    def hf_step():
        state["hf_mask"] = torch.cat([state["hf_mask"], mask.new_ones((batch, 1))], dim=1)
        state["pos"] = state["pos"] + 1
        o = model(input_ids=state["tok"][:, None], attention_mask=state["hf_mask"],
                  position_ids=state["pos"][:, None], cache=state["cache"], use_cache=True)
        state["cache"] = o.cache

    lean_state = {"mask": hf_mask.bool(), "pos": positions + 1, "t": n}

    def lean_step():
        lean_state["t"] += 1
        lean_state["pos"] = lean_state["pos"] + 1
        lean_state["mask"] = torch.cat([lean_state["mask"], lean_state["mask"].new_ones((batch, 1))], dim=1)
        lean.step(token, lean_state["pos"], lean_state["t"], lean_state["mask"])

    times = {"transformers": [], "lean": []}
    for _ in range(2):
        hf_step()
        lean_step()
    for block in range(4):
        for name, fn in (("transformers", hf_step), ("lean", lean_step)) if block % 2 == 0 else \
                (("lean", lean_step), ("transformers", hf_step)):
            for _ in range(steps // 4):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {"batch": batch, "max_abs_logit_diff": diff, "same_greedy_token": same_token,
            **{f"{k}_ms": 1000 * statistics.median(v) for k, v in times.items()}}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 16, 32])
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--steps", type=int, default=16, help="timed steps per arm (median)")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    gbps = rt.stream_bandwidth(torch.device("cpu"))
    print(f"machine: {rt.cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"streaming read bandwidth: {gbps:.1f} GB/s; {args.context}-token cache, rows left-padded by 0-24")
    print(f"{'dtype':<10}{'batch':>6}{'transformers ms':>17}{'lean ms':>9}{'lean / tf':>10}{'bound ms':>10}"
          f"{'bound / lean':>13}{'max |dlogit|':>14}{'same token':>12}")
    rows = []
    for dtype in args.dtypes:
        model, _ = load_policy("smollm2-135m", device="cpu", dtype=getattr(torch, dtype))
        bound = 1000 * rt.weight_bytes(model) / (gbps * 1e9)
        for batch in args.batches:
            r = {"dtype": dtype, "bound_ms": bound, **compare(model, batch, args.context, args.steps)}
            rows.append(r)
            print(f"{dtype:<10}{batch:>6}{r['transformers_ms']:>17.1f}{r['lean_ms']:>9.1f}"
                  f"{r['lean_ms'] / r['transformers_ms']:>10.2f}{bound:>10.1f}{bound / r['lean_ms']:>13.2f}"
                  f"{r['max_abs_logit_diff']:>14.2e}{str(r['same_greedy_token']):>12}", flush=True)
        del model
    return rows


if __name__ == "__main__":
    main()
