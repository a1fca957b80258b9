"""`course_lib.evaluate`: greedy success on held-out tasks with its Wilson interval, on the real embedded
model (three lookup tasks, a few tokens each), and the task selection that fails before a model is loaded."""

from __future__ import annotations

import pytest

from course_lib import wilson_interval
from course_lib.envs import load_tasks
from course_lib.evaluate import evaluate, evaluation_tasks


@pytest.fixture(scope="module")
def result(policy):
    model, tokenizer = policy
    return evaluate(model, "lookup", n_tasks=3, tokenizer=tokenizer, max_turns=2, max_new_tokens=16)


def test_success_is_the_mean_outcome_with_a_wilson_interval_of_n(result):
    assert result["n"] == 3 and len(result["outcomes"]) == 3 and set(result["outcomes"]) <= {0, 1}
    wins = sum(result["outcomes"])
    assert result["success"] == pytest.approx(wins / 3)
    assert (result["ci_low"], result["ci_high"]) == pytest.approx(wilson_interval(wins, 3))
    assert 0.0 <= result["ci_low"] <= result["success"] <= result["ci_high"] <= 1.0
    assert result["ci_high"] - result["ci_low"] > 0.4  # three tasks say little
    assert 1.0 <= result["mean_turns"] <= 2.0
    assert (result["mean_turns_success"] is None) == (wins == 0)


def test_the_same_model_on_the_same_tasks_gives_the_same_outcomes(policy, result):
    """Greedy decoding: a second evaluation (here on the tasks passed explicitly) repeats every outcome, which
    is what paired comparisons of two models on the same tasks rely on."""
    model, tokenizer = policy
    tasks = evaluation_tasks("lookup", "test", 3)
    again = evaluate(model, "lookup", tasks=tasks, tokenizer=tokenizer, max_turns=2, max_new_tokens=16,
                     batch_size=2)
    assert again["outcomes"] == result["outcomes"] and again["n"] == 3


def test_evaluation_tasks_are_the_first_n_of_the_split_that_pass_the_filter():
    test_split = load_tasks("lookup", "test")
    assert [t["id"] for t in evaluation_tasks("lookup", "test", 4)] == [t["id"] for t in test_split[:4]]
    city = test_split[0]["answer"]
    same_city = [t["id"] for t in test_split if t["answer"] == city][:2]
    assert [t["id"] for t in evaluation_tasks("lookup", "test", 2, {"answer": city})] == same_city
    with pytest.raises(ValueError, match="no task matches task_filter"):
        evaluation_tasks("lookup", "test", 2, {"answer": "Atlantis"})
    with pytest.raises(ValueError, match="n_tasks must be at least 1"):
        evaluation_tasks("lookup", "test", 0)


def test_a_model_object_needs_its_tokenizer(policy):
    model, _ = policy
    with pytest.raises(ValueError, match="pass tokenizer"):
        evaluate(model, "lookup", n_tasks=1)
