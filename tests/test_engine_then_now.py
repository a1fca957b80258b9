"""benchmarks/engine_then_now.py's arms: the "then" arm really switches the engine back (no preallocated
cache, transformers' SDPA for decode steps, fp32 sampler) and puts the switches back afterwards; the arms
differ in nothing else."""

import importlib.util
import sys
from pathlib import Path

import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from course_lib import batching, decode_attention, kv_cache

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    modules = {}
    for name in ("lora_vs_full", "engine_then_now"):
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        modules[name] = module
    return modules


def _tiny_llama():
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, attn_implementation="sdpa")
    return LlamaForCausalLM(config)


def test_then_arm_switches_the_engine_back_and_restores_it(scripts):
    engine, arms = scripts["lora_vs_full"].engine, scripts["engine_then_now"].ARMS
    assert kv_cache.PREALLOCATE is True
    with engine(**arms["then"]["engine"]):
        assert kv_cache.PREALLOCATE is False and batching.SHARE_PREFIX is False
        model = _tiny_llama()
        decode_attention.install(model)  # what load_policy calls: a no-op in the "then" arm
        assert model.config._attn_implementation == "sdpa"
    assert kv_cache.PREALLOCATE is True and batching.SHARE_PREFIX is True
    model = _tiny_llama()
    decode_attention.install(model)
    assert model.config._attn_implementation == decode_attention.ATTENTION
    with engine(**arms["now"].get("engine", {})):
        assert kv_cache.PREALLOCATE is True


def test_the_arms_differ_only_in_the_engine_and_the_sampler(scripts, tmp_path):
    lvf, arms = scripts["lora_vs_full"], scripts["engine_then_now"].ARMS

    class Args:
        steps, eval_tasks = 20, 40

    then, now = (lvf._config(arms[a], 0, 20, Args, tmp_path / a, tmp_path / "warm") for a in ("then", "now"))
    assert then.rollout.sample_dtype == "float32" and now.rollout.sample_dtype == "bfloat16"
    then.rollout.sample_dtype = now.rollout.sample_dtype
    then.run_dir = now.run_dir
    assert then == now
