"""Training throughput of `course_lib.train.update.update` on this machine, fp32 vs bf16 autocast.

Prints, per dtype: training tokens/s (forward + backward + AdamW over length-bucketed micro-batches),
the padding fraction of the micro-batches, and the achieved FLOP/s as a fraction of a matmul peak
measured here, in the same dtype, with a large torch.matmul. FLOPs counted are those done: 6 per
parameter per token for a forward and backward pass through the body of the model, and through the
output layer only for the positions that predict a model token (the update skips the others). Targets on
CPU: >= 50% of the bf16 matmul peak, padding < 10%.

On CPU it then profiles one bf16 update and prints the time spent in the matrix products alone: the
fraction of peak the run would reach if everything else (attention softmax, norms, casts, AdamW)
took no time, an upper bound for this model at this batch on this machine; and the speed of the decoder
block's linear products run alone (forward, input gradient, weight gradient) at the micro-batch's row count.

    python benchmarks/train_throughput.py [--demos 24] [--token-budget 2048] [--threads 2] [--device cuda]
    python benchmarks/train_throughput.py --lora 16 --repeats 5   # full fine-tuning against LoRA adapters
    python benchmarks/train_throughput.py --shared-prefix --repeats 3  # the shared start, on and off

`--lora RANK` instead times the bf16-autocast update of full fine-tuning and of LoRA adapters of that rank
(`course_lib.lora`, every projection) on the same batch, alternating (full, LoRA, full, ...) after one
warm-up each, and prints the seconds of each update and the ratio of the medians.

The batch is real: expert demonstrations of search_qa (one- and two-hop questions, so lengths vary),
with random advantages. A benchmark script, not a test; a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from course_lib import batching, lora
from course_lib.batching import use_bf16
from course_lib.envs import load_tasks
from course_lib.models import bf16_is_fast, load_policy
from course_lib.rollout import expert_rollout
from course_lib.train.config import TrainConfig
from course_lib.train.update import update


def matmul_peak(dtype: torch.dtype, device: torch.device, repeats: int = 5, n: int | None = None) -> float:
    """FLOP/s of the best of `repeats` n×n @ n×n matmuls (2n³ FLOP each; by default n = 2048 on CPU, 8192 on
    GPU)."""
    n = n or (8192 if device.type == "cuda" else 2048)
    a, b = torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype)
    return 2 * n**3 / best_matmul_seconds(a, b, device, repeats)


def best_matmul_seconds(a: torch.Tensor, b: torch.Tensor, device: torch.device, repeats: int = 5) -> float:
    """The shortest wall time of `a @ b` over `repeats` runs, after one warm-up run."""
    a @ b
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def linear_product_speeds(model, tokens: int, dtype: torch.dtype) -> dict[str, float]:
    """FLOP/s of the three products of every linear layer of one decoder block, standalone, at `tokens` rows.

    For y = x Wᵀ (x: tokens × in, W: out × in) the update runs the forward product, the input gradient
    g W and the weight gradient gᵀ x; each is 2 · tokens · in · out FLOP. Returns the speed of each kind over
    the block's layers (time-weighted), and of all three together: the best the update could do if
    nothing but these products took time.
    """
    block = model.model.layers[0]
    seconds = {"forward": 0.0, "input gradient": 0.0, "weight gradient": 0.0}
    flops = 0
    for layer in (m for m in block.modules() if isinstance(m, torch.nn.Linear)):
        out_features, in_features = layer.weight.shape
        x, w = torch.randn(tokens, in_features).to(dtype), torch.randn(out_features, in_features).to(dtype)
        g = torch.randn(tokens, out_features).to(dtype)
        for kind, a, b in (("forward", x, w.t()), ("input gradient", g, w), ("weight gradient", g.t(), x)):
            seconds[kind] += best_matmul_seconds(a, b, torch.device("cpu"))
        flops += 2 * tokens * in_features * out_features
    speeds = {kind: flops / s for kind, s in seconds.items()}
    speeds["all three"] = 3 * flops / sum(seconds.values())
    return speeds


def matmul_seconds(model, demos, advantages, config: TrainConfig, autocast_dtype) -> tuple[float, float]:
    """(seconds in matrix products, seconds in all) of one update, from the torch profiler (CPU)."""
    from torch.profiler import ProfilerActivity, profile

    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        update(model, None, optimizer, demos, advantages, config, 0, device=torch.device("cpu"),
               autocast_dtype=autocast_dtype)
    events = prof.key_averages()
    mm = sum(e.self_cpu_time_total for e in events if e.key in ("aten::mm", "aten::addmm", "aten::bmm"))
    return mm / 1e6, sum(e.self_cpu_time_total for e in events) / 1e6


def random_advantages(demos) -> list[torch.Tensor]:
    """Random per-token advantages on the model's tokens, 0 elsewhere (the update's cost does not depend on
    them)."""
    return [torch.randn(len(d.token_ids)) * torch.tensor(d.loss_mask, dtype=torch.float32) for d in demos]


def measure(model, tokenizer, demos, *, bf16: bool, token_budget: int, repeats: int,
            device: torch.device) -> dict:
    config = TrainConfig(optim=dict(token_budget=token_budget, bf16_autocast=bf16, lr=1e-7))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr)
    advantages = random_advantages(demos)
    autocast_dtype = torch.bfloat16 if bf16 else None
    runs = []
    for _ in range(repeats + 1):  # the first one warms up (allocations, AdamW state)
        _sync(device)
        runs.append(update(model, None, optimizer, demos, advantages, config, 0, device=device,
                           autocast_dtype=autocast_dtype))
    best = min(runs[1:], key=lambda r: r["seconds_update"])
    return best


def compare_lora(demos, rank: int, *, token_budget: int, repeats: int, device: torch.device) -> None:
    """Seconds of one bf16-autocast update, full fine-tuning against LoRA adapters of `rank`, alternating."""
    config = TrainConfig(optim=dict(token_budget=token_budget, bf16_autocast=True, lr=1e-7))
    advantages = random_advantages(demos)
    arms = {}
    for name in ("full", f"lora r{rank}"):
        model = load_policy("smollm2-135m", device=str(device), dtype="float32")[0]
        if name != "full":
            model = lora.add_adapters(model, rank, 32.0, base="smollm2-135m")
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-7)
        arms[name] = (model, optimizer, [])
    for i in range(repeats + 1):  # the first round warms up (allocations, AdamW state)
        for model, optimizer, seconds in arms.values():
            _sync(device)
            r = update(model, None, optimizer, demos, advantages, config, 0, device=device,
                       autocast_dtype=torch.bfloat16)
            if i:
                seconds.append(r["seconds_update"])
    for name, (model, _, seconds) in arms.items():
        print(f"{name:<10} {lora.trainable_count(model) / 1e6:6.1f} M trained weights; seconds per update: "
              + ", ".join(f"{s:.2f}" for s in seconds) + f" (median {statistics.median(seconds):.2f})")
    full, adapted = (statistics.median(s) for _, _, s in arms.values())
    print(f"LoRA / full, median update time: {adapted / full:.2f}x")


def compare_shared_prefix(demos, *, token_budget: int, repeats: int, device: torch.device) -> None:
    """Seconds of one update with each micro-batch's common start run once (`batching.SHARE_PREFIX`) and
    with every row run whole, alternating, in the dtype the trainer picks on this device (`use_bf16`)."""
    bf16 = use_bf16(None, device)
    config = TrainConfig(optim=dict(token_budget=token_budget, bf16_autocast=bf16, lr=1e-7))
    autocast_dtype = torch.bfloat16 if bf16 else None
    advantages = random_advantages(demos)
    model = load_policy("smollm2-135m", device=str(device), dtype="float32")[0]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7)
    shared = [batching.shared_prefix_length(b["input_ids"], b["attention_mask"])
              for b in (batching.collate([demos[i] for i in rows])
                        for rows in batching.pack_by_length([len(d.token_ids) for d in demos], token_budget))]
    speeds = {dt: matmul_peak(dt, device, n=1024) / 1e9 for dt in (torch.float32, torch.bfloat16)}
    print(f"1,024^2 matmul: fp32 {speeds[torch.float32]:.1f} GFLOP/s, bf16 {speeds[torch.bfloat16]:.1f} "
          f"GFLOP/s; bf16 units (models.bf16_is_fast): {'yes' if bf16_is_fast(device) else 'no'}")
    print(f"{'bf16 autocast' if bf16 else 'fp32'}; micro-batches' shared starts (tokens): {shared}")
    seconds: dict[bool, list[float]] = {True: [], False: []}
    for i in range(repeats + 1):  # the first round warms up (allocations, AdamW state)
        for share in (False, True):
            batching.SHARE_PREFIX = share
            _sync(device)
            r = update(model, None, optimizer, demos, advantages, config, 0, device=device,
                       autocast_dtype=autocast_dtype)
            if i:
                seconds[share].append(r["seconds_update"])
    batching.SHARE_PREFIX = True
    for share, label in ((False, "rows whole"), (True, "start shared")):
        print(f"{label:<13} seconds per update: " + ", ".join(f"{s:.2f}" for s in seconds[share])
              + f" (median {statistics.median(seconds[share]):.2f})")
    ratio = statistics.median(seconds[True]) / statistics.median(seconds[False])
    print(f"start shared / rows whole, median update time: {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--demos", type=int, default=24, help="demonstrations in the batch")
    parser.add_argument("--token-budget", type=int, default=2048, help="padded tokens per micro-batch")
    parser.add_argument("--repeats", type=int, default=1, help="timed updates per dtype (after one warm-up)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--shared-prefix", action="store_true",
                        help="only compare the update with each micro-batch's common start run once, and not")
    parser.add_argument("--lora", type=int, default=0,
                        help="only compare full fine-tuning with LoRA adapters of this rank")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    model, tokenizer = load_policy("smollm2-135m", device=args.device, dtype="float32")
    params = sum(p.numel() for p in model.parameters())
    head_params = model.get_output_embeddings().weight.numel()  # tied to the input embedding here
    body_params = params - head_params  # the embedding lookup itself costs no FLOPs
    tasks = load_tasks("search_qa", "train")[: args.demos]
    demos = expert_rollout(tokenizer, "search_qa", tasks)
    lengths = [len(d.token_ids) for d in demos]
    scored = sum(sum(d.loss_mask[1:]) for d in demos)  # positions whose prediction the loss reads
    print(f"model: {params / 1e6:.1f} M parameters; batch: {len(demos)} search_qa demonstrations, "
          f"{sum(lengths)} tokens (lengths {min(lengths)}-{max(lengths)}, {scored} of them model tokens); "
          f"token budget {args.token_budget}; "
          f"{torch.cuda.get_device_name(0) if device.type == 'cuda' else f'{args.threads} threads'}")
    if args.shared_prefix:
        compare_shared_prefix(demos, token_budget=args.token_budget, repeats=args.repeats, device=device)
        return
    if args.lora:
        compare_lora(demos, args.lora, token_budget=args.token_budget, repeats=args.repeats, device=device)
        return

    header = f"{'dtype':<16}{'tokens/s':>10}{'padding':>10}{'achieved':>14}{'matmul peak':>14}{'of peak':>9}"
    print(header)
    results = {}
    for name, bf16, peak_dtype in (("fp32", False, torch.float32), ("bf16 autocast", True, torch.bfloat16)):
        peak = matmul_peak(peak_dtype, device)
        r = measure(model, tokenizer, demos, bf16=bf16, token_budget=args.token_budget, repeats=args.repeats,
                    device=device)
        # FLOPs actually done: 6 per parameter per token through the body, and through the output layer
        # only for the positions that predict a model token (course_lib.batching.forward_logprobs skips the
        # rest).
        flops = 6 * (body_params * r["train_tokens"] + head_params * scored)
        achieved = flops / r["seconds_update"]
        results[name] = (achieved / peak, r["padding_fraction"], flops, peak)
        print(f"{name:<16}{r['tokens_per_s']:>10.0f}{100 * r['padding_fraction']:>9.1f}%"
              f"{achieved / 1e9:>10.1f} GF/s{peak / 1e9:>10.1f} GF/s{100 * achieved / peak:>8.1f}%")
    frac, padding, flops, peak = results["bf16 autocast"]
    print(f"target >= 50% of the bf16 matmul peak: {'met' if frac >= 0.5 else 'NOT met'} "
          f"({100 * frac:.0f}%); padding < 10%: {'met' if padding < 0.1 else 'NOT met'} "
          f"({100 * padding:.1f}%)")
    if device.type == "cpu":
        config = TrainConfig(optim=dict(token_budget=args.token_budget, bf16_autocast=True, lr=1e-7))
        mm, total = matmul_seconds(model, demos, random_advantages(demos), config, torch.bfloat16)
        print(f"profiled bf16 update: {mm:.1f} s of {total:.1f} s in matrix products (mm, bmm); "
              f"with no time outside them it would reach {100 * flops / mm / peak:.0f}% of the bf16 peak")
        speeds = linear_product_speeds(model, args.token_budget, torch.bfloat16)
        print(f"the block's linear products alone, bf16, {args.token_budget} rows, "
              "as a share of the bf16 peak: "
              + ", ".join(f"{kind} {100 * speed / peak:.0f}%" for kind, speed in speeds.items()))


if __name__ == "__main__":
    main()
