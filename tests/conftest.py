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
