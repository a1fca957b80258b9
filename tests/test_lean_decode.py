"""benchmarks/lean_decode.py's lean decode step computes what the model's own step computes: the same
logits from the same prefill, on left-padded rows, in fp32 and bf16 (the benchmark times it only after this
check)."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from course_lib.models import load_policy

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def lean_decode(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("lean_decode", BENCHMARKS / "lean_decode.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "lean_decode", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_lean_step_gives_the_models_logits(lean_decode, dtype):
    model, _ = load_policy("smollm2-135m", device="cpu", dtype=dtype)
    r = lean_decode.compare(model, batch=4, context=30, steps=4)  # rows left-padded by 0, 8, 16, 24
    assert r["same_greedy_token"]
    assert r["max_abs_logit_diff"] <= (1e-4 if dtype == torch.float32 else 0.05)
    assert r["transformers_ms"] > 0 and r["lean_ms"] > 0
