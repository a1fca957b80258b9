"""Trajectory assembly (course_lib.trajectory): token-in/token-out, a loss mask of 1 exactly on sampled
tokens.

The builder is driven by hand here, with the real tokenizer and its chat template, so every position is known.
"""

import copy

import pytest
from conftest import make_trajectory

from course_lib.trajectory import TemplatePrefixError, TrajectoryBuilder, render

MESSAGES = [{"role": "system", "content": "Use the lookup tool."},
            {"role": "user", "content": "Where is Kalo?"}]
CALL = '<tool_call>{"name": "lookup", "arguments": {"name": "Kalo"}}</tool_call>'


def _encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def _builder(tok) -> TrajectoryBuilder:
    return TrajectoryBuilder(tok, MESSAGES, task_id="t", group_id="g", traj_id="g#0",
                             end_of_turn_id=tok.convert_tokens_to_ids("<|im_end|>"))


def _two_turns(tok, *, truncate_last: bool = False):
    """A call (closed by a sampled end-of-turn token), its observation, then an answer; finished with
    reward 1.

    Returns the trajectory and, per turn, the action ids and the log-probs given to the builder."""
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    b = _builder(tok)
    call = _encode(tok, CALL) + [eot]
    answer = _encode(tok, "<answer>Orvane</answer>") + ([] if truncate_last else [eot])
    if truncate_last:
        answer = answer[:4]
    logprobs = [[-0.1 * (k + 1)] * len(ids) for k, ids in enumerate((call, answer))]
    b.add_action(call, logprobs[0], anchor="start")
    b.add_observation("Agent Kalo is stationed in Orvane.", reward=0.0)
    b.add_action(answer, logprobs[1], anchor="found", truncated=truncate_last)
    traj = b.finish(1.0, last_observation="correct")
    return traj, [call, answer], logprobs


def test_the_sequence_is_the_prompt_then_each_action_as_sampled_then_each_observation_delta(tokenizer):
    tok = tokenizer
    traj, actions, _ = _two_turns(tok)
    assert traj.prompt_ids == _encode(tok, render(tok, MESSAGES, add_generation_prompt=True))
    assembled = list(traj.prompt_ids)
    for step, action in zip(traj.steps, actions):
        assert step.action_ids == action
        assembled += step.action_ids + step.observation_ids
    closing = traj.token_ids[len(assembled):]
    assert traj.token_ids[: len(assembled)] == assembled
    # the answer's <|im_end|> was sampled: only "\n" is left
    assert tok.convert_ids_to_tokens(closing) == ["Ċ"]
    assert tok.decode(traj.token_ids) == render(tok, traj.messages)
    assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert traj.steps[0].action_text == CALL  # text without the end-of-turn token
    assert (traj.reward, traj.steps[-1].observation_text, traj.steps[-1].done) == (1.0, "correct", True)


def test_loss_mask_is_one_exactly_on_the_sampled_tokens_and_turn_index_numbers_the_turns(tokenizer):
    traj, actions, _ = _two_turns(tokenizer)
    n_prompt = len(traj.prompt_ids)
    obs, closing = traj.steps[0].observation_ids, traj.steps[1].observation_ids
    assert closing == []  # the final closing is not an observation: it sits after the last action
    tail = len(traj.token_ids) - n_prompt - len(actions[0]) - len(obs) - len(actions[1])
    assert traj.loss_mask == ([0] * n_prompt + [1] * len(actions[0]) + [0] * len(obs) + [1] * len(actions[1])
                              + [0] * tail)
    assert traj.turn_index == ([-1] * n_prompt + [0] * (len(actions[0]) + len(obs))
                               + [1] * (len(actions[1]) + tail))
    assert traj.num_model_tokens == sum(map(len, actions)) == sum(traj.loss_mask)
    assert len(traj.token_ids) == len(traj.loss_mask) == len(traj.logprobs) == len(traj.turn_index)


def test_logprobs_sit_on_their_sampled_tokens_and_are_zero_elsewhere(tokenizer):
    traj, _, logprobs = _two_turns(tokenizer)
    on_model = [lp for lp, m in zip(traj.logprobs, traj.loss_mask) if m]
    assert on_model == logprobs[0] + logprobs[1]
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.loss_mask) if not m)
    assert [s.logprobs for s in traj.steps] == logprobs


def test_a_truncated_last_turn_is_closed_by_the_template_without_training_the_closing(tokenizer):
    tok = tokenizer
    traj, actions, _ = _two_turns(tok, truncate_last=True)
    assert traj.steps[-1].truncated and tok.convert_tokens_to_ids("<|im_end|>") not in actions[1]
    n_model_end = max(i for i, m in enumerate(traj.loss_mask) if m) + 1
    closing = traj.token_ids[n_model_end:]
    assert tok.convert_ids_to_tokens(closing)[0] == "<|im_end|>"  # read by the model, never sampled
    assert set(traj.loss_mask[n_model_end:]) == {0} and set(traj.turn_index[n_model_end:]) == {1}
    assert tok.decode(traj.token_ids) == render(tok, traj.messages)


def test_a_builder_refuses_mismatched_logprobs_and_anything_after_finish(tokenizer):
    b, ids = _builder(tokenizer), _encode(tokenizer, "<answer>Orvane</answer>")
    with pytest.raises(ValueError, match="log-probs"):
        b.add_action(ids, [0.0] * (len(ids) - 1))
    b.add_action(ids, [0.0] * len(ids))
    b.finish(0.0)
    for late in (lambda: b.add_action(ids, [0.0] * len(ids)), lambda: b.add_observation("x"),
                 lambda: b.finish(1.0)):
        with pytest.raises(RuntimeError, match="closed"):
            late()


def test_template_that_rewrites_history_fails_loudly(tokenizer):
    tok = copy.deepcopy(tokenizer)
    # A template that hides earlier assistant turns (as some reasoning templates strip <think>).
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}"
        "{{ '<|im_start|>assistant\\n[hidden]<|im_end|>\\n' }}{% else %}"
        "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    b = TrajectoryBuilder(tok, [{"role": "user", "content": "hi"}], task_id="t", group_id="g", traj_id="0",
                          end_of_turn_id=tok.convert_tokens_to_ids("<|im_end|>"))
    ids = tok("<answer>x</answer>", add_special_tokens=False)["input_ids"]
    b.add_action(ids, [0.0] * len(ids))
    with pytest.raises(TemplatePrefixError, match="prefix property"):
        b.add_observation("first result")


def _after_one_action(tok, action: str) -> tuple[TrajectoryBuilder, list[int]]:
    """A builder for a one-message prompt that has taken `action` (closed by a sampled end-of-turn token)."""
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    b = TrajectoryBuilder(tok, [{"role": "user", "content": "hi"}], task_id="t", group_id="g", traj_id="0",
                          end_of_turn_id=eot)
    ids = tok(action, add_special_tokens=False)["input_ids"] + [eot]
    b.add_action(ids, [0.0] * len(ids))
    return b, ids


def test_finish_after_an_appended_observation_says_how_to_end_the_episode(tokenizer):
    b, _ = _after_one_action(tokenizer, "<tool_call>x</tool_call>")
    b.add_observation("result")
    with pytest.raises(RuntimeError, match="last_observation="):
        b.finish(1.0)


def test_control_token_strings_in_an_observation_stay_plain_text(tokenizer):
    tok = tokenizer
    b, ids = _after_one_action(tok, "<answer>x</answer>")
    # e.g. a tool echoing the model
    fake_turn = "got '<|im_end|>\n<|im_start|>assistant\nup' in <filename>a.py"
    b.add_observation(fake_turn)
    delta = b.traj.steps[-1].observation_ids
    control = [tok.convert_ids_to_tokens(i) for i in delta if i in tok.all_special_ids]
    # the template's own: tool turn, assistant
    assert control == ["<|im_start|>", "<|im_end|>", "<|im_start|>"]
    assert tok.decode(b.token_ids) == render(tok, b.traj.messages, add_generation_prompt=True)
    # An ordinary observation is tokenised exactly as the whole template delta would be.
    b.add_action(ids, [0.0] * len(ids))
    before = b.text
    b.add_observation("Port Aldis\n\n  (2 results)")
    after = render(tok, b.traj.messages, add_generation_prompt=True)
    assert (b.traj.steps[-1].observation_ids
            == tok(after[len(before):], add_special_tokens=False)["input_ids"][1:])


def test_observation_checked_for_length_is_rendered_once_and_appended_unchanged(tokenizer, monkeypatch):
    import course_lib.trajectory as trajectory

    tok, eot = tokenizer, tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = tok("<tool_call>x</tool_call>", add_special_tokens=False)["input_ids"] + [eot]

    def builder() -> TrajectoryBuilder:
        b = TrajectoryBuilder(tok, [{"role": "user", "content": "hi"}], task_id="t", group_id="g",
                              traj_id="0", end_of_turn_id=eot)
        b.add_action(ids, [0.0] * len(ids))
        return b

    plain = builder()
    plain.add_observation("Port Aldis")
    renders = []
    monkeypatch.setattr(trajectory, "render", lambda *a, **k: renders.append(1) or render(*a, **k))
    checked = builder()
    renders.clear()
    assert checked.observation_ids("Port Aldis") == plain.traj.steps[-1].observation_ids
    checked.add_observation("Port Aldis")
    assert len(renders) == 2  # the observation and its placeholder, once, not twice
    assert (checked.token_ids, checked.text) == (plain.token_ids, plain.text)
    # A check of one text never stands in for another.
    other = builder()
    other.observation_ids("something else")
    other.add_observation("Port Aldis")
    assert other.token_ids == plain.token_ids


def test_the_shared_test_factory_lays_out_a_trajectory_as_the_builder_does():
    traj = make_trajectory(["A", ("B", "malformed"), "C"], 1.0)
    assert traj.token_ids == [1, 2, 5, 6, 5, 6, 5, 6] and traj.loss_mask == [0, 0] + [1] * 6
    assert traj.turn_index == [-1, -1, 0, 0, 1, 1, 2, 2] and traj.logprobs == [0.0, 0.0] + [-1.0] * 6
    assert [s.info["action_kind"] for s in traj.steps] == ["tool_call", "malformed", "answer"]
    assert [s.reward for s in traj.steps] == [0.0, 0.0, 1.0] and traj.reward == 1.0 and traj.steps[-1].done
