"""LoRA adapters (course_lib.lora): the merged copy rollouts sample from is the adapted model, a LoRA run
trains only the adapters, checkpoints them small, resumes to the same weights as an unbroken run, and its
checkpoint loads with `load_policy` as the adapted model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from course_lib import lora
from course_lib.kv_cache import sampling_copy, synced
from course_lib.models import load_policy
from course_lib.train.config import TrainConfig
from course_lib.train.loop import train

IDS = torch.tensor([[1, 504, 3458, 314, 253, 1345, 30, 2], [1, 28, 29, 30, 31, 32, 33, 2]])


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits.float()


def _moved_adapters(rank: int = 4):
    model, _ = load_policy()
    adapted = lora.add_adapters(model, rank, 32.0, base="smollm2-135m")
    torch.manual_seed(0)
    for name, p in adapted.named_parameters():
        if "lora_B" in name:  # B starts at zero (the adapted model is the base model): move it
            p.data.normal_(0, 0.02)
    return adapted


def test_the_merged_copy_is_the_adapted_model_and_follows_its_updates(monkeypatch):
    monkeypatch.setenv("COURSE_BF16", "1")  # a bf16 copy on any CPU
    adapted = _moved_adapters()
    adapters = sum(p.numel() for n, p in adapted.named_parameters() if "lora_" in n)
    assert lora.trainable_count(adapted) == adapters
    copy32, copy16 = sampling_copy(adapted, "float32"), sampling_copy(adapted, "bfloat16")
    assert not lora.is_adapted(copy32) and copy32 is not adapted
    assert torch.allclose(_logits(copy32), _logits(adapted), atol=2e-4)
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_A" in name:
                p.add_(0.05)
    assert not torch.allclose(_logits(copy32), _logits(adapted), atol=1e-2)  # stale until refreshed
    assert torch.allclose(_logits(synced(copy32, adapted)), _logits(adapted), atol=2e-4)
    synced(copy16, adapted)
    layer = adapted.base_model.model.model.layers[3].mlp.down_proj
    merged = layer.base_layer.weight + layer.get_delta_weight("default")
    assert copy16.model.layers[3].mlp.down_proj.weight.dtype == torch.bfloat16
    assert torch.equal(copy16.model.layers[3].mlp.down_proj.weight, merged.to(torch.bfloat16))


def _first_wins(trajectory) -> float:
    return 1.0 if trajectory.traj_id.endswith("#0") else 0.0


def _config(run_dir: Path, steps: int) -> TrainConfig:
    return TrainConfig(env="lookup", run_dir=str(run_dir), steps=steps, tasks_per_step=2, group_size=2,
                       eval_every=0, eval_tasks=2, checkpoint_every=1, progress=False,
                       rollout=dict(max_turns=2, max_new_tokens=12),
                       optim=dict(lora_rank=4, lr=1e-3))


def _adapter_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoint" / "model" / "adapter_model.safetensors"))


def test_a_lora_run_trains_only_the_adapters_checkpoints_them_small_and_resumes_exactly(tmp_path, capsys):
    base, _ = load_policy()
    unbroken = tmp_path / "unbroken"
    out = train(_config(unbroken, 2), reward_fn=_first_wins)
    assert out["step"] == 2 and out["eval"]["n"] == 2
    folder = unbroken / "checkpoint"
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    assert size < 60e6, f"a LoRA checkpoint of rank 4 should be megabytes, got {size / 1e6:.0f} MB"
    assert not list(folder.rglob("model.safetensors"))  # the base weights are not saved again
    assert lora.adapter_base(folder / "model") == "smollm2-135m"

    trained, _ = load_policy(str(folder / "model"))  # the base model with the adapters merged in
    assert not lora.is_adapted(trained)
    moved = [n for n, p in trained.named_parameters() if not torch.equal(p, base.get_parameter(n))]
    assert moved and all(n.split(".")[-2] in lora.TARGETS for n in moved)  # only adapted layers changed
    assert not torch.allclose(_logits(trained), _logits(base), atol=1e-3)

    broken = tmp_path / "broken"
    train(_config(broken, 1), reward_fn=_first_wins)
    assert train(_config(broken, 2), reward_fn=_first_wins)["step"] == 2
    assert f"Resuming {broken} from step 1" in capsys.readouterr().out
    a, b = _adapter_weights(unbroken), _adapter_weights(broken)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_lora_settings_are_checked():
    from course_lib.train.config import check

    with pytest.raises(ValueError, match="lora_rank"):
        check(dataclasses.replace(TrainConfig(), optim=dict(lora_rank=-1)))
    with pytest.raises(ValueError, match="at least 1"):
        lora.add_adapters(load_policy()[0], 0, 32.0, base="smollm2-135m")
