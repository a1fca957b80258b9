"""benchmarks/vs_trl.py --time-to-success: both trainers' held-out curves from one warm start, the time to a
target read off them, and the evaluator of TRL's tool-calling format that tells whether the warm start works
there at all.

Tiny sizes: the lookup environment, the embedded SmolLM2-135M as the "warm start", 2 steps, 2 test tasks.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from course_lib.envs import load_tasks
from course_lib.integrations import trl as trl_integration
from course_lib.integrations import trl_eval
from course_lib.integrations.trl_eval import evaluate_tool_calling
from course_lib.models import embedded_checkpoint, load_tokenizer
from course_lib.protocol import format_answer, format_tool_call

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
ENV = "lookup"


@pytest.fixture
def vs_trl(monkeypatch):
    spec = importlib.util.spec_from_file_location("vs_trl", BENCHMARKS / "vs_trl.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "vs_trl", module)
    spec.loader.exec_module(module)
    return module


def _point(step: int, seconds: float, success: float) -> dict:
    return {"step": step, "train_seconds": seconds, "success": success, "success_tool_calling": 0.0}


def test_time_to_target_is_the_clock_at_the_first_evaluation_that_reaches_it(vs_trl):
    curve = [_point(0, 0.0, 0.25), _point(5, 50.0, 0.75), _point(10, 90.0, 0.5), _point(15, 140.0, 0.875)]
    assert vs_trl.time_to_target(curve, 0.75) == {"seconds": 50.0, "step": 5, "best": 0.875, "best_step": 15}
    assert vs_trl.time_to_target(curve, 0.8) == {"seconds": 140.0, "step": 15, "best": 0.875, "best_step": 15}
    assert vs_trl.time_to_target(curve, 0.9) == {"seconds": None, "step": None, "best": 0.875,
                                                 "best_step": 15}
    assert vs_trl.time_to_target(curve, 0.2)["seconds"] == 0.0  # the warm start itself reaches it
    assert vs_trl.time_to_target(curve, 0.0, key="success_tool_calling")["step"] == 0


# ----- TRL's tool-calling format, turns scripted (no generation) --------------------------------------


@pytest.fixture(scope="module")
def our_tokenizer():
    return load_tokenizer(str(embedded_checkpoint()))


def _scripted(monkeypatch, n_tasks: int, text_of) -> list[list[list[int]]]:
    """Generation replaced by `text_of(task, turn)` + end of turn; returns the contexts it was handed.

    The scripts below keep every episode running until all end together, so the k-th context of a call is
    task k's and the call's number is the turn.
    """
    seen: list[list[list[int]]] = []

    def turns(model, tokenizer, contexts, max_new_tokens):
        assert len(contexts) == n_tasks
        seen.append([list(c) for c in contexts])
        return [tokenizer(text_of(task, len(seen) - 1), add_special_tokens=False)["input_ids"]
                + [tokenizer.eos_token_id] for task in range(n_tasks)]

    monkeypatch.setattr(trl_eval, "_greedy_turns", turns)
    return seen


def _tool_call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_tool_calling_evaluation_scores_an_episode_in_trls_format(monkeypatch, our_tokenizer):
    tasks = load_tasks(ENV, "test", 2)

    def expert(task: int, turn: int) -> str:
        if turn == 0:
            return _tool_call("lookup", {"name": tasks[task]["target"]})
        return _tool_call("answer", {"answer": tasks[task]["answer"] if task == 0 else "Nowhere"})

    seen = _scripted(monkeypatch, 2, expert)
    result = evaluate_tool_calling(None, our_tokenizer, ENV, tasks, max_turns=3, max_completion_length=200)
    assert result["outcomes"] == [1, 0] and result["success"] == 0.5
    assert result["turns_with_tool_calls"] == 1.0 and result["mean_turns"] == 2.0  # the env ends at `answer`
    assert len(seen) == 2
    tok = trl_integration.tool_calling_tokenizer(load_tokenizer(str(embedded_checkpoint())))
    second_turn = tok.decode(seen[1][0])
    observation = f"Agent {tasks[0]['target']} is stationed in {tasks[0]['answer']}."
    # the lookup's result comes back as the template's tool message, then the next assistant turn opens
    assert second_turn.endswith(f"<|im_start|>user\n<tool_response>\n{observation}\n</tool_response>"
                                "<|im_end|>\n<|im_start|>assistant\n")
    assert "<tools>" in second_turn and our_tokenizer.chat_template != tok.chat_template  # caller's untouched


def test_our_protocols_answer_tag_is_no_answer_in_trls_format(monkeypatch, our_tokenizer):
    # what our expert writes, so what a warm start learns: the right lookup, then the right answer as a tag
    tasks = load_tasks(ENV, "test", 2)

    def ours(task: int, turn: int) -> str:
        if turn == 0:
            return format_tool_call("lookup", {"name": tasks[task]["target"]})
        return format_answer(tasks[task]["answer"])

    _scripted(monkeypatch, 2, ours)
    result = evaluate_tool_calling(None, our_tokenizer, ENV, tasks, max_turns=3, max_completion_length=200)
    assert result["outcomes"] == [0, 0] and result["turns_with_tool_calls"] == 0.5


def test_a_completion_past_the_budget_ends_the_episode(monkeypatch, our_tokenizer):
    tasks = load_tasks(ENV, "test", 1)
    seen = _scripted(monkeypatch, 1, lambda task, turn: _tool_call("lookup", {"name": "Nobody"}))
    result = evaluate_tool_calling(None, our_tokenizer, ENV, tasks, max_turns=3, max_completion_length=30)
    assert result["turns_with_tool_calls"] == 1.0  # the call itself fits and is parsed
    assert len(seen) == 1 and result["mean_turns"] == 1.0  # its result would pass 30 tokens: TRL drops it


# ----- the whole mode, end to end ------------------------------------------------------------------------


def test_time_to_success_runs_both_trainers_to_a_curve(vs_trl, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_RUNS", str(tmp_path / "runs"))
    out = tmp_path / "tts.json"
    result = vs_trl.main(["--time-to-success", "0.5", "--max-steps", "2", "--eval-every", "1",
                          "--eval-tasks", "2", "--tasks-per-step", "1", "--group-size", "2",
                          "--max-turns", "2", "--max-new-tokens", "12", "--warm-start-steps", "0",
                          "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    for arm in ("ours", "trl"):
        curve = result[arm]["curve"]
        assert [p["step"] for p in curve] == [0, 1, 2], arm
        seconds = [p["train_seconds"] for p in curve]
        assert seconds[0] == 0.0 and all(a < b for a, b in zip(seconds, seconds[1:])), (arm, seconds)
        assert all(0.0 <= p["success"] <= 1.0 for p in curve)
        assert result[arm]["steps"] == 2
        assert result[arm]["seconds_per_step"] == pytest.approx(seconds[-1] / 2)
        reached = result[arm]["reached"]
        first = next((p for p in curve if p["success"] >= 0.5), None)
        assert reached["seconds"] == (first["train_seconds"] if first else None)
    assert all(0.0 <= p["success_tool_calling"] <= 1.0 for p in result["trl"]["curve"])
    # the same weights and the same evaluator before any step: the same held-out success
    assert result["warm_start"]["success"] == result["ours"]["curve"][0]["success"] \
        == result["trl"]["curve"][0]["success"]
    both = result["ours"]["reached"]["seconds"], result["trl"]["reached"]["seconds"]
    assert (result["ratio_ours_over_trl"] is None) == (None in both or both[1] == 0)
    assert any(note.startswith("warm start, held-out greedy success") for note in result["notes"])
