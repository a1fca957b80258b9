"""The learned critic's wiring in the trainer (notebook 08): the value head V(s_t) on the policy, its
optimizer group, V of every turn of a batch (`turn_values`), and the value loss of one micro-batch.

The head itself, where it reads V and PPO's clipped value loss are in `course_lib.value_head`; the
advantages the values make (GAE) are in `course_lib.credit`.
"""

from __future__ import annotations

import torch

from course_lib import credit
from course_lib.batching import collate, hidden_states, pack_by_length, pad
from course_lib.models import autocast_context
from course_lib.trajectory import Trajectory
from course_lib.value_head import ValueHead, state_positions, value_loss

from .config import TrainConfig


def learns_values(config: TrainConfig) -> bool:
    """Whether the run's credit method reads V(s_t) (and so has a value head and a value loss)."""
    return "values" in credit.credit_method_named(config.credit).needs


def make_value_head(config: TrainConfig, model) -> ValueHead | None:
    """A fresh value head on the model's hidden size, on its device; None when the method needs no values."""
    if not learns_values(config):
        return None
    return ValueHead(model.config.hidden_size).to(next(model.parameters()).device)


def param_groups(config: TrainConfig, model, value_head: ValueHead | None) -> list[dict]:
    """AdamW's parameter groups: the policy's trainable weights (all, or its LoRA adapters) at `optim.lr`, the
    value head (if any) at `critic.lr`. Apart, so that each group's gradient is clipped on its own (V's norm
    must not shrink π's step)."""
    groups = [{"params": [p for p in model.parameters() if p.requires_grad], "lr": config.optim.lr}]
    if value_head is not None:
        groups.append({"params": list(value_head.parameters()), "lr": config.critic.lr})
    return groups


@torch.no_grad()
def turn_values(model, value_head, trajs: list[Trajectory], *, token_budget: int, device,
                autocast_dtype) -> list[torch.Tensor]:
    """V(s_t) of every turn of every trajectory: the value head on the decoder's hidden state at
    `state_positions` (no output layer), in length-packed micro-batches."""
    values: list[torch.Tensor] = [torch.zeros(0)] * len(trajs)
    for rows in pack_by_length([len(t.token_ids) for t in trajs], token_budget):
        batch = collate([trajs[i] for i in rows])
        with autocast_context(device, autocast_dtype):
            hidden = hidden_states(model, batch, device)
        positions = pad([state_positions(trajs[i]) for i in rows], -1, torch.long).to(device)
        v = value_head(hidden, positions).float().cpu()
        for j, i in enumerate(rows):
            values[i] = v[j, : trajs[i].num_turns]
    return values


def micro_batch_value_loss(value_head, hidden: torch.Tensor, trajs: list[Trajectory],
                           old_values: list[torch.Tensor], returns: list[torch.Tensor], *, n_turns: int,
                           config: TrainConfig) -> torch.Tensor:
    """This micro-batch's clipped value loss, weighted by its share of the batch's turns: the sum over
    micro-batches is the mean over all turns, whatever the packing.

        L_V(micro-batch) = value_loss(V, V_old, R; clip) · (turns in it) / n_turns

    The gradient reaches the policy's layers only with `critic.trains_backbone` (why: `ValueHead`)."""
    device = hidden.device
    positions = pad([state_positions(t) for t in trajs], -1, torch.long).to(device)
    features = hidden if config.critic.trains_backbone else hidden.detach()
    turn_mask = (positions >= 0).float()
    v_loss = value_loss(value_head(features, positions).float(),
                        pad([v.tolist() for v in old_values], 0.0, torch.float32).to(device),
                        pad([r.tolist() for r in returns], 0.0, torch.float32).to(device),
                        clip=config.critic.clip, mask=turn_mask)
    return v_loss * turn_mask.sum() / n_turns
