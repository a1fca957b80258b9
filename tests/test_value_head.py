"""`course_lib.value_head`: where V(s_t) is read, the head on the real model's hidden states, and PPO's
clipped value loss. (The hand-computed clipping cases live in test_credit.py, through credit's re-export.)"""

from __future__ import annotations

import pytest
import torch
from conftest import make_trajectory

from course_lib.batching import collate, hidden_states
from course_lib.envs import load_tasks
from course_lib.rollout import expert_rollout
from course_lib.value_head import ValueHead, state_positions, value_loss


def test_state_positions_are_just_before_each_turns_first_sampled_token():
    # tokens: prompt 1 2 | turn 0: 5 6 | turn 1: 5 6 | turn 2: 5 6
    assert state_positions(make_trajectory(["A", "B", "C"])) == [1, 3, 5]
    with_observations = make_trajectory(["A", "B"], prompt_ids=(1, 2, 3))
    # turn 0's action, then three observation tokens of turn 0 (mask 0), then turn 1's action
    with_observations.token_ids = [1, 2, 3, 5, 6, 7, 8, 9, 5, 6]
    with_observations.loss_mask = [0, 0, 0, 1, 1, 0, 0, 0, 1, 1]
    with_observations.turn_index = [-1, -1, -1, 0, 0, 0, 0, 0, 1, 1]
    assert state_positions(with_observations) == [2, 7]


def test_a_turn_without_sampled_tokens_reads_position_0():
    trajectory = make_trajectory(["A", "B"])
    trajectory.loss_mask = [0, 0, 1, 1, 0, 0]  # turn 1 sampled nothing (say, cut by the context limit)
    assert state_positions(trajectory) == [1, 0]


def test_the_head_reads_the_real_models_hidden_state_at_each_state_position(policy, tokenizer):
    model, _ = policy
    demos = expert_rollout(tokenizer, "lookup", load_tasks("lookup", "train")[:2])
    batch = collate(demos)
    with torch.no_grad():
        hidden = hidden_states(model, batch, model.device)
    width = max(d.num_turns for d in demos) + 1  # one padding turn per row
    index = torch.full((len(demos), width), -1, dtype=torch.long)
    for i, d in enumerate(demos):
        index[i, : d.num_turns] = torch.tensor(state_positions(d))
    head = ValueHead(model.config.hidden_size).to(model.device)
    assert not head(hidden, index.to(model.device)).any()  # zero-initialised: V = 0 at first
    torch.manual_seed(0)
    with torch.no_grad():
        head.linear.weight.normal_(std=0.05)
        head.linear.bias.fill_(0.25)
    values = head(hidden, index.to(model.device))
    assert values.shape == (len(demos), width)
    for i, d in enumerate(demos):
        for k, p in enumerate(state_positions(d)):
            expected = hidden[i, p] @ head.linear.weight[0] + 0.25
            assert values[i, k].item() == pytest.approx(expected.item(), abs=1e-4)
        assert values[i, d.num_turns:].tolist() == [0.0] * (width - d.num_turns)
    real_turns = int((index >= 0).sum())
    assert len({round(v, 4) for v in values[index >= 0].tolist()}) == real_turns  # distinct states
    values.sum().backward()
    assert head.linear.weight.grad.abs().sum() > 0 and head.linear.bias.grad.item() == real_turns


def test_an_unclipped_value_loss_is_half_the_squared_error_over_real_turns():
    values = torch.tensor([[0.5, 2.0, 7.0]], requires_grad=True)
    old, returns = torch.tensor([[0.4, 1.9, 0.0]], requires_grad=True), torch.tensor([[1.0, 0.0, 3.0]])
    mask = torch.tensor([[1, 1, 0]])
    loss = value_loss(values, old, returns, clip=100.0, mask=mask)
    assert loss.item() == pytest.approx(0.5 * (0.25 + 4.0) / 2)
    loss.backward()
    assert values.grad[0].tolist() == pytest.approx([(0.5 - 1.0) / 2, 2.0 / 2, 0.0])
    assert old.grad is None  # the values that produced the advantages are a constant of the loss
    assert value_loss(values, old, returns, clip=100.0).item() == pytest.approx(0.5 * (0.25 + 4.0 + 16.0) / 3)


def test_the_clip_bounds_what_a_step_gains_by_moving_v_far():
    returns, old = torch.tensor([1.0]), torch.tensor([0.0])
    near, far = value_loss(torch.tensor([0.8]), old, returns), value_loss(torch.tensor([1.0]), old, returns)
    # moved 1.0 from V_old towards R: the clipped value 0.2 still misses R by 0.8, so nothing is gained
    assert far.item() == pytest.approx(0.5 * 0.8**2) and near.item() == pytest.approx(far.item())
