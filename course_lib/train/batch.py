"""The batch of one RL step: from rewarded groups to the trajectories the update trains on and their
per-token advantages, with what was left out and why (one place).

    rewarded groups -> turn rewards (once, when the method reads them) -> values (when it reads them)
        -> credit.advantages -> credit.groups_to_train -> per-token advantages
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from course_lib import credit, rewards
from course_lib.credit import CreditInputs
from course_lib.trajectory import Trajectory, TrajectoryGroup

from .config import Hooks, TrainConfig


@dataclass
class Batch:
    """What one RL step trains on, and what it left out and why."""

    trajectories: list[Trajectory]  # the trained trajectories (rewarded copies), group by group
    advantages: list[torch.Tensor]  # their per-token advantages
    # reason -> ids of the groups left out: "judge_failed" (the group judging failed), "turn_judge_failed" (a
    # turn judging of one of its trajectories failed), "no_signal" (the method's rule,
    # `credit.groups_to_train`)
    skipped: dict[str, list]
    old_values: list[torch.Tensor] | None = None  # per-turn V(s_t), when the credit method learns values
    returns: list[torch.Tensor] | None = None  # ... and V's targets
    stats: dict[str, Any] = field(default_factory=dict)  # the credit method's diagnostics
    metrics: dict[str, Any] = field(default_factory=dict)  # the step's metrics row


def make_batch(groups: list[TrajectoryGroup], judge_failed: list, config: TrainConfig,
               hooks: Hooks | None = None,
               values_of: Callable[[list[Trajectory]], list[torch.Tensor]] | None = None) -> Batch:
    """The trajectories the update trains on and their per-token advantages, from rewarded groups (their
    `reward` is the training reward R: `rewards.assign(...).groups`).

    In order: groups whose judging failed (`judge_failed`) are left out; turn rewards are computed once,
    when the credit method reads them, and a group with a failed turn judging is left out; values come
    from `values_of` when the method reads them; `credit.advantages` computes every advantage with the
    config's `credit_options`; the method's rule (`credit.groups_to_train`) leaves out groups without
    signal. Each left-out group is named in `Batch.skipped` under its reason.
    """
    method, hooks = credit.credit_method_named(config.credit), hooks or Hooks()
    skipped: dict[str, list] = {"judge_failed": list(judge_failed), "turn_judge_failed": [], "no_signal": []}
    usable = [g for g in groups if g.group_id not in set(judge_failed)]
    per_turn = None
    if "turn_rewards" in method.needs:
        scored = {t.traj_id: rewards.turn_rewards(config.reward, t, judge=hooks.judge,
                                                  turn_reward_fn=hooks.turn_reward_fn)
                  for g in usable for t in g}
        skipped["turn_judge_failed"] = [g.group_id for g in usable if any(scored[t.traj_id][1] for t in g)]
        usable = [g for g in usable if g.group_id not in set(skipped["turn_judge_failed"])]
        per_turn = [scored[t.traj_id][0] for g in usable for t in g]
    trajs = [t for g in usable for t in g]
    if not trajs:
        return Batch([], [], skipped)
    if "values" in method.needs and values_of is None:
        raise ValueError(f"credit {config.credit!r} reads values: pass values_of (e.g. `turn_values` with a "
                         "value head)")
    values = values_of(trajs) if "values" in method.needs else None
    inputs = CreditInputs.of(trajs, turn_rewards=per_turn, values=values)
    result = credit.advantages(config.credit, inputs, **config.credit_options)
    kept = set(credit.groups_to_train(config.credit, inputs, result))
    skipped["no_signal"] = [g.group_id for g in usable if g.group_id not in kept]
    rows = [i for i, t in enumerate(trajs) if t.group_id in kept]
    tokens = [credit.to_tokens(result.advantages[i], trajs[i].turn_index, trajs[i].loss_mask) for i in rows]
    learns_values = result.returns is not None and values is not None
    return Batch([trajs[i] for i in rows], tokens, skipped,
                 old_values=[values[i] for i in rows] if learns_values else None,
                 returns=[result.returns[i] for i in rows] if learns_values else None, stats=result.stats)
