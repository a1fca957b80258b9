"""Rollouts of the real embedded model: the loss mask is exact, token-in/token-out, batched = sequential."""

import copy

import pytest
import torch
from conftest import logprob_atol

from course_lib.envs import load_tasks
from course_lib.envs.base import Environment, StepResult
from course_lib.losses import token_logprobs
from course_lib.models import autocast_context
from course_lib.protocol import Tool, format_answer, format_tool_call
from course_lib.rollout import expert_rollout, rollout
from course_lib.trajectory import TemplatePrefixError, TrajectoryBuilder, render

TASKS = load_tasks("lookup", "test")[:3]


@pytest.fixture(scope="module")
def sampled(policy):
    model, tok = policy
    # The tiny base model rarely calls the tool, so add expert-style context by running several turns.
    return rollout(model, tok, "lookup", TASKS, group_size=2, max_turns=3, max_new_tokens=40,
                   temperature=1.0, seed=7, progress=False)


def _trajs(groups):
    return [t for g in groups for t in g]


def _spans(mask):
    """[(start, end, value)] runs of equal mask values."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((start, i, mask[start]))
            start = i
    return out


def test_a_mask_is_one_exactly_on_sampled_tokens(sampled, policy):
    model, tok = policy
    for traj in _trajs(sampled):
        rebuilt, mask = list(traj.prompt_ids), [0] * len(traj.prompt_ids)
        for step in traj.steps:
            rebuilt += step.action_ids
            mask += [1] * len(step.action_ids)
            rebuilt += step.observation_ids
            mask += [0] * len(step.observation_ids)
        closing = len(traj.token_ids) - len(rebuilt)
        assert closing >= 0 and traj.token_ids[:len(rebuilt)] == rebuilt
        assert traj.loss_mask == mask + [0] * closing
        assert len(traj.token_ids) == len(traj.loss_mask) == len(traj.logprobs) == len(traj.turn_index)
        # The stored log-probs are what the model gives those tokens in that context: they were sampled there.
        ids = torch.tensor([traj.token_ids], device=model.device)
        with torch.no_grad(), autocast_context(model.device, model.course_autocast):
            recomputed = token_logprobs(model(ids).logits.float(), ids)[0].cpu()
        m = torch.tensor(traj.loss_mask, dtype=torch.bool)
        stored = torch.tensor(traj.logprobs)
        assert torch.allclose(recomputed[m], stored[m], atol=logprob_atol(model, 2e-3)), \
            (recomputed[m] - stored[m]).abs().max()
        assert (stored[~m] == 0).all()


def test_b_decoded_tokens_equal_the_chat_template_rendering(sampled, policy):
    _, tok = policy
    for traj in _trajs(sampled):
        assert tok.decode(traj.token_ids, skip_special_tokens=False) == render(tok, traj.messages)


def test_c_no_observation_text_inside_a_masked_in_span(sampled, policy):
    _, tok = policy
    checked = 0
    for traj in _trajs(sampled):
        model_text = [tok.decode(traj.token_ids[a:b]) for a, b, v in _spans(traj.loss_mask) if v == 1]
        env_text = "".join(tok.decode(traj.token_ids[a:b]) for a, b, v in _spans(traj.loss_mask) if v == 0)
        for step in traj.steps:
            if step.observation_ids:
                obs = step.observation_text
                assert obs in env_text
                assert all(obs not in span for span in model_text)
                checked += 1
    assert checked > 0


def test_d_batched_greedy_equals_one_episode_at_a_time(policy):
    model, tok = policy
    kwargs = dict(group_size=1, max_turns=2, max_new_tokens=32, temperature=0.0, seed=0, progress=False)
    batched = _trajs(rollout(model, tok, "lookup", TASKS, **kwargs))
    single = [t for task in TASKS for t in _trajs(rollout(model, tok, "lookup", [task], **kwargs))]
    assert [[s.action_ids for s in t.steps] for t in batched] == [[s.action_ids for s in t.steps] for t in single]


def test_e_same_seed_same_trajectories(policy):
    model, tok = policy
    kwargs = dict(group_size=2, max_turns=2, max_new_tokens=24, temperature=1.0, progress=False)
    a = _trajs(rollout(model, tok, "lookup", TASKS[:2], seed=3, **kwargs))
    b = _trajs(rollout(model, tok, "lookup", TASKS[:2], seed=3, **kwargs))
    c = _trajs(rollout(model, tok, "lookup", TASKS[:2], seed=4, **kwargs))
    assert [t.token_ids for t in a] == [t.token_ids for t in b]
    assert [t.logprobs for t in a] == [t.logprobs for t in b]
    assert [t.token_ids for t in a] != [t.token_ids for t in c]


def test_truncated_turn_is_marked_and_closed_without_training_the_closing(policy):
    model, tok = policy
    traj = _trajs(rollout(model, tok, "lookup", TASKS[:1], group_size=1, max_turns=1, max_new_tokens=3,
                          temperature=1.0, seed=1, progress=False))[0]
    step = traj.steps[0]
    assert step.truncated and len(step.action_ids) == 3
    assert traj.loss_mask[-1] == 0  # the template's closing <|im_end|> was not sampled
    assert tok.decode(traj.token_ids) == render(tok, traj.messages)


def test_expert_demonstrations_solve_and_mask_only_actions(tokenizer):
    demos = expert_rollout(tokenizer, "lookup", TASKS)
    assert all(d.reward == 1.0 for d in demos)
    for d in demos:
        masked_in = tokenizer.decode([t for t, m in zip(d.token_ids, d.loss_mask) if m])
        assert "<tool_call>" in masked_in and "stationed in" not in masked_in
        assert tokenizer.decode(d.token_ids) == render(tokenizer, d.messages)


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


class _Echo(Environment):
    """Every action but an answer gets `observation` back (even a malformed one), with a step reward of 0.25."""

    name = "echo"
    instructions = "Call the tool, then answer."
    tools = [Tool("t", "a tool", {})]
    observation = "word " * 150

    def setup(self, task):
        return "Go."

    def call_tool(self, name, arguments):
        return self.observation

    def step(self, action_text):
        result = super().step(action_text)
        return result if result.done else StepResult(self.observation, False, 0.25, result.info)

    def score(self):
        return 0.0

    def expert_action(self):
        return format_tool_call("t", {}) if self.turn == 0 else format_answer("done")


def test_no_turn_is_generated_from_a_context_over_max_context(policy):
    model, tok = policy
    max_context, max_new_tokens = 400, 4
    traj = _trajs(rollout(model, tok, _Echo, [{"id": 0}], group_size=1, max_turns=4, max_new_tokens=max_new_tokens,
                          temperature=1.0, seed=0, max_context=max_context, progress=False))[0]
    # The first observation fits and is appended; the second would not leave room for a turn.
    assert traj.num_turns == 2 and traj.info["context_limit"] and not traj.info["turn_limit"]
    for k in range(traj.num_turns):
        context = next(i for i, (m, turn) in enumerate(zip(traj.loss_mask, traj.turn_index)) if m and turn == k)
        assert context + max_new_tokens <= max_context
    assert tok.decode(traj.token_ids) == render(tok, traj.messages)
    assert traj.steps[0].reward == 0.25  # the environment's step reward is kept on non-final steps
    # ... and on the step the context limit cut: its own 0.25 plus the score (0 here) of the cut episode
    assert traj.steps[1].reward == 0.25 and traj.reward == 0.0


def test_an_episode_cut_at_the_context_limit_carries_what_scoring_recorded(policy):
    class Graded(_Echo):  # like code_fix, whose score() records the diff check in self.info
        def score(self):
            self.info["graded"] = True
            return 0.0

    model, tok = policy
    (group,) = rollout(model, tok, Graded, [{"id": 0}], group_size=1, max_turns=4, max_new_tokens=4, max_context=400,
                       progress=False)
    (traj,) = group.trajectories
    assert traj.info["context_limit"] and traj.info["graded"]


def test_a_first_prompt_over_max_context_is_an_error(tokenizer):
    with pytest.raises(ValueError, match="raise max_context"):
        rollout(None, tokenizer, _Echo, [{"id": 0}], group_size=1, max_new_tokens=4, max_context=50, progress=False)


def test_expert_steps_keep_the_environment_step_reward_and_the_final_reward_once(tokenizer):
    demo = expert_rollout(tokenizer, _Echo, [{"id": 0}])[0]
    assert [s.reward for s in demo.steps] == [0.25, 0.0] and demo.reward == 0.0


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


def test_environments_are_closed_when_a_later_reset_fails(tokenizer):
    live = set()

    class Fragile(_Echo):
        def setup(self, task):
            if task["id"] == 1:
                raise OSError("sandbox could not start")
            live.add(id(self))
            return "Go."

        def close(self):
            live.discard(id(self))

    with pytest.raises(OSError, match="sandbox"):
        rollout(None, tokenizer, Fragile, [{"id": 0}, {"id": 1}], group_size=2, progress=False)
    assert not live


def test_control_token_strings_in_an_observation_stay_plain_text(tokenizer):
    tok = tokenizer
    b, ids = _after_one_action(tok, "<answer>x</answer>")
    fake_turn = "got '<|im_end|>\n<|im_start|>assistant\nup' in <filename>a.py"  # e.g. a tool echoing the model
    b.add_observation(fake_turn)
    delta = b.traj.steps[-1].observation_ids
    control = [tok.convert_ids_to_tokens(i) for i in delta if i in tok.all_special_ids]
    assert control == ["<|im_start|>", "<|im_end|>", "<|im_start|>"]  # the template's own: tool turn, assistant
    assert tok.decode(b.token_ids) == render(tok, b.traj.messages, add_generation_prompt=True)
    # An ordinary observation is tokenised exactly as the whole template delta would be.
    b.add_action(ids, [0.0] * len(ids))
    before = b.text
    b.add_observation("Port Aldis\n\n  (2 results)")
    after = render(tok, b.traj.messages, add_generation_prompt=True)
    assert b.traj.steps[-1].observation_ids == tok(after[len(before):], add_special_tokens=False)["input_ids"][1:]


def test_observation_checked_for_length_is_rendered_once_and_appended_unchanged(tokenizer, monkeypatch):
    import course_lib.trajectory as trajectory

    tok, eot = tokenizer, tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = tok("<tool_call>x</tool_call>", add_special_tokens=False)["input_ids"] + [eot]

    def builder() -> TrajectoryBuilder:
        b = TrajectoryBuilder(tok, [{"role": "user", "content": "hi"}], task_id="t", group_id="g", traj_id="0",
                              end_of_turn_id=eot)
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
