"""The supervised warm start (notebook 03): train on expert demonstrations before RL.

    sft_step           one update on demonstrations (assistant-only loss mask, or every token)
    demonstrations     the env's expert on some tasks, in our protocol and/or TRL's tool-calling format
    warm_start         demonstrations of the env's expert -> a checkpoint `load_policy(path)` reads
    ensure_warm_start  the same, trained once per set of options and cached under runs/warm_start/
    filter_tasks       (re-exported from `course_lib.tasks`, where task selection lives)
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from course_lib import runs_dir
from course_lib.batching import (
    collate,
    forward_logprobs,
    loss_scale,
    pack_by_length,
    unscale_gradients,
    use_bf16,
)
from course_lib.checkpoint import save_model
from course_lib.envs import load_tasks
from course_lib.losses import masked_mean, sft_loss
from course_lib.models import autocast_context, load_policy
from course_lib.rollout import expert_rollout
from course_lib.tasks import filter_tasks
from course_lib.trajectory import Trajectory


def _assistant_loss(model, batch: dict, device, autocast_dtype) -> tuple[torch.Tensor, dict[str, float]]:
    """`losses.sft_loss` with the loss mask, computed as the RL update computes its log-probs
    (`batching.forward_logprobs`): the 49k-wide output layer and its softmax run only at the positions
    that predict a masked token, not at every prompt and observation token. Same loss, same accuracy."""
    ids = batch["input_ids"].to(device)
    logprobs, logits, _ = forward_logprobs(model, batch, device, autocast_dtype, temperature=1.0)
    target_mask = batch["loss_mask"][:, 1:].to(device).to(torch.float32)
    loss = -masked_mean(logprobs[:, 1:], target_mask)
    with torch.no_grad():
        accuracy = (logits.argmax(-1) == ids[:, 1:][target_mask.bool()]).to(torch.float32).mean()
    return loss, {"loss": loss.item(), "tokens": float(target_mask.sum()), "accuracy": float(accuracy)}


def sft_step(model, optimizer, trajectories: list[Trajectory], *, mask: str = "assistant",
             autocast_dtype: torch.dtype | None = None, max_grad_norm: float = 1.0,
             token_budget: int = 2048) -> dict[str, float]:
    """One supervised update on demonstrations; mask="assistant" trains on the model's turns only
    (the trajectory's `loss_mask`), mask="none" on every token (the ablation of notebook 03).

    The batch is cut into micro-batches of at most `token_budget` padded tokens (`pack_by_length`);
    each micro-batch's mean loss is weighted by its share of the trained tokens, so the accumulated
    gradient equals that of the whole batch's mean loss while memory stays bounded (long gridworld
    episodes at batch 8 would otherwise hold tens of GB of activations).
    """
    if mask not in ("assistant", "none"):
        raise ValueError(f"mask must be 'assistant' or 'none', got {mask!r}")
    device = next(model.parameters()).device

    def trained(t: Trajectory) -> int:  # targets are positions 1..T-1
        return sum(t.loss_mask[1:]) if mask == "assistant" else len(t.token_ids) - 1

    total = sum(trained(t) for t in trajectories)
    if total == 0:
        raise ValueError("no trained tokens in this batch (empty loss mask)")
    model.train()
    optimizer.zero_grad(set_to_none=True)
    scale = loss_scale(autocast_dtype)
    sums = {"loss": 0.0, "accuracy": 0.0}
    for rows in pack_by_length([len(t.token_ids) for t in trajectories], token_budget):
        part = [trajectories[i] for i in rows]
        share = sum(trained(t) for t in part) / total
        if share == 0:
            continue
        batch = collate(part)
        if mask == "assistant":  # the output layer only where a model token is predicted
            loss, stats = _assistant_loss(model, batch, device, autocast_dtype)
        else:
            with autocast_context(device, autocast_dtype):
                logits = model(input_ids=batch["input_ids"].to(device),
                               attention_mask=batch["attention_mask"].to(device)).logits
            loss, stats = sft_loss(logits, batch["input_ids"].to(device),
                                   attention_mask=batch["attention_mask"].to(device))
            del logits
        (loss * share * scale).backward()
        sums["loss"] += stats["loss"] * share
        sums["accuracy"] += stats["accuracy"] * share
        del loss
    unscale_gradients(model.parameters(), scale)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))
    skipped = not math.isfinite(grad_norm)
    if skipped:  # an fp16 overflow or a bad batch: leave the weights as they were
        optimizer.zero_grad(set_to_none=True)
    else:
        optimizer.step()
    model.eval()
    return {**sums, "tokens": float(total), "grad_norm": grad_norm, "skipped": skipped}


# The formats a demonstration can be written in: our protocol (tools described in the system prompt,
# <tool_call>/<answer> tags), and TRL's tool-calling format (tool schemas rendered by the tool-calling chat
# template, `answer` a tool), which TRL's environment_factory trains in (course_lib.integrations.trl_eval).
DEMONSTRATION_FORMATS = ("ours", "tool_calling")


def demonstrations(tokenizer, env: str, tasks: list[dict], *,
                   formats: tuple[str, ...] | list[str] = ("ours",), max_turns: int = 8) -> list[Trajectory]:
    """The expert's episode of each task in each of `formats` (see DEMONSTRATION_FORMATS): one trajectory per
    task and format, our protocol's first."""
    unknown = [f for f in formats if f not in DEMONSTRATION_FORMATS]
    if unknown or not formats:
        raise ValueError(f"unknown demonstration formats {unknown or list(formats)}; formats are: "
                         f"{', '.join(DEMONSTRATION_FORMATS)}")
    demos = expert_rollout(tokenizer, env, tasks, max_turns=max_turns) if "ours" in formats else []
    if "tool_calling" in formats:
        # TRL's template and tool schemas, only when asked for (the course meets them in notebook 11)
        from course_lib.integrations.trl_eval import tool_calling_demonstrations

        demos += tool_calling_demonstrations(tokenizer, env, tasks, max_turns=max_turns)
    return demos


def warm_start(env: str = "search_qa", *, model: str = "smollm2-135m", n_demos: int = 256, steps: int = 32,
               lr: float = 5e-5, batch_size: int = 8, run_dir: str | Path = "runs/warm_start/run",
               mask: str = "assistant", seed: int = 0, task_filter: dict[str, Any] | None = None,
               max_turns: int = 8, bf16_autocast: bool | None = None, device: str | None = None,
               tasks: list[dict] | None = None, progress: bool = True,
               formats: tuple[str, ...] | list[str] = ("ours",)) -> Path:
    """Supervised warm start on expert demonstrations; saves a checkpoint that `load_policy(path)` reads.

    Demonstrations: the env's expert on `n_demos` training tasks (filtered by `task_filter`, e.g.
    {"hops": 1}, and shuffled), or on the first `n_demos` of `tasks` when given, in each of `formats`
    (`demonstrations`; two formats give 2 x n_demos demonstrations, mixed). Each step trains on
    `batch_size` demonstrations drawn in a seeded shuffled order.
    Writes sft_metrics.jsonl next to the model files. Returns the checkpoint folder.
    """
    torch.manual_seed(seed)
    run_dir = Path(run_dir)
    model_obj, tokenizer = load_policy(model, device=device)
    dev = next(model_obj.parameters()).device
    autocast_dtype = torch.bfloat16 if use_bf16(bf16_autocast, dev) else model_obj.course_autocast
    if tasks is None:
        tasks = filter_tasks(load_tasks(env, "train"), task_filter)
        random.Random(seed).shuffle(tasks)
    demos = demonstrations(tokenizer, env, tasks[:n_demos], formats=formats, max_turns=max_turns)
    optimizer = torch.optim.AdamW(model_obj.parameters(), lr=lr, weight_decay=0.0)
    rng = random.Random(seed + 1)
    order: list[int] = []
    rows = []
    for step in tqdm(range(1, steps + 1), desc="warm start", disable=not progress):
        if len(order) < batch_size:
            order += rng.sample(range(len(demos)), len(demos))
        picked, order = order[:batch_size], order[batch_size:]
        t0 = time.perf_counter()
        stats = sft_step(model_obj, optimizer, [demos[i] for i in picked], mask=mask,
                         autocast_dtype=autocast_dtype)
        rows.append({"step": step, **stats, "seconds": time.perf_counter() - t0})
    save_model(model_obj, tokenizer, run_dir)
    with (run_dir / "sft_metrics.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return run_dir


def ensure_warm_start(env: str = "search_qa", **options: Any) -> Path:
    """The warm-start checkpoint for these options, trained once and reused from
    `runs/warm_start/<env>-<hash of the options>` afterwards (what the notebooks call)."""
    options.pop("run_dir", None)
    if list(options.get("formats", ["ours"])) == ["ours"]:  # the default: the key it had before the option
        options.pop("formats", None)
    key = json.dumps({"env": env, **{k: v for k, v in options.items() if k != "progress"}}, sort_keys=True)
    path = runs_dir() / "warm_start" / f"{env}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    if not (path / "config.json").exists():
        warm_start(env, run_dir=path, **options)
    return path
