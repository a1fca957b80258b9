"""Rollout throughput: one decode step against the bandwidth bound, and the batched engine against one episode
at a time.

    python benchmarks/rollout_throughput.py                       # both parts, float32 and bfloat16 weights
    python benchmarks/rollout_throughput.py --parts decode        # only the decode steps and the bound (~1
    min) python benchmarks/rollout_throughput.py --parts rollouts      # only the end-to-end rollouts (~2-3
    min) ... [--dtypes float32 bf16-autocast bfloat16] [--batches 1 4 16] [--context 200] [--profile]
        [--attentions sdpa course_decode] [--caches concat preallocated]
        [--engines sdpa/concat course_decode/preallocated]   # part 2: engines side by side, attention/cache
        [--episodes 16] [--env lookup] [--max-new-tokens 64] [--compare-recompute] [--json F] [--md F]

Part 1, decode steps. The streaming memory bandwidth is measured here (the best of a few sums over a
tensor far larger than the caches, GB/s = bytes read / seconds). Decoding one token reads every weight
once, so a step cannot take less than

    bound = weight bytes / bandwidth            (fp32: 4 bytes per weight, bf16: 2)

and at batch b it also reads the KV cache, 2 · layers · b · kv_heads · context · head_dim · bytes. Each step
is timed like the engine runs it: a cache of `--context` tokens per row (from a prefill), one new token per
row, the cache grown by concatenation; the median of `--steps` steps. `--profile` adds torch.profiler's
top operators for each step size.

Part 2, rollouts. The same episodes (one per task: greedy rollouts of one task would be copies, which
would flatter the batched engine) through the batched engine and one episode at a time; new tokens/s side
by side. The batched engine keeps a turn's batch until its slowest row ends (a barrier between turns).
From the same trajectories and the measured step times the script also estimates the decode time without
that barrier (each episode decoding its next turn as soon as its observation is back): see
`barrier_estimate`.

Nothing is written unless --json or --md is given. Timings depend on the machine and its load: run it on
idle cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from datetime import UTC, datetime

import torch

from course_lib import kv_cache
from course_lib.decode_attention import ATTENTION
from course_lib.envs import load_tasks
from course_lib.models import load_policy
from course_lib.rollout import RolloutStats, rollout
from course_lib.trajectory import TrajectoryGroup


def cpu_name() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def stream_bandwidth(device: torch.device, megabytes: int = 512, repeats: int = 5) -> float:
    """Streaming read bandwidth in GB/s: bytes / seconds of `x.sum()` over `megabytes` of fp32,
    best of `repeats`."""
    x = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32, device=device)
    x.sum()  # touch every page once
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        x.sum()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return x.numel() * 4 / best / 1e9


def weight_bytes(model) -> int:
    """Bytes of the model's weights (a tied embedding / output layer counted once, as it is
    read once a step)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def kv_bytes(model, batch: int, context: int) -> int:
    """Bytes of the KV cache one decode step reads: 2 · layers · batch · kv_heads · context ·
    head_dim · bytes."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    size = next(model.parameters()).element_size()
    return 2 * c.num_hidden_layers * batch * c.num_key_value_heads * context * head_dim * size


@torch.no_grad()
def decode_step_ms(model, batch: int, context: int, steps: int, profile: bool = False,
                   padded: bool = False) -> tuple[float, str, float]:
    """Median milliseconds of one decode step at `batch` rows over a `context`-token cache, as the engine runs
    it (and torch.profiler's top operators when `profile`). `padded`: rows of different lengths, left-padded
    (an attention mask with zeros: transformers' SDPA then takes another kernel than for equal lengths).
    Also returns the first step's milliseconds (with torch.compile, the step that compiles)."""
    device = model.device
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, model.config.vocab_size - 100, (batch, context), generator=gen).to(device)
    mask = torch.ones_like(ids)
    if padded:  # rows of different lengths, left-padded as the engine pads them: 0, 8, 16 or 24 pad tokens
        for row in range(batch):
            mask[row, : 8 * (row % 4)] = 0
    out = model(input_ids=ids, attention_mask=mask, cache=kv_cache.new_cache(),
                use_cache=True, logits_to_keep=1)
    cache, token, pos = out.cache, out.logits[:, -1].argmax(-1,
                                                            keepdim=True), torch.full((batch, 1), context - 1)
    pos = pos.to(device)

    def step() -> None:
        nonlocal mask, pos, token, cache
        mask = torch.cat([mask, mask.new_ones((batch, 1))], dim=1)
        pos = pos + 1
        out = model(input_ids=token, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
        cache, token = out.cache, out.logits[:, -1].argmax(-1, keepdim=True)
        _sync(device)

    t0 = time.perf_counter()
    step()  # with --compile, the first step compiles (dynamo traces, inductor writes the kernels)
    first_ms = 1000 * (time.perf_counter() - t0)
    for _ in range(2):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    table = ""
    if profile:
        with torch.profiler.profile() as prof:
            for _ in range(5):
                step()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10)
    return 1000 * statistics.median(times), table, first_ms


def decode_part(args, device: torch.device) -> dict:
    """Part 1: the bandwidth, then for each dtype and batch the step time next to its bound."""
    gbps = stream_bandwidth(device)
    print(f"\nstreaming read bandwidth: {gbps:.1f} GB/s (sum over 512 MB of fp32, best of 5)")
    print(f"decode step with a {args.context}-token "
          f"cache{', rows left-padded by 0-24 tokens' if args.padded else ''} "
          f"(median of {args.steps} steps):")
    print(f"{'dtype':<15}{'attention':<15}{'cache':<14}{'batch':>6}{'ms / step':>11}{'tokens/s':>10}"
          f"{'weights MB':>12}{'bound ms':>10}{'bound / step':>14}{'+KV bound ms':>14}")
    rows = []
    for dtype in args.dtypes:
        model, _ = load_policy(args.model, device=str(device), dtype=_load_dtype(dtype, device))
        wb = weight_bytes(model)
        # With --compile every setting is timed eager, then compiled, side by side in this one run.
        for attention, cache, batch, compiled in [(a, c, b, k) for a in args.attentions for c in args.caches
                                                  for b in args.batches
                                                  for k in ((False, True) if args.compile else (False,))]:
            kv_cache.PREALLOCATE = cache == "preallocated"
            model.set_attn_implementation(attention)
            if compiled:
                torch._dynamo.reset()  # a fresh compile for each setting: its first step's time is its own
                # transformers' attention reads its layer_idx, an int attribute that dynamo treats as a
                # constant: one recompile per layer, and past dynamo's limit of 8 the rest run eager
                # (benchmarks/README.md: with that int made dynamic the first step had not compiled in 14 min)
            step_model = torch.compile(model, dynamic=True) if compiled else model
            ms, table, first_ms = decode_step_ms(step_model, batch, args.context, args.steps, args.profile,
                                                 args.padded)
            bound = 1000 * wb / (gbps * 1e9)
            bound_kv = 1000 * (wb + kv_bytes(model, batch, args.context)) / (gbps * 1e9)
            rows.append({"dtype": dtype, "attention": attention, "cache": cache,
                         "batch": batch, "ms_per_step": ms,
                         "tokens_per_s": 1000 * batch / ms, "weight_mb": wb / 1e6, "bound_ms": bound,
                         "bound_with_kv_ms": bound_kv, "compiled": compiled,
                         "first_step_s": first_ms / 1000})
            label = f"{attention}+compile" if compiled else attention
            print(f"{dtype:<15}{label:<15}{cache:<14}{batch:>6}{ms:>11.1f}{1000 * batch / ms:>10.1f}"
                  f"{wb / 1e6:>12.0f}{bound:>10.1f}{bound / ms:>14.2f}{bound_kv:>14.1f}", flush=True)
            if compiled:
                print(f"  (torch.compile: the first step, which compiles, took {first_ms / 1000:.1f} s)")
            if table:
                print(f"top operators, {dtype}, {attention} attention, {cache} cache, batch "
                      f"{batch} (5 steps):\n{table}")
        del model
    return {"bandwidth_gb_s": gbps, "context": args.context, "padded": args.padded, "steps": rows}


def _load_dtype(dtype: str, device: torch.device) -> str | None:
    return None if dtype == "float32" and device.type == "cpu" else dtype


def run(model, tok, env: str, tasks: list[dict], common: dict, batched: bool,
        reuse_cache: bool) -> tuple[RolloutStats, list[TrajectoryGroup]]:
    """All episodes in one batched rollout, or one rollout per episode; returns what generation cost."""
    stats = RolloutStats()
    if batched:
        return stats, rollout(model, tok, env, tasks, stats=stats, reuse_cache=reuse_cache, **common)
    groups = []
    for task in tasks:
        for _ in range(common["group_size"]):
            groups += rollout(model, tok, env, [task], stats=stats, reuse_cache=reuse_cache,
                              **{**common, "group_size": 1})
    return stats, groups


def _interpolate(step_ms: dict[int, float], b: int) -> float:
    """Step time at batch b, linear between the measured batch sizes (flat beyond them)."""
    sizes = sorted(step_ms)
    if b <= sizes[0] or b >= sizes[-1]:
        return step_ms[sizes[0] if b <= sizes[0] else sizes[-1]]
    lo = max(s for s in sizes if s <= b)
    hi = min(s for s in sizes if s >= b)
    return step_ms[lo] if lo == hi else step_ms[lo] + (step_ms[hi] - step_ms[lo]) * (b - lo) / (hi - lo)


def barrier_estimate(groups: list[TrajectoryGroup], step_ms: dict[int, float]) -> dict:
    """Decode steps and modelled decode time of these episodes with and without the barrier between turns.

    With the barrier (the engine now): turn k runs max_e n_ek steps, and its step s has b = #{e: n_ek > s}
    rows, n_ek the tokens episode e wrote in turn k. Without it, each episode decodes its turns back to
    back (observation and prefill time left out): step s has b = #{e: N_e > s} rows, N_e = Σ_k n_ek. Time
    is Σ_s t(b_s), t from the measured step times (interpolated). Prefill and environment time are left
    out of both.
    """
    lengths = [[len(step.action_ids) for step in t.steps] for g in groups for t in g]
    with_barrier = []
    for k in range(max(map(len, lengths))):
        turn = [n[k] for n in lengths if len(n) > k]
        with_barrier += [sum(x > s for x in turn) for s in range(max(turn))]
    totals = [sum(n) for n in lengths]
    without = [sum(x > s for x in totals) for s in range(max(totals))]
    ms_with = sum(_interpolate(step_ms, b) for b in with_barrier)
    ms_without = sum(_interpolate(step_ms, b) for b in without)
    return {"steps_with_barrier": len(with_barrier), "steps_without": len(without),
            "mean_rows_with_barrier": statistics.mean(with_barrier),
            "mean_rows_without": statistics.mean(without),
            "model_s_with_barrier": ms_with / 1000, "model_s_without": ms_without / 1000,
            "speedup": ms_with / ms_without}


_RUNS = (("batched, cache kept", True, True), ("batched, recomputed", True, False),
         ("one at a time, cache kept", False, True), ("one at a time, recomputed", False, False))


def rollouts_part(args, device: torch.device, step_ms: dict[str, dict[int, float]]) -> dict:
    """Part 2: new tokens/s of the batched engine(s) and of one episode at a time, per dtype; the
    barrier estimate."""
    engines = args.engines
    tasks = load_tasks(args.env, "test")[: args.episodes // args.group_size]
    common = dict(group_size=args.group_size, max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                  temperature=args.temperature, seed=0, progress=False)
    print("\n"
          f"rollouts (engines: attention/cache {', '.join(engines)}; model {args.model}), env {args.env}: "
          f"{len(tasks)} tasks x {args.group_size} = {len(tasks) * args.group_size} episodes, max_turns "
          f"{args.max_turns}, max_new_tokens {args.max_new_tokens}, temperature {args.temperature}")
    print(f"{'dtype':<15}{'engine':<28}{'new tokens':>11}{'prefill tokens':>16}{'generate s':>12}"
          f"{'tokens/s':>10}{'calls':>7}")
    rows, summary, barrier = [], [], {}
    for dtype in args.dtypes:
        model, tok = load_policy(args.model, device=str(device), dtype=_load_dtype(dtype, device))
        # warm-up
        rollout(model, tok, args.env, tasks[:1], **{**common, "group_size": 1, "max_new_tokens": 4})
        tps = {}
        for engine, (name, batched, reuse) in [(e, r) for e in engines for r in _RUNS]:
            if not (reuse or args.compare_recompute) or (not batched and engine != engines[0]):
                continue
            attention, cache = engine.split("/")
            model.set_attn_implementation(attention)
            kv_cache.PREALLOCATE = cache == "preallocated"
            name = f"{name} ({engine})" if len(engines) > 1 else name
            stats, groups = run(model, tok, args.env, tasks, common, batched, reuse)
            tps[name] = stats.new_tokens / stats.generate_seconds
            rows.append({"dtype": dtype, "engine": name, "new_tokens": stats.new_tokens,
                         "prefill_tokens": stats.prefill_tokens, "generate_s": stats.generate_seconds,
                         "tokens_per_s": tps[name], "calls": stats.generate_calls})
            print(f"{dtype:<15}{name:<28}{stats.new_tokens:>11}{stats.prefill_tokens:>16}"
                  f"{stats.generate_seconds:>12.1f}{tps[name]:>10.1f}{stats.generate_calls:>7}", flush=True)
            if name.startswith("batched, cache kept") and engine == engines[0] and dtype in step_ms:
                barrier[dtype] = barrier_estimate(groups, step_ms[dtype])
        first = f" ({engines[0]})" if len(engines) > 1 else ""
        line = (f"{dtype:<15}batched / one at a time: "
                f"{tps['batched, cache kept' + first] / tps['one at a time, cache kept' + first]:.2f}x")
        if args.compare_recompute:
            one = tps['one at a time, cache kept' + first] / tps['one at a time, recomputed' + first]
            line += (f"; cache kept / recomputed: batched "
                     f"{tps['batched, cache kept' + first] / tps['batched, recomputed' + first]:.2f}x, "
                     f"one at a time {one:.2f}x")
        for engine in engines[1:]:
            line += (f"; batched {engine} / {engines[0]}: "
                     f"{tps[f'batched, cache kept ({engine})'] / tps['batched, cache kept' + first]:.2f}x")
        summary.append(line)
        del model
    print("speed-up in new tokens/s:")
    print("\n".join(summary))
    if barrier:
        print("barrier between turns, modelled from the batched episodes and the measured step times "
              "(decode only; prefill and environment time left out):")
        print(f"{'dtype':<15}{'steps with':>11}{'without':>9}{'mean rows with':>16}{'without':>9}"
              f"{'model s with':>14}{'without':>9}{'speed-up':>10}")
        for dtype, b in barrier.items():
            print(f"{dtype:<15}{b['steps_with_barrier']:>11}{b['steps_without']:>9}{b['mean_rows_with_barrier']:>16.1f}"
                  f"{b['mean_rows_without']:>9.1f}{b['model_s_with_barrier']:>14.1f}{b['model_s_without']:>9.1f}"
                  f"{b['speedup']:>9.2f}x")
    return {"env": args.env, "engines": engines, "episodes": len(tasks) * args.group_size,
            "max_turns": args.max_turns,
            "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "rows": rows,
            "barrier_estimate": barrier}


def markdown(result: dict) -> str:
    """The results as Markdown tables (for --md)."""
    lines = [f"Machine: {result['machine']}, {result['threads']} threads, torch {result['torch']}, "
             f"device {result['device']}, {result['date']}.", ""]
    if "decode" in result:
        d = result["decode"]
        lines += [f"Streaming read bandwidth: {d['bandwidth_gb_s']:.1f} GB/s. Decode step with a "
                  f"{d['context']}-token "
                  f"cache{' (rows left-padded by 0-24 tokens)' if d.get('padded') else ''}:", "",
                  "| weights | attention | cache | batch | ms / step | tokens/s | weights MB | bound "
                  "ms | bound / step | +KV bound ms |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['dtype']} | {r.get('attention', 'sdpa')}{' + compile' * bool(r.get('compiled'))} | "
                  f"{r['cache']} | {r['batch']} | "
                  f"{r['ms_per_step']:.1f} | {r['tokens_per_s']:.1f} | "
                  f"{r['weight_mb']:.0f} | {r['bound_ms']:.1f} | {r['bound_ms'] / r['ms_per_step']:.2f} | "
                  f"{r['bound_with_kv_ms']:.1f} |" for r in d["steps"]]
        lines.append("")
    if "rollouts" in result:
        r = result["rollouts"]
        lines += [f"Rollouts (engines, attention/cache: {', '.join(r['engines'])}): env {r['env']}, "
                  f"{r['episodes']} episodes, max_turns {r['max_turns']}, max_new_tokens "
                  f"{r['max_new_tokens']}, temperature {r['temperature']}.", "",
                  "| weights | engine | new tokens | prefill tokens | generate s | tokens/s |",
                  "|---|---|---:|---:|---:|---:|"]
        lines += [f"| {x['dtype']} | {x['engine']} | {x['new_tokens']} | {x['prefill_tokens']} | "
                  f"{x['generate_s']:.1f} | {x['tokens_per_s']:.1f} |" for x in r["rows"]]
        if r["barrier_estimate"]:
            lines += ["", "Barrier between turns (modelled, decode only):", "",
                      "| weights | steps with / without | mean rows with / without | "
                      "model s with / without | speed-up |", "|---|---:|---:|---:|---:|"]
            lines += [f"| {k} | {b['steps_with_barrier']} / {b['steps_without']} | "
                      f"{b['mean_rows_with_barrier']:.1f} / {b['mean_rows_without']:.1f} | "
                      f"{b['model_s_with_barrier']:.1f} / {b['model_s_without']:.1f} | "
                      f"{b['speedup']:.2f}x |" for k, b in r["barrier_estimate"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", nargs="+", choices=["decode", "rollouts"], default=["decode", "rollouts"])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"],
                    help="float32 weights, bfloat16 weights, or bf16-autocast (fp32 weights, bf16 autocast)")
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 4, 16], help="decode batch sizes to time")
    ap.add_argument("--caches", nargs="+", choices=["concat", "preallocated"],
                    default=["concat", "preallocated"],
                    help="decode steps with DynamicCache (torch.cat each step) and with kv_cache.RoomyLayer")
    ap.add_argument("--attentions", nargs="+", choices=["sdpa", ATTENTION], default=["sdpa", ATTENTION],
                    help="decode steps with transformers' SDPA and with course_lib.decode_attention")
    ap.add_argument("--engines", nargs="+", default=None,
                    help="part 2's engines as attention/cache, e.g. sdpa/concat "
                    "course_decode/preallocated; the first "
                         "is also the one-at-a-time and barrier baseline (default: the library's defaults)")
    ap.add_argument("--context", type=int, default=200,
                    help="cached tokens per row when timing a decode step")
    ap.add_argument("--padded", action="store_true",
                    help="part 1 with rows of different lengths (left padding), as most of "
                    "the engine's batches")
    ap.add_argument("--steps", type=int, default=12, help="timed decode steps per batch size (median)")
    ap.add_argument("--compile", action="store_true",
                    help="part 1: time each decode step eager and then as torch.compile(model, dynamic=True) "
                         "(inductor), side by side; prints the first, compiling, step's time")
    ap.add_argument("--profile", action="store_true",
                    help="print torch.profiler's top operators per batch size")
    ap.add_argument("--model", default="smollm2-135m",
                    help="the embedded model, or a checkpoint folder (a warm start)")
    ap.add_argument("--episodes", type=int, default=16, help="concurrent episodes (tasks x group size)")
    ap.add_argument("--group-size", type=int, default=1,
                    help="episodes per task (greedy: copies of one episode)")
    ap.add_argument("--env", default="lookup")
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="0: greedy (both engines write the same text)")
    ap.add_argument("--compare-recompute", action="store_true",
                    help="also run both engines without keeping the KV cache between turns")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", help="write the results to this JSON file")
    ap.add_argument("--md", help="write the results as Markdown tables to this file")
    args = ap.parse_args()
    args.engines = args.engines or [f"{ATTENTION}/{'preallocated' if kv_cache.PREALLOCATE else 'concat'}"]
    for engine in args.engines:
        if engine.count("/") != 1 or engine.split("/")[0] not in ("sdpa", ATTENTION) \
                or engine.split("/")[1] not in ("concat", "preallocated"):
            ap.error(f"--engines takes attention/cache (sdpa or {ATTENTION} / concat or "
                     f"preallocated), got {engine!r}")
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    result = {"machine": cpu_name() if device.type == "cpu" else torch.cuda.get_device_name(device),
              "threads": torch.get_num_threads(), "torch": torch.__version__, "device": device.type,
              "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "args": vars(args)}
    print(f"machine: {result['machine']}, {result['threads']} threads, torch "
          f"{torch.__version__}, device {device}")
    t0 = time.perf_counter()
    step_ms: dict[str, dict[int, float]] = {}
    if "decode" in args.parts:
        result["decode"] = decode_part(args, device)
        attention, cache = args.engines[0].split("/")
        for r in result["decode"]["steps"]:
            if (r["cache"], r["attention"]) == (cache, attention):
                step_ms.setdefault(r["dtype"], {})[r["batch"]] = r["ms_per_step"]
    if "rollouts" in args.parts:
        result["rollouts"] = rollouts_part(args, device, step_ms)
    result["seconds"] = time.perf_counter() - t0
    print(f"\n{result['seconds']:.0f} s in all")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(result))


if __name__ == "__main__":
    main()
