"""Shared fixtures: the real embedded model, loaded once per test session (no mocks of it)."""

import os

import pytest
import torch

from course_lib.models import course_threads

os.environ.setdefault("COURSE_FAST", "1")
torch.set_num_threads(course_threads())
# The model's device in the tests: CPU everywhere (CI has no GPU); COURSE_TEST_DEVICE=cuda runs the same
# tests through the CUDA path on a machine with a GPU.
TEST_DEVICE = os.environ.get("COURSE_TEST_DEVICE", "cpu")


@pytest.fixture(scope="session")
def policy():
    from course_lib.models import load_policy

    model, tokenizer = load_policy("smollm2-135m", device=TEST_DEVICE)
    return model, tokenizer


@pytest.fixture(scope="session")
def tokenizer(policy):
    return policy[1]


def logprob_atol(model, fp32: float) -> float:
    """Tolerance for comparing log-probs computed two ways (batched vs alone, cached vs recomputed):
    `fp32` for fp32 weights without autocast (CPU); 0.3 under bf16/fp16 (the CUDA default), whose 8-bit
    mantissa moves a logit of ~20 by ~0.1 when the same sums are taken in another order (measured on
    an H200 with bf16 autocast: up to 0.18 between a batched rollout and its recomputation, 0.13 between
    a cached and a recomputed context; the tokens themselves were identical)."""
    reduced = model.course_autocast is not None or next(model.parameters()).dtype != torch.float32
    return 0.3 if reduced else fp32
