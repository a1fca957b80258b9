"""LoRA adapters on the policy (through `peft`): train two small matrices per linear layer, not every weight.

An adapted linear layer computes

    y = W x + (α / r) · B A x,     A ∈ R^{r × d_in} (random), B ∈ R^{d_out × r} (zeros at the start)

W stays frozen; only A and B train. At rank r = 16 on every projection of the embedded model (q, k, v, o and
the MLP's gate, up and down, in all 30 layers) that is 4.9 M trained weights instead of 134.5 M: AdamW's two
moments and a checkpoint shrink by the same factor (63 MB instead of 1.6 GB), and the update computes no
gradient of W. The forward and backward passes still run through every layer, and the adapters add small
products of their own: on 2 CPU cores the update took the same time as full fine-tuning's (1.00x), and
held-out success after RL was as high (`benchmarks/README.md`, lora_vs_full).

Sampling does not pay for the adapters: rollouts and evaluation run a plain copy of the model whose weights
are W + (α / r) B A (`merged_copy`), refreshed before each use (`refresh_merged`), so a decode step reads
the same bytes as without LoRA.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import torch

# every linear projection of a Llama-style block (the output layer, tied to the embedding, is left alone)
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def is_adapted(model) -> bool:
    """Whether `model` carries LoRA adapters (a peft model)."""
    return hasattr(model, "peft_config")


def add_adapters(model, rank: int, alpha: float, base: str):
    """Wrap `model` with fresh LoRA adapters of rank `rank` on every projection (`TARGETS`); returns the peft
    model, whose only trainable weights are the adapters. `base` names the model it sits on (a name
    `load_policy` takes, e.g. "smollm2-135m" or a warm start's folder); checkpoints record it."""
    from peft import LoraConfig, get_peft_model

    if rank < 1:
        raise ValueError(f"the LoRA rank must be at least 1, got {rank}")
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(TARGETS), bias="none")
    with warnings.catch_warnings():  # peft reads a transformers attribute that is deprecated (FutureWarning)
        warnings.simplefilter("ignore", FutureWarning)
        adapted = get_peft_model(model, config)
    adapted.peft_config["default"].base_model_name_or_path = base  # the name, not this machine's path
    return adapted


def load_adapters(model, folder: str | Path, trainable: bool = True):
    """`model` with the adapters saved in `folder` (by `save_pretrained` of an adapted model)."""
    from peft import PeftModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return PeftModel.from_pretrained(model, str(folder), is_trainable=trainable)


def adapter_base(folder: str | Path) -> str | None:
    """The model name the adapters saved in `folder` sit on; None when `folder` holds no adapters."""
    path = Path(folder) / "adapter_config.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())["base_model_name_or_path"]


def merged_copy(model, dtype: torch.dtype = torch.float32):
    """A plain (peft-free) copy of an adapted model with each adapted weight W + (α / r) B A, in `dtype`,
    frozen: what rollouts and evaluation run. `refresh_merged` brings it up to date after an update."""
    plain = copy.deepcopy(model).merge_and_unload()
    for p in plain.parameters():  # parameters, not buffers: the rotary frequencies stay fp32
        p.requires_grad_(False)
        p.data = p.data.to(dtype)
    plain.course_autocast = getattr(model, "course_autocast", None) if dtype == torch.float32 else None
    return plain.eval()


@torch.no_grad()
def refresh_merged(plain, model) -> None:
    """Write W + (α / r) B A of every adapted layer of `model` into `plain` (a `merged_copy`), rounded to
    its dtype. Only adapted layers change during training; the rest of `plain` is already equal."""
    from peft.tuners.lora import LoraLayer

    targets = dict(plain.named_modules())
    for name, module in model.base_model.model.named_modules():
        if isinstance(module, LoraLayer):
            delta = sum(module.get_delta_weight(a) for a in module.active_adapters)
            targets[name].weight.copy_(module.base_layer.weight + delta)


def trainable_count(model) -> int:
    """The number of weights the optimizer updates."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

