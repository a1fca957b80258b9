"""benchmarks/vs_trl.py --time-to-success: both trainers' held-out curves from one warm start, the time to a
target read off them, the evaluator of TRL's tool-calling format that tells whether the warm start works
there at all, and the expert's demonstrations in that format that the mode's two-format warm start learns.

Tiny sizes: the lookup environment, the embedded SmolLM2-135M as the "warm start", 2 steps, 2 test tasks;
the demonstrations and the evaluator's scripted episodes need the tokenizer only.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from course_lib import sft
from course_lib.envs import load_tasks
from course_lib.integrations import trl as trl_integration
from course_lib.integrations import trl_eval
from course_lib.integrations.trl_eval import evaluate_tool_calling, tool_calling_demonstrations
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


# ----- the expert's demonstrations in TRL's tool-calling format (the two-format warm start) ---------------


@pytest.fixture(scope="module")
def tool_calling_demos(our_tokenizer):
    tasks = load_tasks(ENV, "train", 3)
    return tasks, tool_calling_demonstrations(our_tokenizer, ENV, tasks, max_turns=3)


def _trl_template():
    """A fresh tokenizer with TRL's tool-calling template, and the adapter's tool schemas."""
    tokenizer = trl_integration.tool_calling_tokenizer(load_tokenizer(str(embedded_checkpoint())))
    factory = trl_integration.make_trl_environment_factory(ENV, max_turns=3)
    return tokenizer, trl_integration.tool_schemas(factory)


def _masked_spans(loss_mask: list[int]) -> list[tuple[int, int]]:
    """The [start, end) runs of 1 in a loss mask."""
    spans, start = [], None
    for i, m in enumerate(loss_mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def test_tool_calling_demonstrations_are_the_chat_templates_rendering(tool_calling_demos):
    tasks, demos = tool_calling_demos
    tokenizer, schemas = _trl_template()
    for task, demo in zip(tasks, demos):
        assert [m["role"] for m in demo.messages] == ["system", "user", "assistant", "tool", "assistant"]
        calls = [m["tool_calls"][0]["function"] for m in demo.messages if m["role"] == "assistant"]
        assert calls == [{"name": "lookup", "arguments": {"name": task["target"]}},
                         {"name": "answer", "arguments": {"answer": task["answer"]}}]  # the answer is a tool
        assert demo.messages[3] == {"role": "tool", "name": "lookup",
                                    "content": f"Agent {task['target']} is stationed in {task['answer']}."}
        assert demo.token_ids == tokenizer.apply_chat_template(demo.messages, tools=schemas, tokenize=True,
                                                               return_dict=False)
        assert demo.prompt_ids == tokenizer.apply_chat_template(demo.messages[:2], tools=schemas,
                                                                add_generation_prompt=True, tokenize=True,
                                                                return_dict=False)
        assert len(demo.loss_mask) == len(demo.logprobs) == len(demo.turn_index) == len(demo.token_ids)
        assert demo.success and demo.num_turns == 2


def test_the_tool_calling_mask_is_one_exactly_on_the_calls_the_model_writes(tool_calling_demos):
    tasks, demos = tool_calling_demos
    tokenizer, _ = _trl_template()
    for task, demo in zip(tasks, demos):
        spans = _masked_spans(demo.loss_mask)
        assert [tokenizer.decode(demo.token_ids[start:end]) for start, end in spans] == [
            _tool_call("lookup", {"name": task["target"]}) + "<|im_end|>",
            _tool_call("answer", {"answer": task["answer"]}) + "<|im_end|>"]
        assert all(tokenizer.decode(demo.token_ids[:start]).endswith("<|im_start|>assistant\n")
                   for start, _ in spans)  # the header is the template's, not the model's
        context = tokenizer.decode([t for t, m in zip(demo.token_ids, demo.loss_mask) if not m])
        assert "<tools>" in context and f"<tool_response>\nAgent {task['target']} is stationed" in context
        assert [step.action_ids for step in demo.steps] == [demo.token_ids[start:end] for start, end in spans]
        assert demo.turn_index[spans[0][0] - 1] == -1 and demo.turn_index[spans[1][0] - 1] == 0


def test_the_tool_calling_demonstrations_replay_in_the_tool_calling_evaluator(monkeypatch, our_tokenizer,
                                                                               tool_calling_demos):
    """Each demonstrated turn, handed to `evaluate_tool_calling` as the model's turn, is parsed as TRL parses
    it, replays the expert's actions and succeeds; and the contexts the evaluator builds (by concatenating
    token ids, as TRL's loop does) are the demonstration's own tokens before each turn."""
    tasks, demos = tool_calling_demos
    spans = [_masked_spans(demo.loss_mask) for demo in demos]
    seen: list[list[list[int]]] = []

    def demonstrated(model, tokenizer, contexts, max_new_tokens):
        turn = len(seen)
        seen.append([list(c) for c in contexts])
        return [demo.token_ids[start:end] for demo, (start, end) in zip(demos, (s[turn] for s in spans))]

    monkeypatch.setattr(trl_eval, "_greedy_turns", demonstrated)
    result = evaluate_tool_calling(None, our_tokenizer, ENV, tasks, max_turns=3, max_completion_length=200)
    assert result["outcomes"] == [1] * len(tasks) and result["turns_with_tool_calls"] == 1.0
    assert len(seen) == 2  # the episode ends at the `answer` call
    for turn, contexts in enumerate(seen):
        assert contexts == [demo.token_ids[:s[turn][0]] for demo, s in zip(demos, spans)]


def test_demonstrations_in_both_formats_are_ours_then_trls(our_tokenizer):
    tasks = load_tasks(ENV, "train", 2)
    demos = sft.demonstrations(our_tokenizer, ENV, tasks, formats=("ours", "tool_calling"), max_turns=3)
    assert [d.task_id for d in demos] == [str(t["id"]) for t in tasks] * 2 and all(d.success for d in demos)
    texts = [our_tokenizer.decode(d.token_ids) for d in demos]
    assert ["<answer>" in t for t in texts] == [True, True, False, False]
    assert ["<tools>" in t for t in texts] == [False, False, True, True]
    with pytest.raises(ValueError, match="formats are: ours, tool_calling"):
        sft.demonstrations(our_tokenizer, ENV, tasks, formats=("trl",))


def test_the_warm_start_cache_keeps_its_key_for_our_format_and_keys_both_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_RUNS", str(tmp_path))
    trained = []

    def fake_warm_start(env, run_dir, **options):
        trained.append(options.get("formats"))
        run_dir.mkdir(parents=True)
        (run_dir / "config.json").write_text("{}")

    monkeypatch.setattr(sft, "warm_start", fake_warm_start)
    ours = sft.ensure_warm_start(ENV, steps=1)
    assert sft.ensure_warm_start(ENV, steps=1, formats=("ours",)) == ours  # cached before the option existed
    both = sft.ensure_warm_start(ENV, steps=1, formats=("ours", "tool_calling"))
    assert both != ours and trained == [None, ("ours", "tool_calling")]


def test_time_to_success_warm_starts_on_both_formats_unless_told(vs_trl):
    def formats(**args):
        return vs_trl.warm_start_formats(SimpleNamespace(**{"warm_start_formats": None, **args}))

    assert formats(time_to_success=0.8) == ("ours", "tool_calling")
    assert formats(time_to_success=None) == ("ours",)  # per-step comparison: TRL generates through our engine
    assert formats(time_to_success=0.8, warm_start_formats="ours") == ("ours",)


def test_the_notes_say_when_a_two_format_warm_start_is_weaker_in_trls_format(vs_trl):
    curve = [_point(0, 0.0, 1.0), _point(2, 20.0, 1.0)]
    result = {"target": 0.8, "ratio_ours_over_trl": None,
              "warm_start": {"steps": 12, "formats": ["ours", "tool_calling"], "success": 1.0,
                             "success_tool_calling": 0.25, "turns_with_tool_calls": 0.9},
              "ours": {"curve": curve}, "trl": {"curve": curve, "steps": 2, "steps_with_zero_reward": 0}}
    notes = vs_trl.time_to_success_notes(result)
    assert notes[0].startswith("warm start (12 steps on demonstrations in ours and tool_calling format), "
                               "held-out greedy success: 1.00 in our format")
    assert "learnt both formats, but the tool-calling one less well" in notes[1]


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
    assert result["warm_start"]["formats"] == []  # --warm-start-steps 0: the base model
    assert any(note.startswith("warm start (none, the base model), held-out greedy success")
               for note in result["notes"])
