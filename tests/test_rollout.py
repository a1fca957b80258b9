"""Rollouts of the real embedded model: the loss mask is exact, token-in/token-out, batched = sequential."""


import pytest
import torch
from conftest import logprob_atol

from course_lib.envs import load_tasks
from course_lib.envs.base import Environment, StepResult
from course_lib.losses import token_logprobs
from course_lib.models import autocast_context
from course_lib.protocol import Tool, format_answer, format_tool_call
from course_lib.rollout import expert_rollout, rollout
from course_lib.trajectory import render

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
    assert [[s.action_ids for s in t.steps]
            for t in batched] == [[s.action_ids for s in t.steps] for t in single]


def test_e_same_seed_same_trajectories(policy):
    model, tok = policy
    kwargs = dict(group_size=2, max_turns=2, max_new_tokens=24, temperature=1.0, progress=False)
    a = _trajs(rollout(model, tok, "lookup", TASKS[:2], seed=3, **kwargs))
    b = _trajs(rollout(model, tok, "lookup", TASKS[:2], seed=3, **kwargs))
    c = _trajs(rollout(model, tok, "lookup", TASKS[:2], seed=4, **kwargs))
    assert [t.token_ids for t in a] == [t.token_ids for t in b]
    assert [t.logprobs for t in a] == [t.logprobs for t in b]
    assert [t.token_ids for t in a] != [t.token_ids for t in c]


def test_f_rollouts_over_max_batch_play_whole_groups_in_batches(policy, monkeypatch):
    """3 tasks x group 2 with max_batch=4: two tasks play, then the third; no turn decodes more than 4
    rows, the groups come back in task order, and the first batch is exactly the rollout of its tasks."""
    from course_lib import kv_cache

    model, tok = policy
    rows, real = [], kv_cache.generate_turn

    def counting(model, tokenizer, contexts, **kwargs):
        rows.append(len(contexts))
        return real(model, tokenizer, contexts, **kwargs)

    monkeypatch.setattr(kv_cache, "generate_turn", counting)
    kwargs = dict(group_size=2, max_turns=2, max_new_tokens=16, temperature=1.0, seed=5, progress=False)
    groups = rollout(model, tok, "lookup", TASKS, max_batch=4, **kwargs)
    assert rows and max(rows) <= 4 and rows[0] == 4
    assert [g.task_id for g in groups] == [str(t["id"]) for t in TASKS]
    assert [len(g) for g in groups] == [2, 2, 2]
    first = rollout(model, tok, "lookup", TASKS[:2], max_batch=None, **kwargs)
    assert [t.token_ids for t in _trajs(groups[:2])] == [t.token_ids for t in _trajs(first)]


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




class _Echo(Environment):
    """Every action but an answer gets `observation` back (even a malformed one), with a
    step reward of 0.25."""

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
    traj = _trajs(rollout(model, tok, _Echo, [{"id": 0}], group_size=1, max_turns=4,
                          max_new_tokens=max_new_tokens,
                          temperature=1.0, seed=0, max_context=max_context, progress=False))[0]
    # The first observation fits and is appended; the second would not leave room for a turn.
    assert traj.num_turns == 2 and traj.info["context_limit"] and not traj.info["turn_limit"]
    for k in range(traj.num_turns):
        context = next(i
                       for i, (m, turn) in enumerate(zip(traj.loss_mask, traj.turn_index)) if m and turn == k)
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
    (group,) = rollout(model, tok, Graded, [{"id": 0}], group_size=1, max_turns=4, max_new_tokens=4,
                       max_context=400, progress=False)
    (traj,) = group.trajectories
    assert traj.info["context_limit"] and traj.info["graded"]


def test_a_first_prompt_over_max_context_is_an_error(tokenizer):
    with pytest.raises(ValueError, match="raise max_context"):
        rollout(None, tokenizer, _Echo, [{"id": 0}], group_size=1, max_new_tokens=4,
                max_context=50, progress=False)


def test_expert_steps_keep_the_environment_step_reward_and_the_final_reward_once(tokenizer):
    demo = expert_rollout(tokenizer, _Echo, [{"id": 0}])[0]
    assert [s.reward for s in demo.steps] == [0.25, 0.0] and demo.reward == 0.0






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
