"""The critic's network parts (notebook 08): the value head V(s_t) on the policy's hidden states, where it
reads them, and PPO's clipped value loss. `course_lib.credit` turns the values into advantages (`gae`)
and re-exports these names.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.losses import masked_mean


class ValueHead(nn.Module):
    """V(s_t): a linear layer on the policy's final hidden state, read just before each turn's action.

    Why on the policy and not a separate critic model: it reuses the features the policy already
    computes (one forward pass gives log-probs and values), it adds hidden_size + 1 parameters and no
    activation memory, and the course's 135M model is too small to split into two useful networks.
    It is read at the last token before the turn's first sampled token (`state_positions`): that
    hidden state has read the whole history of the turn and nothing of its action, so it estimates
    V(s_t). Read after the action it would estimate Q(s_t, a_t), and GAE's advantages would then average
    zero for every action.

    The weights start at zero, so V = 0 at first and the first advantages are λ-discounted returns,
    Σ_k (γλ)^k r_{t+k} (`credit.gae` with V = 0; the plain return only at λ = 1).

    The trainer stops the value loss's gradient at this head (`TrainConfig.value_trains_backbone`): the
    policy's features are shaped by the policy loss alone. Adam moves every weight by about lr whatever the
    size of its gradient, so a value-loss gradient through the shared layers would move V by up to
    lr × Σ|∂V/∂θ| in one step (far more than the head's own step) and turn the policy's features toward
    predicting the return.
    """

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden_states: torch.Tensor, last_token_index: torch.Tensor) -> torch.Tensor:
        """hidden_states [B, T, H] (the model's last layer), last_token_index [B, K] (the position where
        each turn's value is read; −1 for a padding turn) -> values [B, K] (0 at padding turns)."""
        index = last_token_index.clamp(min=0)
        picked = torch.gather(hidden_states, 1, index.unsqueeze(-1).expand(-1, -1, hidden_states.size(-1)))
        values = self.linear(picked.to(self.linear.weight.dtype)).squeeze(-1)
        return torch.where(last_token_index >= 0, values, torch.zeros_like(values))


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, *, clip: float = 0.2,
               mask: torch.Tensor | None = None) -> torch.Tensor:
    """PPO's clipped value loss.

        V_clip = V_old + clip(V − V_old, −c, c)
        L_V    = mean[ 0.5 · max((V − R)², (V_clip − R)²) ]

    The max takes the worse of the two errors, so a step cannot gain by moving V more than c away from
    the value that produced the advantages. Shapes: values, old_values, returns (and optional mask, 1 =
    a real turn) of one shape -> scalar. old_values and returns carry no gradient.
    """
    old_values, returns = old_values.detach(), returns.detach()
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    per_turn = 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    return per_turn.mean() if mask is None else masked_mean(per_turn, mask)


def state_positions(trajectory) -> list[int]:
    """Where the value head reads V(s_t): the position just before the first sampled token of turn t.

    The hidden state there has read the whole context of turn t (prompt, earlier actions and
    observations) and nothing of the action a_t, so what it can predict is V(s_t). Read after the
    action, it would learn Q(s_t, a_t), and GAE's δ_t = r_t + γ·V(s_{t+1}) − V(s_t) would then average
    zero for every action, good or bad: no signal about which action was better.

    Reads the trajectory's `loss_mask`, `turn_index` and `num_turns`; returns one position per turn.
    """
    first: dict[int, int] = {}
    for pos, (m, turn) in enumerate(zip(trajectory.loss_mask, trajectory.turn_index)):
        if m and turn not in first:
            first[turn] = pos - 1
    return [first.get(k, 0) for k in range(trajectory.num_turns)]
