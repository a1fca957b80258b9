"""Tests for course_lib.credit: every expected number is computed by hand in the comments."""

from __future__ import annotations

import math
import statistics
from difflib import SequenceMatcher

import pytest
import torch
from conftest import make_trajectory

from course_lib import credit
from course_lib.credit import (
    CreditInputs,
    CreditResult,
    advantages,
    broadcast_to_tokens,
    discounted_returns,
    gae,
    gigpo_advantages,
    groups_to_train,
    outcome_advantages,
    step_group_ids,
    step_group_sizes,
    to_tokens,
    turn_advantages,
)
from course_lib.rewards import process_reward
from course_lib.trajectory import Step
from course_lib.value_head import ValueHead, value_loss


def approx(values, abs=1e-6):
    return pytest.approx(values, abs=abs)


# ---------------------------------------------------------------------------------------------------------
# outcome_advantages
# ---------------------------------------------------------------------------------------------------------


def test_outcome_group_normalised_by_hand():
    # group "a": rewards 1, 0, 0, 1 -> mean 0.5, unbiased std sqrt(1/3)
    adv = outcome_advantages([1.0, 0.0, 0.0, 1.0], ["a", "a", "a", "a"], eps=0.0)
    s = math.sqrt(1 / 3)
    assert adv.tolist() == approx([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s])


def test_outcome_eps_is_added_to_the_std():
    adv = outcome_advantages([1.0, 0.0], [0, 0])  # mean 0.5, std sqrt(0.5)
    assert adv.tolist() == approx([0.5 / (math.sqrt(0.5) + 1e-4), -0.5 / (math.sqrt(0.5) + 1e-4)])


def test_outcome_group_of_one_and_equal_rewards_get_zero():
    adv = outcome_advantages([0.3, 0.3, 0.3, 7.0, 1.0, 0.0], ["eq", "eq", "eq", "solo", "x", "x"])
    assert adv[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert adv[4] > 0 > adv[5]


def test_outcome_scale_none_and_groups_never_mix():
    adv = outcome_advantages([1.0, 2.0, 3.0, 10.0, 20.0], [0, 0, 0, 1, 1], scale="none")
    assert adv.tolist() == approx([-1.0, 0.0, 1.0, -5.0, 5.0])


def test_outcome_keeps_float64_and_rejects_bad_input():
    adv = outcome_advantages(torch.tensor([0.0, 1.0], dtype=torch.float64), [0, 0])
    assert adv.dtype == torch.float64
    with pytest.raises(ValueError, match="scale"):
        outcome_advantages([0.0, 1.0], [0, 0], scale="batch")
    with pytest.raises(ValueError, match="one group id per value"):
        outcome_advantages([0.0, 1.0], [0])


# ---------------------------------------------------------------------------------------------------------
# GiGPO
# ---------------------------------------------------------------------------------------------------------


def test_discounted_returns_by_hand():
    # trajectory a: rewards 0, 0, 1 with γ = 0.5 -> 0.25, 0.5, 1; trajectory b: 2, 0 -> 2, 0
    returns = discounted_returns([0.0, 0.0, 2.0, 1.0, 0.0], ["a", "a", "b", "a", "b"], gamma=0.5)
    assert returns.tolist() == approx([0.25, 0.5, 2.0, 1.0, 0.0])


def test_gigpo_without_repeated_states_equals_episode_grpo():
    # two groups, each anchor seen once: A_S = 0 everywhere, A = A_E(τ) = outcome advantage of R(τ)
    rewards = [0.0, 1.0, 0.0, 0.0, 0.5, 0.0, 2.0]
    anchors = ["s0", "s1", "s2", "s3", "s4", "t0", "t1"]
    groups = ["g", "g", "g", "g", "g", "h", "h"]
    trajs = [0, 0, 1, 1, 2, 3, 4]
    adv = gigpo_advantages(rewards, anchors, groups, trajs)
    episode = outcome_advantages([1.0, 0.0, 0.5, 0.0, 2.0], ["g", "g", "g", "h", "h"], eps=1e-6).tolist()
    assert adv.tolist() == approx(
        [episode[0], episode[0], episode[1], episode[1], episode[2], episode[3], episode[4]]
    )


def test_gigpo_singleton_step_groups_get_zero_step_advantage():
    # one trajectory per group -> A_E = 0; every anchor unique -> A_S = 0
    adv = gigpo_advantages([1.0, 0.0, 3.0], ["a", "b", "c"], [0, 0, 1], [0, 0, 1])
    assert adv.tolist() == [0.0, 0.0, 0.0]


def test_gigpo_step_groups_by_hand_with_gamma_and_omega():
    # group g, two trajectories; both pass through anchor "x".
    #   τ0: rows (x, r=0), (y, r=1)        R = 1;   G = 0 + γ·1, 1
    #   τ1: rows (x, r=0), (z, r=0)        R = 0;   G = 0, 0
    # episode: R = (1, 0) -> A_E = ±0.5 / sqrt(0.5) (scale none: ±0.5)
    # step group x = {G(τ0,x) = γ, G(τ1,x) = 0} -> A_S = ±γ/2 (scale none); y, z singletons -> 0
    gamma, omega = 0.9, 0.5
    adv = gigpo_advantages(
        [0.0, 1.0, 0.0, 0.0],
        ["x", "y", "x", "z"],
        ["g"] * 4,
        [0, 0, 1, 1],
        gamma=gamma,
        omega=omega,
        scale="none",
    )
    assert adv.tolist() == approx([0.5 + omega * gamma / 2, 0.5, -0.5 - omega * gamma / 2, -0.5])
    # the same with the std: episode std sqrt(0.5); step group std sqrt(γ²/2)
    adv = gigpo_advantages(
        [0.0, 1.0, 0.0, 0.0], ["x", "y", "x", "z"], ["g"] * 4, [0, 0, 1, 1], gamma=gamma, omega=omega
    )
    e = 0.5 / (math.sqrt(0.5) + 1e-6)
    s = (gamma / 2) / (math.sqrt(gamma**2 / 2) + 1e-6)
    assert adv.tolist() == approx([e + omega * s, e, -e - omega * s, -e])


def test_gigpo_gamma_changes_step_returns():
    # the step group {x in τ0, x in τ1} compares G = γ² (goal two steps later) against G = γ (one step)
    rewards = [0.0, 0.0, 1.0, 0.0, 1.0]
    anchors = ["x", "y", "goal", "x", "goal"]
    trajs = [0, 0, 0, 1, 1]
    for gamma in (0.5, 0.9):
        adv = gigpo_advantages(rewards, anchors, ["g"] * 5, trajs, gamma=gamma, scale="none")
        # equal R = 1 -> A_E = 0; x: mean (γ² + γ)/2; goal rows: G = 1 and 1 -> 0
        assert adv[0].item() == approx((gamma**2 - gamma) / 2)
        assert adv[3].item() == approx((gamma - gamma**2) / 2)
        assert adv[2].item() == 0.0 and adv[4].item() == 0.0


def test_gigpo_revisited_state_gives_several_members():
    # τ0 visits x twice (at t=0 and t=2), τ1 visits x once: the step group of x has 3 members
    #   τ0: x r=0, y r=0, x r=1 -> with γ = 1: G = 1, 1, 1;  τ1: x r=0, z r=0 -> G = 0, 0
    anchors = ["x", "y", "x", "x", "z"]
    groups = ["g"] * 5
    assert step_group_ids(anchors, groups) == [0, 1, 0, 0, 2]
    assert step_group_sizes(anchors, groups) == [3, 1, 1]
    adv = gigpo_advantages(
        [0.0, 0.0, 1.0, 0.0, 0.0], anchors, groups, [0, 0, 0, 1, 1], gamma=1.0, scale="none"
    )
    # A_E = ±0.5; x group G = (1, 1, 0): mean 2/3 -> A_S = 1/3, 1/3, −2/3
    assert adv.tolist() == approx([0.5 + 1 / 3, 0.5, 0.5 + 1 / 3, -0.5 - 2 / 3, -0.5])


def test_gigpo_different_groups_never_mix():
    # the same anchor "x" in two groups: two step groups of one row each -> A_S = 0
    assert step_group_ids(["x", "x"], ["g", "h"]) == [0, 1]
    adv = gigpo_advantages([1.0, 0.0], ["x", "x"], ["g", "h"], [0, 1])
    assert adv.tolist() == [0.0, 0.0]


def test_gigpo_trajectory_ids_may_repeat_across_groups():
    # traj id 0 in both groups: the trajectories stay apart (keyed by group and id)
    adv = gigpo_advantages(
        [1.0, 0.0, 5.0, 5.0], ["a", "b", "c", "d"], ["g", "g", "h", "h"], [0, 1, 0, 1], scale="none"
    )
    assert adv.tolist() == approx([0.5, -0.5, 0.0, 0.0])


def test_gigpo_similarity_merges_near_identical_strings_only():
    page = "Results for 'river delta': 1. Mekong delta, 2. Nile delta, 3. Ganges delta"
    near = page.replace("Results", "Result")  # ratio ≈ 0.99
    other = "Error: no such tool"
    anchors = [page, other, near]
    groups = ["g"] * 3
    assert step_group_ids(anchors, groups) == [0, 1, 2]  # exact mode keeps them apart
    assert step_group_ids(anchors, groups, similarity=0.9) == [0, 1, 0]
    # near-identical anchors in another group do not join
    assert step_group_ids([page, near], ["g", "h"], similarity=0.9) == [0, 1]
    # the merge changes the advantages: rows 0 and 2 now compare their returns
    adv = gigpo_advantages(
        [1.0, 0.0, 0.0], anchors, groups, [0, 1, 2], scale="none", similarity=0.9, gamma=1.0
    )
    exact = gigpo_advantages([1.0, 0.0, 0.0], anchors, groups, [0, 1, 2], scale="none", gamma=1.0)
    assert adv[0].item() == approx(exact[0].item() + 0.5)
    assert adv[2].item() == approx(exact[2].item() - 0.5)


def test_gigpo_similarity_joins_the_first_matching_group():
    # greedy in row order against each step group's first member
    a, b = "abcdefghij", "abcdefghiX"  # ratio 0.9
    c = "abcdefghXY"  # ratio to a: 0.8, to b: 0.9
    assert step_group_ids([a, b, c], [0, 0, 0], similarity=0.9) == [0, 0, 1]
    assert step_group_ids([b, a, c], [0, 0, 0], similarity=0.9) == [0, 0, 0]


def test_gigpo_similarity_compares_the_new_anchor_against_the_first_as_verl_agent_does():
    # Over 200 characters difflib's ratio depends on the order; a page with one word changed:
    page = ("river is born city is the to result page is city born river to page in title city city a "
            "result and to and born of title born to city result wiki born title city and to of wiki of city "
            "river search in page result of in is in title search city a result page page river result to")
    near = page.replace("city is the to", "city is born to")
    assert SequenceMatcher(None, near, page).ratio() > 0.98 > 0.2 > SequenceMatcher(None, page, near).ratio()
    assert step_group_ids([page, near], [0, 0], similarity=0.9) == [0, 0]


def test_gigpo_checks_lengths():
    with pytest.raises(ValueError, match="one entry per row"):
        gigpo_advantages([1.0], ["a", "b"], [0, 0], [0, 0])


# ---------------------------------------------------------------------------------------------------------
# turn_advantages and broadcast_to_tokens
# ---------------------------------------------------------------------------------------------------------


def test_turn_advantages_by_hand():
    # one group, two trajectories of two turns; outcome R = 1 vs 0 -> A_O = ±0.5 (scale none)
    # turn rewards τ0: 1, 0 ; τ1: 0, 1 ; γ = 1 -> G τ0: 1, 0 ; τ1: 1, 1
    # turn 0 compares 1 vs 1 -> 0, 0 ; turn 1 compares 0 vs 1 -> −0.5, +0.5
    adv = turn_advantages(
        [1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0], ["g"] * 4, [0, 0, 1, 1], weight=0.5, scale="none"
    )
    assert adv.tolist() == approx([0.5, 0.5 - 0.25, -0.5, -0.5 + 0.25])


def test_turn_advantages_weight_zero_is_outcome_credit():
    outcome = [1.0, 1.0, 0.0, 0.0, 0.0]
    trajs = [0, 0, 1, 1, 1]
    adv = turn_advantages([0.3, 0.9, 0.1, 0.0, 0.7], outcome, ["g"] * 5, trajs, weight=0.0)
    expected = outcome_advantages([1.0, 0.0], ["g", "g"]).tolist()
    assert adv.tolist() == approx([expected[0]] * 2 + [expected[1]] * 3)


def test_turn_advantages_compare_only_the_same_turn_index_and_group():
    # τ0 has three turns, τ1 one: turns 1 and 2 of τ0 have no peer -> A_T = 0 there.
    # equal outcomes -> A_O = 0. turn 0: Ḡ = mean(1, 1, 1) = 1 vs 0 -> ±0.5 (scale none, weight 1)
    adv = turn_advantages(
        [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], ["g"] * 4, [0, 0, 0, 1], weight=1.0, scale="none"
    )
    assert adv.tolist() == approx([0.5, 0.0, 0.0, -0.5])
    # a second group with the same turn rewards is normalised on its own
    adv = turn_advantages(
        [1.0, 0.0, 5.0, 5.0], [0.0] * 4, ["g", "g", "h", "h"], [0, 1, 0, 1], weight=1.0, scale="none"
    )
    assert adv.tolist() == approx([0.5, -0.5, 0.0, 0.0])


def test_turn_advantages_gamma():
    # τ0 turn rewards 0, 1 ; τ1 0, 0 ; γ = 0.5: Ḡ(τ0, 0) = (0 + 0.5·1) / (1 + 0.5) = 1/3 vs 0 at turn 0
    # -> ±1/6; turn 1: 1 vs 0 -> ±0.5
    adv = turn_advantages(
        [0.0, 1.0, 0.0, 0.0], [0.0] * 4, ["g"] * 4, [0, 0, 1, 1], weight=1.0, gamma=0.5, scale="none"
    )
    assert adv.tolist() == approx([1 / 6, 0.5, -1 / 6, -0.5])


@pytest.mark.parametrize("gamma", [1.0, 0.95])
def test_turn_advantages_do_not_reward_length(gamma):
    # Two successes whose every turn scored +0.4 (a judge that likes everything), one of 3 turns and one
    # of 4, and a failure. With a sum of future turn scores the 4-turn episode got larger advantages at
    # every shared turn index just for being longer; with the mean the two successes get the same.
    turn_r = [0.4] * 3 + [0.4] * 4 + [0.1] * 2
    outcome = [1.0] * 3 + [1.0] * 4 + [0.0] * 2
    trajs = ["short"] * 3 + ["long"] * 4 + ["fail"] * 2
    adv = turn_advantages(turn_r, outcome, ["g"] * 9, trajs, weight=0.5, gamma=gamma)
    assert adv[3:6].tolist() == approx(adv[0:3].tolist(), abs=1e-3)  # float noise of the division only
    assert adv[0] > adv[7]  # the verifier's order survives


def test_broadcast_to_tokens():
    turn_adv = torch.tensor([0.5, -1.0])
    index = torch.tensor([-1, -1, 0, 0, -1, -1, 1, 1, 1, -1])
    out = broadcast_to_tokens(turn_adv, index)
    assert out.tolist() == [0.0, 0.0, 0.5, 0.5, 0.0, 0.0, -1.0, -1.0, -1.0, 0.0]
    batched = broadcast_to_tokens(
        torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor([[0, 1, -1], [-1, 0, -1]])
    )
    assert batched.tolist() == [[1.0, 2.0, 0.0], [0.0, 3.0, 0.0]]


# ---------------------------------------------------------------------------------------------------------
# the critic
# ---------------------------------------------------------------------------------------------------------


def test_gae_lambda_one_gamma_one_is_return_minus_value():
    rewards, values = [0.0, 0.5, 1.0], [0.2, 0.4, 0.9]
    advantages, returns = gae(rewards, values, gamma=1.0, lam=1.0)
    assert returns.tolist() == approx([1.5, 1.5, 1.0])  # the Monte Carlo returns
    assert advantages.tolist() == approx([1.5 - 0.2, 1.5 - 0.4, 1.0 - 0.9])


def test_gae_by_hand():
    # γ = 0.9, λ = 0.8, r = (1, 0, 2), V = (0.5, 1.0, 1.5), V after the end = 0
    # δ2 = 2 − 1.5 = 0.5 ; δ1 = 0 + 0.9·1.5 − 1 = 0.35 ; δ0 = 1 + 0.9·1.0 − 0.5 = 1.4
    # A2 = 0.5 ; A1 = 0.35 + 0.72·0.5 = 0.71 ; A0 = 1.4 + 0.72·0.71 = 1.9112
    advantages, returns = gae([1.0, 0.0, 2.0], [0.5, 1.0, 1.5], gamma=0.9, lam=0.8)
    assert advantages.tolist() == approx([1.9112, 0.71, 0.5])
    assert returns.tolist() == approx([1.9112 + 0.5, 0.71 + 1.0, 0.5 + 1.5])


def test_gae_lambda_zero_is_td_error_and_no_gradient():
    values = torch.tensor([0.5, 1.0], requires_grad=True)
    advantages, returns = gae(torch.tensor([0.0, 1.0]), values, gamma=0.5, lam=0.0)
    assert advantages.tolist() == approx([0.0 + 0.5 * 1.0 - 0.5, 1.0 - 1.0])
    assert not advantages.requires_grad and not returns.requires_grad


def test_value_loss_clipping_by_hand():
    old = torch.tensor([0.0, 0.0, 0.0])
    returns = torch.tensor([1.0, 1.0, -1.0])
    values = torch.tensor([0.5, 0.1, 0.5], requires_grad=True)
    # row 0: V moved 0.5 > c: clipped V = 0.2; errors (0.5)², (0.8)² -> max 0.64 (the clipped one)
    # row 1: inside the clip: (0.9)²
    # row 2: V moved away from R: clipped V = 0.2; errors (1.5)², (1.2)² -> max 2.25 (unclipped)
    loss = value_loss(values, old, returns, clip=0.2)
    assert loss.item() == approx(0.5 * (0.64 + 0.81 + 2.25) / 3)
    loss.backward()
    # row 0 took the clipped branch: no gradient; rows 1 and 2: (V − R)/3
    assert values.grad.tolist() == approx([0.0, (0.1 - 1.0) / 3, (0.5 + 1.0) / 3])


def test_value_loss_mask():
    values = torch.tensor([[1.0, 9.0]])
    loss = value_loss(values, values, torch.tensor([[0.0, 0.0]]), mask=torch.tensor([[1, 0]]))
    assert loss.item() == approx(0.5)


def test_value_head_reads_the_last_token_of_each_turn():
    head = ValueHead(hidden_size=3)
    assert head(torch.randn(1, 4, 3), torch.tensor([[1, 3]])).tolist() == [[0.0, 0.0]]  # zero init
    with torch.no_grad():
        head.linear.weight.copy_(torch.tensor([[1.0, 10.0, 100.0]]))
        head.linear.bias.fill_(0.5)
    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    values = head(hidden, torch.tensor([[1, 3], [2, -1]]))
    # row 0, position 1: (3, 4, 5) -> 3 + 40 + 500 + 0.5 ; position 3: (9, 10, 11)
    # row 1, position 2: (18, 19, 20); the padding turn -1 gives 0
    assert values.flatten().tolist() == approx([543.5, 9 + 100 + 1100 + 0.5, 18 + 190 + 2000 + 0.5, 0.0])
    assert values.shape == (2, 2)
    values.sum().backward()
    assert head.linear.weight.grad is not None


def test_value_head_follows_bf16_hidden_states():
    head = ValueHead(hidden_size=4)
    values = head(torch.randn(1, 3, 4, dtype=torch.bfloat16), torch.tensor([[2]]))
    assert values.dtype == torch.float32


def test_group_std_is_unbiased():
    rewards = [0.0, 1.0, 3.0]
    adv = outcome_advantages(rewards, [0, 0, 0], eps=0.0)
    s = statistics.stdev(rewards)
    assert adv.tolist() == approx([(r - 4 / 3) / s for r in rewards])



# ---------------------------------------------------------------------------------------------------------
# the dispatch: advantages(method, inputs, **options)
# ---------------------------------------------------------------------------------------------------------


def _inputs(**more) -> CreditInputs:
    """Group g: τa (2 turns, R = 1), τb (3 turns, R = 0, its first turn revisits s0); group h: τc alone."""
    return CreditInputs(group_ids=["g", "g", "h"], traj_ids=["a", "b", "c"], rewards=[1.0, 0.0, 1.0],
                        step_rewards=[[0.0, 1.0], [0.0, 0.0, 0.0], [1.0]],
                        anchors=[["s0", "s1"], ["s0", "s0", "s2"], ["s0"]], **more)


def test_advantages_of_each_method_are_the_functions_of_this_module():
    inputs = _inputs(turn_rewards=[[0.0, 0.0], [-0.1, 0.0, 0.0], [0.0]],
                     values=[[0.5, 0.5], [0.2, 0.1, 0.0], [0.3]])
    outcome = outcome_advantages([1.0, 0.0, 1.0], ["g", "g", "h"])
    assert [a.tolist() for a in advantages("outcome", inputs).advantages] == [
        [outcome[0].item()] * 2, [outcome[1].item()] * 3, [0.0]]
    rows = dict(group_ids=["g"] * 5 + ["h"], traj_ids=["a", "a", "b", "b", "b", "c"])
    gigpo = gigpo_advantages([0.0, 1.0, 0.0, 0.0, 0.0, 1.0], ["s0", "s1", "s0", "s0", "s2", "s0"], **rows,
                             gamma=0.5, omega=2.0)
    result = advantages("gigpo", inputs, gamma=0.5, omega=2.0)
    assert torch.cat(result.advantages).tolist() == approx(gigpo.tolist())
    assert result.stats["step_group_sizes"] == {1: 3, 3: 1}  # s0 in g (3 rows), s1, s2, s0 in h
    turn = turn_advantages([0.0, 0.0, -0.1, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0, 1.0], **rows,
                           weight=0.3, gamma=0.9)
    assert (torch.cat(advantages("turn", inputs, turn_weight=0.3, gamma=0.9).advantages).tolist()
            == approx(turn.tolist()))
    critic = advantages("critic", inputs, gae_gamma=1.0, gae_lambda=0.9, whiten=False)
    by_hand = [gae([0.0, 1.0], [0.5, 0.5], lam=0.9), gae([-0.1, 0.0, 0.0], [0.2, 0.1, 0.0], lam=0.9),
               gae([1.0], [0.3], lam=0.9)]  # the turn rewards, plus R(τ) on the last turn
    assert [a.tolist() for a in critic.advantages] == [approx(a.tolist()) for a, _ in by_hand]
    assert [r.tolist() for r in critic.returns] == [approx(r.tolist()) for _, r in by_hand]
    assert torch.equal(torch.cat(advantages("critic", inputs, gae_lambda=0.9).advantages),
                       torch.cat(critic.advantages))
    whitened = torch.cat(advantages("critic", inputs, gae_lambda=0.9, whiten=True).advantages)
    assert whitened.mean().item() == approx(0.0) and whitened.std().item() == approx(1.0, abs=1e-4)


def test_advantages_refuses_unknown_methods_options_and_missing_inputs():
    with pytest.raises(ValueError, match="credit 'ppo' is not known; methods are: outcome, gigpo, turn"):
        advantages("ppo", _inputs())
    with pytest.raises(ValueError, match=r"no credit method takes the option\(s\) \['omgea'\]"):
        advantages("gigpo", _inputs(), omgea=0.5)
    with pytest.raises(ValueError, match="credit 'critic' needs turn_rewards and values"):
        advantages("critic", _inputs())
    advantages("outcome", _inputs(), omega=0.5, gae_lambda=0.9)  # other methods' options: ignored


def test_groups_to_train_follows_each_methods_rule():
    inputs = CreditInputs(group_ids=["eq", "eq", "mixed", "mixed"], traj_ids=[0, 1, 2, 3],
                          rewards=[1.0, 1.0, 0.0, 1.0],
                          step_rewards=[[1.0], [1.0], [0.0], [1.0]], anchors=[["x"], ["x"], ["x"], ["x"]])
    separated = CreditResult([torch.tensor([0.0]), torch.tensor([0.3]), torch.tensor([0.0]),
                              torch.tensor([0.0])])
    assert groups_to_train("outcome", inputs, separated) == ["mixed"]  # equal rewards: skipped
    assert groups_to_train("gigpo", inputs, separated) == ["eq"]  # only all-zero advantages are skipped
    # the critic learns from every group
    assert groups_to_train("critic", inputs, separated) == ["eq", "mixed"]


def test_process_reward_is_one_rule_for_errors_and_malformed_actions():
    def step(kind: str, observation: str) -> Step:
        return Step(action_ids=[], action_text="", logprobs=[], observation_text=observation,
                    info={"action_kind": kind})

    assert (process_reward(step("malformed", "")) == process_reward(step("tool_call", "Error: no such tool"))
            == -0.1)
    assert process_reward(step("tool_call", "Errors found: 0")) == 0.0  # a tool's output, not an error report
    assert process_reward(step("answer", "ok")) == 0.0


def test_to_tokens_keeps_only_the_sampled_tokens():
    out = to_tokens(torch.tensor([0.5, -1.0]), [-1, 0, 0, 0, 1, 1], [0, 1, 1, 0, 1, 0])
    assert out.tolist() == [0.0, 0.5, 0.5, 0.0, -1.0, 0.0]
    assert to_tokens(torch.zeros(0), [-1, -1], [0, 0]).tolist() == [0.0, 0.0]  # no turns: no advantage


def test_a_new_credit_method_is_one_registered_function(monkeypatch):
    """What "adding a credit method" takes: a function registered in the credit module. The dispatch,
    the trainer's config check and the credit table then know it, with its own option."""
    from course_lib import viz
    from course_lib.train.config import TrainConfig, check

    monkeypatch.setattr(credit, "CREDIT_METHODS", dict(credit.CREDIT_METHODS))  # removed again after the test

    @credit.credit_method("last_turn_only")
    def last_turn_only(inputs, *, bonus: float = 1.0):
        """R(τ) + bonus on the last turn, 0 before it."""
        return [torch.tensor([0.0] * (k - 1) + [r + bonus]) for r, k in zip(inputs.rewards, inputs.num_turns)]

    assert [a.tolist() for a in advantages("last_turn_only", _inputs(), bonus=0.5).advantages] == [
        [0.0, 1.5], [0.0, 0.0, 0.5], [1.5]]
    check(TrainConfig(credit="last_turn_only", credit_options={"bonus": 2.0}))
    assert TrainConfig(credit="last_turn_only", credit_options={"bonus": 2.0}).credit_options["bonus"] == 2.0
    assert "last_turn_only" in viz.credit_table(
        [make_trajectory(["s"], 1.0)], methods=("outcome", "last_turn_only"), bonus=0.0).columns


# ---------------------------------------------------------------------------------------------------------
# reinforce: no baseline (notebook 08's reference point where no group exists)
# ---------------------------------------------------------------------------------------------------------


def test_reinforce_is_the_return_to_go_with_nothing_subtracted():
    inputs = _inputs(turn_rewards=[[0.0, 0.0], [-0.1, 0.0, 0.0], [0.0]])
    # γ = 1: τa gets R = 1 on both turns; τb the −0.1 of its first turn on that turn only; τc alone gets R = 1
    assert [a.tolist() for a in advantages("reinforce", inputs).advantages] == [
        approx([1.0, 1.0]), approx([-0.1, 0.0, 0.0]), approx([1.0])]
    # γ = 0.5: τa (0, 1) -> G = (0 + 0.5·1, 1)
    assert advantages("reinforce", inputs, gae_gamma=0.5).advantages[0].tolist() == approx([0.5, 1.0])
    # it is the critic's GAE with V = 0 and λ = 1, unwhitened
    zero = _inputs(turn_rewards=inputs.turn_rewards, values=[[0.0, 0.0], [0.0, 0.0, 0.0], [0.0]])
    critic = advantages("critic", zero, gae_gamma=0.9, gae_lambda=1.0, whiten=False).advantages
    assert [a.tolist() for a in advantages("reinforce", inputs, gae_gamma=0.9).advantages] == [
        approx(a.tolist()) for a in critic]


def test_reinforce_trains_on_every_group_even_of_one_rollout():
    inputs = CreditInputs(group_ids=["eq", "eq", "one"], traj_ids=[0, 1, 2], rewards=[0.0, 0.0, 1.0],
                          step_rewards=[[0.0], [0.0], [1.0]], anchors=[["x"], ["x"], ["x"]],
                          turn_rewards=[[0.0], [0.0], [0.0]])
    result = advantages("reinforce", inputs)
    assert [a.tolist() for a in result.advantages] == [[0.0], [0.0], [1.0]]
    assert groups_to_train("reinforce", inputs, result) == ["eq", "one"]


@pytest.mark.parametrize("method", ["critic", "reinforce"])
def test_groups_of_one_rollout_train(tmp_path, method):
    """group_size=1, where no group baseline exists: both methods take an update on every rollout."""
    from course_lib.checkpoint import read_metrics
    from course_lib.train.config import TrainConfig
    from course_lib.train.loop import train

    config = TrainConfig(env="lookup", run_dir=str(tmp_path / "run"), credit=method, steps=1,
                         tasks_per_step=3, group_size=1, rollout=dict(max_turns=2, max_new_tokens=12),
                         eval_every=0, eval_tasks=0, checkpoint_every=0, progress=False,
                         credit_options={"whiten": False} if method == "critic" else None)
    assert train(config)["step"] == 1
    (row,) = [r for r in read_metrics(config.run_dir) if r["kind"] == "train"]
    assert row["skipped_groups"] == 0 and row["equal_reward_groups"] == 3 and not row["nonfinite"]
    assert row["train_tokens"] > 0 and math.isfinite(row["loss"]) and math.isfinite(row["advantage_std"])
    assert ("value_loss" in row) == (method == "critic")
