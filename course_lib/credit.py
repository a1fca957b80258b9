"""Credit assignment: which actions of a trajectory τ get how much advantage A (notebooks 05 to 08).

    outcome_advantages   one reward per trajectory, normalised within its group (GRPO)        notebook 05
    gigpo_advantages     + step groups of rows that share an anchor state (GiGPO)               notebook 06
    turn_advantages      + per-turn rewards from a process reward or a turn judge               notebook 07
    gae                  turn-level GAE(γ, λ) for a learned critic V                           notebook 08
    reinforce_credit     no baseline: A_t = the discounted return to go (gae with V = 0, λ = 1)  notebook 08
    ValueHead, value_loss, state_positions   the critic's network parts (course_lib.value_head,
                         re-exported here)                                                  notebook 08
    process_reward       the one rule for a per-turn process reward                             notebook 07
    broadcast_to_tokens  one advantage per turn -> one per token, for `policy_loss`
    advantages(method, inputs, **options)   the one dispatch from a method name to advantages

A "group" is the set of rollouts of one task (same prompt); only rollouts of one group are compared.
Inputs are flat lists, one entry per row, with `group_ids` and `traj_ids` naming the row's group and
trajectory; the rows of one trajectory come in time order.

The credit methods the trainer, `viz.credit_table` and the shoot-out know are the functions registered
with `@credit_method(...)` at the end of this module: a new method is one such function (and its tests).
This module imports no training code: it takes numbers (rewards, turn rewards, values, anchors, masks)
and returns advantages.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

import torch


def _as_float_tensor(values: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """A 1-D float tensor; floating tensors keep their dtype, anything else becomes float32."""
    if isinstance(values, torch.Tensor) and values.is_floating_point():
        return values.detach().flatten()
    return torch.as_tensor(values, dtype=torch.float32).flatten()


def _rows_by_key(keys: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    """Row indices of every distinct key, keys and rows in first-seen order."""
    rows: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        rows.setdefault(key, []).append(i)
    return rows


def _normalise_in_groups(values: torch.Tensor, group_keys: Sequence[Hashable], *, scale: str,
                         eps: float) -> torch.Tensor:
    """(x − group mean) / (unbiased group std + eps) with scale="group", x − group mean with scale="none".

    A group of one row, or a group whose values are all equal, gets exactly 0 (no signal to compare).
    """
    if scale not in ("group", "none"):
        raise ValueError(f"scale must be 'group' or 'none', got {scale!r}")
    if len(group_keys) != len(values):
        raise ValueError(f"{len(values)} values but {len(group_keys)} group ids; give one group id per value")
    out = torch.zeros_like(values)
    for rows in _rows_by_key(group_keys).values():
        x = values[rows]
        if len(rows) == 1 or torch.all(x == x[0]):
            continue
        centred = x - x.mean()
        out[rows] = centred / (x.std() + eps) if scale == "group" else centred
    return out


# ----- outcome-only credit (GRPO over trajectories) -----------------------------------------------------


def outcome_advantages(rewards: Sequence[float] | torch.Tensor, group_ids: Sequence[Hashable], *,
                       scale: str = "group", eps: float = 1e-4) -> torch.Tensor:
    """Group-normalised outcome advantage, one per trajectory.

        A(τ_i) = (R(τ_i) − mean_g R) / (std_g R + eps)     scale="group" (std with N−1, as TRL)
        A(τ_i) =  R(τ_i) − mean_g R                        scale="none" (Dr. GRPO)

    where g is τ_i's group. Shapes: rewards [N], group_ids N hashables -> [N]. A group of one trajectory,
    or one where every reward is equal, gets 0. Every model token of τ_i then uses A(τ_i).
    """
    return _normalise_in_groups(_as_float_tensor(rewards), list(group_ids), scale=scale, eps=eps)


# ----- GiGPO: episode groups + anchor-state step groups -------------------------------------------------


def discounted_returns(rewards: Sequence[float] | torch.Tensor, traj_ids: Sequence[Hashable], *,
                       gamma: float) -> torch.Tensor:
    """G_t = r_t + γ·G_{t+1} within each trajectory (G after the last row is 0). [N] -> [N]."""
    rewards = _as_float_tensor(rewards)
    returns = torch.zeros_like(rewards)
    for rows in _rows_by_key(list(traj_ids)).values():
        future = 0.0
        for i in reversed(rows):
            future = rewards[i] + gamma * future
            returns[i] = future
    return returns


def step_group_ids(anchors: Sequence[Hashable], group_ids: Sequence[Hashable], *,
                   similarity: float | None = None) -> list[int]:
    """The step group of every row: rows of one group (task) whose anchor states match.

    Exact mode (similarity=None): anchors match when equal. Similarity mode: greedy clustering in row
    order; a row joins the first step group of its group whose first member's anchor has
    difflib.SequenceMatcher(None, new, first).ratio() >= similarity (GiGPO uses 0.9 for search), else it
    opens a new one. Non-string anchors only match when equal. Returns one integer id per row, numbered
    in order of first appearance.

    The order of the two strings is verl-agent's (the new anchor first): the ratio is not symmetric,
    because difflib treats characters frequent in the second string as junk once it is 200 characters
    or longer, so two long pages can be 0.99 similar one way and 0.11 the other.
    """
    if len(anchors) != len(group_ids):
        raise ValueError(f"{len(anchors)} anchors but {len(group_ids)} group ids; give one of each per row")
    first_anchor: dict[int, Hashable] = {}  # step-group id -> anchor of its first member
    exact: dict[tuple[Hashable, Hashable], int] = {}  # (group, anchor) -> step-group id: the hash map
    step_ids_of_group: dict[Hashable, list[int]] = {}

    def is_similar(step_id: int, anchor: str) -> bool:
        first = first_anchor[step_id]
        return isinstance(first, str) and SequenceMatcher(None, anchor, first).ratio() >= similarity

    ids = []
    for anchor, group in zip(anchors, group_ids):
        step_id = exact.get((group, anchor))
        if step_id is None and similarity is not None and isinstance(anchor, str):
            step_id = next((s for s in step_ids_of_group.get(group, []) if is_similar(s, anchor)), None)
        if step_id is None:
            step_id = len(first_anchor)
            first_anchor[step_id] = anchor
            step_ids_of_group.setdefault(group, []).append(step_id)
        exact.setdefault((group, anchor), step_id)
        ids.append(step_id)
    return ids


def step_group_sizes(anchors: Sequence[Hashable], group_ids: Sequence[Hashable], *,
                     similarity: float | None = None) -> list[int]:
    """Size of every step group (one entry per step group, in order of first appearance), for the
    step-group size histogram of notebook 06. A size of 1 means that row got no step-level signal."""
    counts = Counter(step_group_ids(anchors, group_ids, similarity=similarity))
    return [counts[s] for s in sorted(counts)]


def gigpo_advantages(step_rewards: Sequence[float] | torch.Tensor, anchors: Sequence[Hashable],
                     group_ids: Sequence[Hashable], traj_ids: Sequence[Hashable], *, gamma: float = 0.95,
                     omega: float = 1.0, scale: str = "group", eps: float = 1e-6,
                     similarity: float | None = None) -> torch.Tensor:
    """GiGPO advantage (Feng et al. 2025), one per environment step (row).

    Episode level (paper Eq. 3), one value per trajectory, normalised over the trajectories of its group:
        R(τ) = Σ_t r_t,    A_E(τ) = (R(τ) − mean_g R) / F
    Step level, over the step group S of rows of the same group whose anchor state s̃ matches:
        G_t = r_t + γ·G_{t+1} (within τ),    A_S(t) = (G_t − mean_S G) / F
    Combined:
        A(t) = A_E(τ) + ω·A_S(t)

    F = unbiased std + eps with scale="group" ("w/ std"), F = 1 with scale="none" ("w/o std").
    A group of one trajectory gets A_E = 0; a step group of one row gets A_S = 0. A trajectory that
    revisits s̃ puts several rows in its step group. With no repeated anchors every A_S is 0 and GiGPO
    is GRPO over trajectories.

    Inputs: one entry per row: step_rewards [N] (r_t), anchors (the raw observation the action
    answered, hashable; strings for similarity mode), group_ids, traj_ids; rows of one trajectory in
    time order. Returns A [N]. See `step_group_ids` for `similarity`.
    """
    group_ids, traj_ids = list(group_ids), list(traj_ids)
    rewards = _as_float_tensor(step_rewards)
    if not len(rewards) == len(anchors) == len(group_ids) == len(traj_ids):
        raise ValueError("step_rewards, anchors, group_ids and traj_ids need one entry per row each")

    # episode level: one R per trajectory, keyed by (group, traj) so trajectory ids may repeat across groups
    traj_rows = _rows_by_key(list(zip(group_ids, traj_ids)))
    episode_returns = torch.stack([rewards[rows].sum() for rows in traj_rows.values()])
    episode_adv = _normalise_in_groups(episode_returns, [g for g, _ in traj_rows], scale=scale, eps=eps)
    advantages = torch.zeros_like(rewards)
    for adv, rows in zip(episode_adv, traj_rows.values()):
        advantages[rows] = adv

    # step level: discounted returns compared within anchor-state step groups
    step_returns = discounted_returns(rewards, list(zip(group_ids, traj_ids)), gamma=gamma)
    step_groups = step_group_ids(anchors, group_ids, similarity=similarity)
    step_adv = _normalise_in_groups(step_returns, step_groups, scale=scale, eps=eps)
    return advantages + omega * step_adv


# ----- turn-level rewards (process rewards, turn judges) ------------------------------------------------


def turn_advantages(turn_rewards: Sequence[float] | torch.Tensor,
                    outcome_rewards: Sequence[float] | torch.Tensor,
                    group_ids: Sequence[Hashable], traj_ids: Sequence[Hashable], *, weight: float = 0.5,
                    gamma: float = 1.0, scale: str = "group", eps: float = 1e-4) -> torch.Tensor:
    """Outcome advantage plus a turn-level advantage from per-turn rewards, one per turn (row).

        A(τ, t) = A_O(τ) + weight · A_T(τ, t)

        A_O(τ)    = outcome_advantages over the trajectories of τ's group (the verifier's R(τ))
        Ḡ_t       = Σ_{k≥t} γ^{k−t} r_k / Σ_{k≥t} γ^{k−t}, the discount-weighted MEAN of τ's turn rewards
                    from turn t on
        A_T(τ, t) = (Ḡ_t − mean Ḡ) / (std Ḡ + eps) over the rows of the same group AND the same turn
                    index t

    Why this rule: A_O keeps the verifier in charge (a turn judge alone can be gamed, notebook 07), and
    A_T adds a dense signal that says which turns did better than the other rollouts of the task did
    at the same point of the episode. Two length biases are removed. Comparing at the same turn index
    (GiGPO's step groups with the turn index as the anchor) stops early turns winning because more turns
    follow them. Averaging instead of summing the future rewards stops long episodes winning because
    they have more turns left: with a sum, an episode with more positive turn scores got larger
    advantages however good each turn was. With the mean, a turn is credited for how good the turns
    from it on were, not for how many there were. A turn index reached by only one rollout of the group
    gets A_T = 0. weight = 0 gives plain outcome credit.

    Inputs, one entry per turn row: turn_rewards [N] (r_t from any callable that scores a turn),
    outcome_rewards [N] (R(τ), the same on every row of τ), group_ids, traj_ids; rows of one
    trajectory in time order. Returns A [N].
    """
    group_ids, traj_ids = list(group_ids), list(traj_ids)
    turn_rewards, outcome_rewards = _as_float_tensor(turn_rewards), _as_float_tensor(outcome_rewards)
    if not len(turn_rewards) == len(outcome_rewards) == len(group_ids) == len(traj_ids):
        raise ValueError("turn_rewards, outcome_rewards, group_ids and traj_ids need one entry per row each")

    traj_keys = list(zip(group_ids, traj_ids))
    traj_rows = _rows_by_key(traj_keys)
    first_rows = [rows[0] for rows in traj_rows.values()]
    outcome_adv = outcome_advantages(outcome_rewards[first_rows],
                                     [g for g, _ in traj_rows], scale=scale, eps=eps)
    advantages = torch.zeros_like(turn_rewards)
    turn_index = [0] * len(turn_rewards)
    for adv, rows in zip(outcome_adv, traj_rows.values()):
        advantages[rows] = adv
        for t, i in enumerate(rows):
            turn_index[i] = t

    discount_mass = discounted_returns(torch.ones_like(turn_rewards), traj_keys, gamma=gamma)  # Σ γ^{k−t}
    future_mean = discounted_returns(turn_rewards, traj_keys, gamma=gamma) / discount_mass
    turn_adv = _normalise_in_groups(future_mean, list(zip(group_ids, turn_index)), scale=scale, eps=eps)
    return advantages + weight * turn_adv


def broadcast_to_tokens(turn_advantages_per_row: torch.Tensor,
                        turn_index_per_token: torch.Tensor) -> torch.Tensor:
    """Per-token advantages from per-turn ones: out[..., j] = A[..., turn_index[j]], and 0 where
    turn_index is −1 (the prompt, padding). A turn's observation and closing tokens carry its index, so
    they get the turn's value here: multiply by the loss mask to keep only the tokens the model chose.

    Shapes: A [K] with turn_index [T] -> [T] (one trajectory), or A [B, K] with turn_index [B, T] -> [B, T].
    """
    turn_index = torch.as_tensor(turn_index_per_token, device=turn_advantages_per_row.device).long()
    gathered = torch.gather(turn_advantages_per_row, -1, turn_index.clamp(min=0))
    return torch.where(turn_index >= 0, gathered, torch.zeros_like(gathered))


# ----- a critic: GAE over turns (the value head and its loss: course_lib.value_head) --------------------


def gae(rewards: Sequence[float] | torch.Tensor, values: Sequence[float] | torch.Tensor, *,
        gamma: float = 1.0, lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the turns of one finished trajectory.

        δ_t = r_t + γ·V_{t+1} − V_t          (V after the last turn = 0: the episode is over)
        A_t = δ_t + γλ·A_{t+1}               = Σ_k (γλ)^k δ_{t+k}
        returns_t = A_t + V_t                (the critic's regression target)

    λ = 1 gives the Monte Carlo return minus V (unbiased, high variance); λ = 0 the one-step TD error.
    Shapes: rewards [T], values [T] (one per turn) -> (advantages [T], returns [T]), no gradient.
    """
    rewards, values = _as_float_tensor(rewards), _as_float_tensor(values)
    if len(rewards) != len(values):
        raise ValueError(f"{len(rewards)} rewards but {len(values)} values; give one of each per turn")
    advantages = torch.zeros_like(rewards)
    next_value, next_advantage = 0.0, 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_value - values[t]
        next_advantage = delta + gamma * lam * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    return advantages, advantages + values


# ----- the dispatch: a method name -> per-turn advantages -----------------------------------------------


@dataclass(frozen=True)
class CreditInputs:
    """The numbers a credit method reads, for a batch of trajectories: entry i describes trajectory i,
    and per-turn entries are one list per trajectory (turns in time order).

        group_ids[i], traj_ids[i]   names (only trajectories of one group are compared)
        rewards[i]                  R(τ_i), the training reward
        step_rewards[i][t]          the environment's reward of turn t (the last turn carries R(τ_i))
        anchors[i][t]               the observation turn t answered (GiGPO's anchor state)
        turn_rewards[i][t]          a per-turn process or judge reward (None: not computed)
        values[i][t]                the critic's V(s_t) (None: no critic)
    """

    group_ids: list[Hashable]
    traj_ids: list[Hashable]
    rewards: list[float]
    step_rewards: list[list[float]]
    anchors: list[list[Hashable]]
    turn_rewards: list[list[float]] | None = None
    values: list[list[float]] | None = None

    @classmethod
    def of(cls, trajectories: Sequence, *, turn_rewards: Sequence[Sequence[float]] | None = None,
           values: Sequence[Sequence[float]] | None = None) -> CreditInputs:
        """The inputs of trajectories (`group_id`, `traj_id`, `reward`, `steps` with
        `reward` and `anchor`)."""
        return cls(group_ids=[t.group_id for t in trajectories], traj_ids=[t.traj_id for t in trajectories],
                   rewards=[float(t.reward) for t in trajectories],
                   step_rewards=[[float(s.reward) for s in t.steps] for t in trajectories],
                   anchors=[[s.anchor for s in t.steps] for t in trajectories],
                   turn_rewards=(None if turn_rewards is None
                                 else [[float(r) for r in rs] for rs in turn_rewards]),
                   values=None if values is None else [[float(v) for v in vs] for vs in values])

    @property
    def num_turns(self) -> list[int]:  # turns of each trajectory
        return [len(r) for r in self.step_rewards]

    def per_row(self, nested: Sequence[Sequence[Any]]) -> list[Any]:
        """A per-turn input flattened to one entry per row (turns of trajectory 0, then 1, ...)."""
        return [x for row in nested for x in row]

    def row_ids(self) -> tuple[list[Hashable], list[Hashable]]:
        """(group id, trajectory id) of every row."""
        return ([g for g, k in zip(self.group_ids, self.num_turns) for _ in range(k)],
                [i for i, k in zip(self.traj_ids, self.num_turns) for _ in range(k)])

    def split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        # one entry per row -> one tensor per trajectory
        return list(torch.split(flat, self.num_turns))


@dataclass
class CreditResult:
    """What a credit method returns: per-turn advantages, one tensor per trajectory; the critic's value
    targets (returns, same shapes) when the method learns values; diagnostics for the metrics row."""

    advantages: list[torch.Tensor]
    returns: list[torch.Tensor] | None = None
    stats: dict[str, Any] = field(default_factory=dict)


SKIP_RULES = ("equal_rewards", "zero_advantages", "never")


@dataclass(frozen=True)
class CreditMethod:
    """A registered credit method: its function, the optional inputs it reads ("turn_rewards",
    "values"), which groups the update skips, and its keyword options with their defaults."""

    name: str
    compute: Callable[..., CreditResult | list[torch.Tensor]]
    needs: frozenset[str]
    skip: str
    options: dict[str, Any]


CREDIT_METHODS: dict[str, CreditMethod] = {}


def credit_method(name: str, *, needs: Sequence[str] = (), skip: str = "zero_advantages"):
    """Register `compute(inputs: CreditInputs, **options) -> CreditResult | per-turn advantages` as
    credit method `name`. needs: the optional inputs it reads ("turn_rewards", "values"; "values" also
    gives the trainer a value head and a value loss on `CreditResult.returns`). skip: the groups the
    update leaves out, "equal_rewards" (all rewards R equal), "zero_advantages" (all advantages 0) or
    "never". Its keyword arguments are its options, which `advantages` passes through."""
    if set(needs) - {"turn_rewards", "values"} or skip not in SKIP_RULES:
        raise ValueError(f"needs: turn_rewards and/or values (got {needs}); skip: one of "
                         f"{SKIP_RULES} (got {skip!r})")

    def register(compute):
        params = list(inspect.signature(compute).parameters.values())[1:]
        CREDIT_METHODS[name] = CreditMethod(name, compute, frozenset(needs), skip,
                                            {p.name: p.default for p in params})
        return compute

    return register


def credit_method_named(name: str) -> CreditMethod:
    """The registered method `name`, or a ValueError that lists the methods."""
    if name not in CREDIT_METHODS:
        raise ValueError(f"credit {name!r} is not known; methods are: {', '.join(CREDIT_METHODS)}")
    return CREDIT_METHODS[name]


def credit_options() -> set[str]:  # every option some credit method takes (what `advantages` accepts)
    return {name for m in CREDIT_METHODS.values() for name in m.options}


def advantages(method: str, inputs: CreditInputs, **options: Any) -> CreditResult:
    """Per-turn advantages of every trajectory under credit method `method`: the one place where a method
    name picks the computation (the trainer, `viz.credit_table` and the shoot-out all come here).

    options: keyword options of the methods (e.g. gamma, omega, turn_weight, gae_lambda); each method
    takes those it names and ignores the others, so a caller can pass one set for every method. An
    option that no method takes is an error (a typo would otherwise change nothing without a word).
    """
    spec = credit_method_named(method)
    unknown = sorted(set(options) - credit_options())
    if unknown:
        raise ValueError(f"no credit method takes the option(s) {unknown}; options are: "
                         f"{', '.join(sorted(credit_options()))}")
    missing = sorted(n for n in spec.needs if getattr(inputs, n) is None)
    if missing:
        raise ValueError(f"credit {method!r} needs {' and '.join(missing)} in its inputs")
    out = spec.compute(inputs, **{k: v for k, v in options.items() if k in spec.options})
    result = out if isinstance(out, CreditResult) else CreditResult(list(out))
    if [len(a) for a in result.advantages] != inputs.num_turns:
        raise ValueError(f"credit {method!r} must return one advantage per turn of every trajectory")
    return result


def groups_to_train(method: str, inputs: CreditInputs, result: CreditResult) -> list[Hashable]:
    """The group ids whose trajectories the update trains on (first-seen order), by the method's rule.

    equal_rewards (outcome, turn): a group whose rewards are all equal is skipped. Under outcome credit
    its advantages are all 0 (no gradient); under turn credit only the turn term would be left, and the
    verifier stays in charge: turn rewards alone (a judge's taste) never train the model.
    zero_advantages (gigpo, turn_dense): skipped only when all its advantages are 0. GiGPO's step advantages
    come from the environment's own rewards, discounted, so they still separate the members of an
    all-success group (a shorter path through the same state scores higher); turn_dense lets the turn
    rewards alone train a group whose rollouts all failed.
    never (critic, reinforce): every group trains; the critic's baseline is V, not the group mean, and
    REINFORCE has no baseline to compare against.
    """
    rule = credit_method_named(method).skip
    members = _rows_by_key(inputs.group_ids)
    keep = []
    for group, rows in members.items():
        if rule == "equal_rewards":
            signal = len({inputs.rewards[i] for i in rows}) > 1
        else:
            signal = rule == "never" or any(bool((result.advantages[i] != 0).any()) for i in rows)
        if signal:
            keep.append(group)
    return keep


def to_tokens(per_turn: torch.Tensor, turn_index: Sequence[int], loss_mask: Sequence[int]) -> torch.Tensor:
    """One advantage per token from one per turn: A[turn_index[j]] where loss_mask[j] = 1, else 0 (a turn's
    observation and closing tokens carry its turn index but were not sampled). [K] -> [T]."""
    mask = torch.tensor(loss_mask, dtype=torch.float32)
    if len(per_turn) == 0:
        return torch.zeros_like(mask)
    return broadcast_to_tokens(per_turn.float(), torch.tensor(turn_index)) * mask


# ----- the methods --------------------------------------------------------------------------------------


@credit_method("outcome", skip="equal_rewards")
def outcome_credit(inputs: CreditInputs, *, scale: str = "group") -> list[torch.Tensor]:
    """GRPO: R(τ) normalised within its group (`outcome_advantages`), the same on every turn of τ."""
    return [a.repeat(k) for a, k in zip(outcome_advantages(inputs.rewards, inputs.group_ids, scale=scale),
                                        inputs.num_turns)]


@credit_method("gigpo", skip="zero_advantages")
def gigpo_credit(inputs: CreditInputs, *, gamma: float = 0.95, omega: float = 1.0,
                 similarity: float | None = None, scale: str = "group") -> CreditResult:
    """GiGPO: episode advantage + ω · step advantage within anchor-state step groups (`gigpo_advantages`)."""
    anchors = inputs.per_row(inputs.anchors)
    if not anchors:
        return CreditResult([torch.zeros(0) for _ in inputs.rewards])
    group_ids, traj_ids = inputs.row_ids()
    flat = gigpo_advantages(inputs.per_row(inputs.step_rewards), anchors, group_ids, traj_ids, gamma=gamma,
                            omega=omega, scale=scale, similarity=similarity)
    sizes = step_group_sizes(anchors, group_ids, similarity=similarity)
    return CreditResult(inputs.split(flat), stats={"step_group_sizes": dict(sorted(Counter(sizes).items())),
                                                   "step_group_size_mean": sum(sizes) / len(sizes)})


@credit_method("turn", needs=("turn_rewards",), skip="equal_rewards")
def turn_credit(inputs: CreditInputs, *, turn_weight: float = 0.5, gamma: float = 0.95,
                scale: str = "group") -> list[torch.Tensor]:
    """Outcome + turn_weight · turn-level advantage of per-turn rewards (`turn_advantages`)."""
    group_ids, traj_ids = inputs.row_ids()
    if not group_ids:
        return [torch.zeros(0) for _ in inputs.rewards]
    outcome = [r for r, k in zip(inputs.rewards, inputs.num_turns) for _ in range(k)]
    flat = turn_advantages(inputs.per_row(inputs.turn_rewards), outcome, group_ids, traj_ids,
                           weight=turn_weight, gamma=gamma, scale=scale)
    return inputs.split(flat)


@credit_method("critic", needs=("turn_rewards", "values"), skip="never")
def critic_credit(inputs: CreditInputs, *, gae_gamma: float = 1.0, gae_lambda: float = 0.95,
                  whiten: bool = False) -> CreditResult:
    """A learned critic: turn-level GAE(γ, λ) with the values V(s_t) (`gae`); returns are V's targets.

    Per-turn rewards: each turn's reward r_t plus R(τ) on the last turn. whiten=True normalises the
    advantages over the whole batch, (A − mean) / (std + 1e-6) (PPO's usual normalisation). Off by default:
    in a batch where every episode failed, the advantages are only V's small errors, and dividing by their
    std blows them up to a full-size update. On two-hop search_qa that sent one seed to "never answer" (0
    successes from step 2 on); unwhitened, the same seed reached 16 of 16 at step 5.
    """
    per_turn, returns = [], []
    for r, v, R in zip(inputs.turn_rewards, inputs.values, inputs.rewards):
        r = list(r)
        if r:
            r[-1] += R
        a, ret = gae(r, v, gamma=gae_gamma, lam=gae_lambda)
        per_turn.append(a)
        returns.append(ret)
    flat = torch.cat(per_turn) if per_turn else torch.zeros(0)
    if whiten and len(flat):
        mean, std = flat.mean(), (flat.std() if len(flat) > 1 else torch.tensor(1.0))
        per_turn = [(a - mean) / (std + 1e-6) for a in per_turn]
    return CreditResult(per_turn, returns=returns)


@credit_method("turn_dense", needs=("turn_rewards",), skip="zero_advantages")
def turn_dense_credit(inputs: CreditInputs, *, turn_weight: float = 0.5, gamma: float = 0.95,
                      scale: str = "group") -> list[torch.Tensor]:
    """The advantages of `turn` (`turn_advantages`), but a group is skipped only when all its
    advantages are 0.

    In a group whose rollouts all failed, A_O = 0 and A(τ, t) = turn_weight · A_T(τ, t): the turn rewards
    alone move the policy. That is the point when success is rare (most groups fail together and outcome
    credit has nothing to compare) and the turn reward is aligned with success; with a misaligned one, the
    policy learns whatever it pays for, with no verifier to stop it in those groups (notebook 07).
    """
    return turn_credit(inputs, turn_weight=turn_weight, gamma=gamma, scale=scale)


@credit_method("reinforce", needs=("turn_rewards",), skip="never")
def reinforce_credit(inputs: CreditInputs, *, gae_gamma: float = 1.0) -> list[torch.Tensor]:
    """REINFORCE without a baseline: each turn's advantage is its discounted return to go,

        A_t = G_t = Σ_{k≥t} γ^{k−t} r_k      (r_k: the turn reward, plus R(τ) on the last turn)

    the critic's rewards and discount (`gae_gamma`) with nothing subtracted: no V, no group mean, no
    normalisation. It is `gae` with V = 0 and λ = 1. With γ = 1 and no turn rewards, A_t = R(τ) on every
    turn. It compares nothing, so it works with groups of one rollout, and trains on every rollout
    (skip="never"): the estimator averages over all sampled episodes, those with A = 0 included.
    The reference point for a critic where no group baseline exists (notebook 08).
    """
    per_turn = []
    for r, R in zip(inputs.turn_rewards, inputs.rewards):
        r = list(r)
        if r:
            r[-1] += R
        per_turn.append(gae(r, [0.0] * len(r), gamma=gae_gamma, lam=1.0)[0])
    return per_turn
