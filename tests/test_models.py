"""The embedded model's cache, device/dtype choice, thread count and the offline error for hub names."""

import json
from types import SimpleNamespace

import pytest
import torch

from course_lib.models import (
    EMBEDDED,
    bf16_is_fast,
    course_threads,
    embedded_checkpoint,
    load_policy,
    pick_dtype,
    sample_next,
)


def test_hub_name_offline_gives_an_error_naming_the_embedded_default(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match=EMBEDDED):
        load_policy("qwen2.5-0.5b")


def test_cached_embedded_checkpoint_is_a_plain_fp32_model():
    path = embedded_checkpoint(verbose=False)
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config  # dropped before saving, or save_pretrained would have refused
    assert (path / "model.safetensors").stat().st_size > 400e6  # 135M fp32 weights, not the 4-bit GGUF


def test_dtype_choice_per_device():
    cpu = torch.device("cpu")
    assert pick_dtype(cpu) == (torch.float32, None)
    assert pick_dtype(cpu, "bf16-autocast") == (torch.float32, torch.bfloat16)
    assert pick_dtype(cpu, torch.bfloat16) == (torch.bfloat16, None)


@pytest.mark.parametrize("gpu, capability, autocast",
                         [("A100", (8, 0), torch.bfloat16), ("T4", (7, 5), torch.float16)])
def test_cuda_keeps_fp32_weights_so_that_training_updates_are_not_rounded_away(monkeypatch, gpu, capability,
                                                                               autocast):
    # Fake the hardware, not is_bf16_supported: torch's own answer is what is tested. A T4 can create bf16
    # tensors (emulation), which the default is_bf16_supported() counts as support.
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(
        name=gpu, major=capability[0], minor=capability[1]))
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: True)
    assert pick_dtype(torch.device("cuda")) == (torch.float32, autocast)


def test_adamw_steps_are_rounded_away_in_bf16_weights_but_kept_in_fp32():
    """Why pick_dtype keeps fp32 weights: an AdamW step of lr = 2e-5 on weights of the size of the
    model's (~0.05) is below bf16's spacing there (~2e-4), so in bf16 almost no weight moves."""
    torch.manual_seed(0)
    changed = {}
    for dtype in (torch.float32, torch.bfloat16):
        w = torch.nn.Parameter((torch.randn(4096) * 0.05).to(dtype))
        before = w.detach().clone()
        optimizer = torch.optim.AdamW([w], lr=2e-5, weight_decay=0.0)
        w.grad = torch.randn(4096).to(dtype)
        optimizer.step()
        changed[dtype] = (w.detach() != before).float().mean().item()
    assert changed[torch.float32] > 0.99
    assert changed[torch.bfloat16] < 0.2


def test_course_threads_reads_the_environment(monkeypatch):
    monkeypatch.setenv("COURSE_THREADS", "3")
    assert course_threads() == 3
    monkeypatch.delenv("COURSE_THREADS")
    assert 1 <= course_threads(cap=2) <= 2
    monkeypatch.setenv("COURSE_THREADS", "two")
    with pytest.raises(ValueError, match="COURSE_THREADS"):
        course_threads()


def test_course_setup_warns_when_the_runs_disk_is_short(tmp_path, monkeypatch, capsys):
    """The threshold is set above any real disk, so the real free space (of the nearest existing folder above
    a runs folder not made yet) triggers the warning; with a threshold of 0 nothing is printed."""
    from course_lib.course.setup import course_setup

    monkeypatch.setenv("COURSE_RUNS", str(tmp_path / "not" / "made" / "yet"))
    threads = torch.get_num_threads()
    try:
        course_setup(seed=0, disk_warning_gb=1e9)
        warning = capsys.readouterr().out.splitlines()[-1]
        free = float(warning.removeprefix("WARNING: ").split(" GB free")[0])
        assert 0 < free < 1e9 and "COURSE_RUNS" in warning
        course_setup(seed=0, disk_warning_gb=0)
        assert "WARNING" not in capsys.readouterr().out
    finally:
        torch.set_num_threads(threads)


def test_sample_next_is_greedy_at_temperature_zero_and_returns_the_tokens_log_probs():
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]])
    tokens, logprobs = sample_next(logits, 0.0)
    assert tokens.tolist() == [1, 0]
    assert torch.allclose(logprobs, torch.log_softmax(logits, -1)[[0, 1], [1, 0]])
    generator = torch.Generator().manual_seed(0)
    tokens, logprobs = sample_next(logits, 0.5, generator)
    assert torch.allclose(logprobs, torch.log_softmax(logits / 0.5, -1).gather(1, tokens[:, None]).squeeze(1))


def test_bf16_is_fast_reads_the_hardware_unless_told(monkeypatch):
    """COURSE_BF16 overrides the hardware check both ways and must be 0 or 1; without it the answer on this
    machine's CPU is torch's own reading of its instructions (AVX512-BF16 or AMX on x86)."""
    cpu = torch.device("cpu")
    monkeypatch.delenv("COURSE_BF16", raising=False)
    if torch.cpu._is_avx2_supported():
        units = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
        assert bf16_is_fast(cpu) == units
    for forced, expected in (("1", True), ("0", False)):
        monkeypatch.setenv("COURSE_BF16", forced)
        assert bf16_is_fast(cpu) is expected
    monkeypatch.setenv("COURSE_BF16", "yes")
    with pytest.raises(ValueError, match="COURSE_BF16 must be 0 or 1"):
        bf16_is_fast(cpu)
