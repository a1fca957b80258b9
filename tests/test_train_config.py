"""`TrainConfig` of parts (`course_lib.train.config`): parts given as dicts, credit options checked against
the chosen method, the JSON round trip, and the flat config.json of runs made before the parts."""

from __future__ import annotations

import pytest

from course_lib.train.config import CriticConfig, RolloutConfig, TrainConfig


def test_parts_given_as_dicts_become_their_dataclasses():
    config = TrainConfig(rollout=dict(max_turns=2), critic=dict(lr=1e-4))
    assert config.rollout == RolloutConfig(max_turns=2) and config.critic == CriticConfig(lr=1e-4)
    message = r"rollout: \['max_turn'\] are not fields of RolloutConfig; its fields are: max_turns, max_new"
    with pytest.raises(TypeError, match=message):
        TrainConfig(rollout=dict(max_turn=2))


def test_credit_options_are_the_chosen_methods_own():
    assert TrainConfig(credit="gigpo", credit_options={"gamma": 0.9}).credit_options == {"gamma": 0.9}
    with pytest.raises(ValueError, match=r"credit 'outcome' does not take the option\(s\) \['gamma'\]; "
                                         r"its options are: scale"):
        TrainConfig(credit_options={"gamma": 0.9})
    with pytest.raises(ValueError, match="credit 'ppo' is not known; methods are: outcome, gigpo"):
        TrainConfig(credit="ppo")
    assert TrainConfig(credit_options=None).credit_options == {}


def test_from_json_rebuilds_to_json_and_reads_flat_configs():
    config = TrainConfig(env="lookup", credit="critic", credit_options={"whiten": True},
                         reward=dict(source="mix", unfinished_reward=0.0), optim=dict(lr=1e-5))
    assert TrainConfig.from_json(config.to_json()) == config
    old = {"env": "lookup", "credit": "gigpo", "credit_options": None, "max_turns": 3, "lr": 1e-5,
           "reward": "judge", "judge_method": "pointwise", "value_lr": 1e-4, "value_trains_backbone": True,
           "gamma": 0.5, "omega": 1.0, "turn_weight": 0.5, "gae_lambda": 0.95}
    loaded = TrainConfig.from_json(old)
    assert (loaded.rollout.max_turns, loaded.optim.lr, loaded.critic.lr, loaded.critic.trains_backbone) == (
        3, 1e-5, 1e-4, True)
    assert (loaded.reward.source, loaded.reward.judge_method) == ("judge", "pointwise")
    assert loaded.credit_options == {"gamma": 0.5, "omega": 1.0}  # only the options gigpo takes
    with pytest.raises(TypeError, match="'max_turnz' is not a TrainConfig field"):
        TrainConfig.from_json({"max_turnz": 3})
