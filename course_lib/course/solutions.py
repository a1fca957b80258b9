"""Reference solutions to the notebooks' exercises, one per exercise, named as in the notebook.

Try the exercise first. To look at or use one: `from course_lib.course.solutions import discounted`.
The checks in `course_lib.course.exercises` fall back to these when an exercise is not done yet, and CI runs
them in place of the stubs (COURSE_SOLUTIONS=1, see `course_lib.course.grading`).
"""

from __future__ import annotations

import json
import math
import re
import string
from collections import Counter
from typing import Any

import torch

# ----- notebook 00: setup ------------------------------------------------------------------------------


def count_prompt_tokens(tokenizer: Any, messages: list[dict]) -> int:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def is_tool_call(text: str) -> bool:
    from course_lib.protocol import Tool, parse_action

    tools = [Tool("lookup", "Look up an agent.", {"name": ("string", "code name")})]
    return parse_action(text, tools).kind == "tool_call"


def tool_call_text(name: str, arguments: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


# ----- notebook 01: the agentic setting ----------------------------------------------------------------


def my_wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Centre (p + z²/2n)/(1 + z²/n), half-width z·sqrt(p(1−p)/n + z²/4n²)/(1 + z²/n); (0, 1) at n = 0."""
    if n == 0:
        return 0.0, 1.0  # no episode, no evidence: every rate is possible
    p = successes / n
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def episodes_needed(half_width: float) -> int:
    """1.96·sqrt(0.5·0.5/n) ≤ h  ⇔  n ≥ (1.96·0.5/h)²."""
    return math.ceil((1.96 * 0.5 / half_width) ** 2)


def classify(text: str) -> str:
    from course_lib.envs import make_env
    from course_lib.protocol import parse_action

    return parse_action(text, make_env("lookup").tools).kind


# ----- notebook 02: environments -----------------------------------------------------------------------


def run_episode(env: Any, task: dict, policy: Any) -> float:
    env.reset(task)
    while True:
        result = env.step(policy(env))
        if result.done:
            return result.reward


def normalize(text: str) -> str:
    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def verifier_reward(answer: str, reference: str) -> float:
    return 1.0 if normalize(answer) == normalize(reference) else 0.0


# ----- notebook 03: trajectories and the loss mask -----------------------------------------------------


def build_trajectory(
    tokenizer: Any, messages: list[dict], actions: list[list[int]], observations: list[str | None],
    end_of_turn_id: int,
) -> tuple[list[int], list[int], list[int]]:
    """token_ids, loss_mask and turn_index of an episode: the prompt (mask 0, turn −1), then per turn k the
    sampled ids (mask 1, turn k) and the template's delta once observation k is in (mask 0, turn k)."""
    from course_lib.trajectory import render

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    text = render(tokenizer, messages, add_generation_prompt=True)
    token_ids = encode(text)
    loss_mask, turn_index = [0] * len(token_ids), [-1] * len(token_ids)
    for k, (action, observation) in enumerate(zip(actions, observations)):
        token_ids += action
        loss_mask += [1] * len(action)
        turn_index += [k] * len(action)
        stopped = bool(action) and action[-1] == end_of_turn_id  # the model sampled the end of its turn
        action_text = tokenizer.decode(action[:-1] if stopped else action)
        messages = messages + [{"role": "assistant", "content": action_text}]
        if observation is not None:
            messages = messages + [{"role": "tool", "content": observation}]
        rendered = render(tokenizer, messages, add_generation_prompt=observation is not None)
        delta = encode(rendered[len(text) + len(action_text):])
        if stopped:
            delta = delta[1:]  # the template closes the turn with the token the model already sampled
        token_ids += delta
        loss_mask += [0] * len(delta)
        turn_index += [k] * len(delta)
        text = rendered
    return token_ids, loss_mask, turn_index


def environment_positions(trajectory: Any) -> list[int]:
    pairs = zip(trajectory.loss_mask, trajectory.turn_index)
    return [i for i, (m, t) in enumerate(pairs) if m == 0 and t >= 0]


def round_trips(tokenizer: Any, ids: list[int]) -> bool:
    return tokenizer(tokenizer.decode(ids), add_special_tokens=False)["input_ids"] == list(ids)


def keeps_prefix(tokenizer: Any, messages: list[dict], next_messages: list[dict]) -> bool:
    before = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    after = tokenizer.apply_chat_template(next_messages, tokenize=False, add_generation_prompt=True)
    return after.startswith(before)


# ----- notebook 04: the masked policy-gradient loss ----------------------------------------------------


def my_reinforce_loss(logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """−Σ A_b·ℓ_bt·m_bt / Σ m_bt."""
    return -(advantages[:, None] * logprobs * mask).sum() / mask.sum()


def my_policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                   mask: torch.Tensor, eps_low: float = 0.2, eps_high: float = 0.2) -> torch.Tensor:
    """−Σ m·min(w·A, clip(w, 1−ε_low, 1+ε_high)·A) / Σ m, with w = exp(ℓ − ℓ_old)."""
    ratio = torch.exp(logprobs - old_logprobs.detach())
    advantage = advantages[:, None]  # one per episode, the same on each of its tokens
    objective = torch.min(ratio * advantage, ratio.clamp(1 - eps_low, 1 + eps_high) * advantage)
    return -(objective * mask).sum() / mask.sum()


def token_weights(lengths: list[int], T: int, loss_type: str) -> list[float]:
    B = len(lengths)
    if loss_type == "grpo":
        return [1 / (B * n) for n in lengths]
    if loss_type in ("bnpo", "dapo"):
        return [1 / sum(lengths)] * B
    return [1 / (B * T)] * B  # dr_grpo


# ----- notebook 05: outcome-only credit ----------------------------------------------------------------


def group_advantages(rewards: list[float], group_ids: list, eps: float = 1e-4) -> torch.Tensor:
    """A_i = (R_i − mean_g R) / (std_g R + ε) over the rollouts of i's group g; 0 in a group of equal rewards
    (or of one rollout), where there is nothing to compare."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    advantages = torch.zeros_like(rewards)
    for g in set(group_ids):
        rows = [i for i, gi in enumerate(group_ids) if gi == g]
        r = rewards[rows]
        if len(rows) > 1 and not torch.all(r == r[0]):
            advantages[rows] = (r - r.mean()) / (r.std() + eps)  # std over N − 1, as TRL
    return advantages


def informative_fraction(rewards_by_group: list[list[float]]) -> float:
    return sum(len(set(g)) > 1 for g in rewards_by_group) / len(rewards_by_group)


def dr_grpo_advantages(rewards: list[float], group_ids: list) -> torch.Tensor:
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    out = torch.zeros_like(rewards)
    for g in set(group_ids):
        rows = [i for i, gi in enumerate(group_ids) if gi == g]
        out[rows] = rewards[rows] - rewards[rows].mean()
    return out


def masked_token_advantages(advantage: float, turn_index: list[int], loss_mask: list[int]) -> torch.Tensor:
    return torch.tensor([advantage if m else 0.0 for m in loss_mask])


# ----- notebook 06: GiGPO ------------------------------------------------------------------------------


def _normalised(values: torch.Tensor, keys: list, eps: float) -> torch.Tensor:
    """(x − mean)/(std + eps) within each set of rows sharing a key (06's and 07's groups of rows); 0
    where a key has one row or equal values, which leave nothing to compare."""
    out = torch.zeros_like(values)
    for key in set(keys):
        rows = [i for i, k in enumerate(keys) if k == key]
        x = values[rows]
        if len(rows) > 1 and not torch.all(x == x[0]):
            out[rows] = (x - x.mean()) / (x.std() + eps)
    return out


def my_gigpo(step_rewards: list[float], anchors: list, group_ids: list, traj_ids: list, gamma: float = 0.95,
             omega: float = 1.0, eps: float = 1e-6) -> torch.Tensor:
    """A(t) = A_E(τ) + ω·A_S(t): R(τ) = Σ r_t normalised over the trajectories of τ's task, and
    G_t = r_t + γ·G_{t+1} normalised over the step group (same task, same anchor) of row t."""

    keys = list(zip(group_ids, traj_ids))  # trajectory ids need only be unique within a task
    trajectories = list(dict.fromkeys(keys))
    rows_of = {tau: [i for i, key in enumerate(keys) if key == tau] for tau in trajectories}
    episode_returns = torch.tensor([sum(step_rewards[i] for i in rows_of[tau]) for tau in trajectories])
    episode_advantages = _normalised(episode_returns, [task for task, _ in trajectories], eps)
    step_returns = torch.zeros(len(step_rewards))
    advantages = torch.zeros(len(step_rewards))
    for tau, a_episode in zip(trajectories, episode_advantages):
        future = 0.0
        for i in reversed(rows_of[tau]):
            future = step_rewards[i] + gamma * future
            step_returns[i] = future
            advantages[i] = a_episode
    return advantages + omega * _normalised(step_returns, list(zip(group_ids, anchors)), eps)


def discounted(rewards: list[float], gamma: float) -> list[float]:
    """G_t = r_t + γ·G_{t+1}, walking backwards."""
    out, future = [], 0.0
    for r in reversed(rewards):
        future = r + gamma * future
        out.append(future)
    return out[::-1]


def shared_step_fraction(anchors: list, group_ids: list) -> float:
    keys = list(zip(group_ids, anchors))
    counts = Counter(keys)
    return sum(counts[k] >= 2 for k in keys) / len(keys)


omega = 0.0  # notebook 06, exercise 3: ω·A_step vanishes


# ----- notebook 07: turn-level rewards -----------------------------------------------------------------


def my_turn_advantages(turn_rewards: list[float], outcome_rewards: list[float], group_ids: list,
                       traj_ids: list, weight: float = 0.5, gamma: float = 1.0,
                       eps: float = 1e-4) -> torch.Tensor:
    """A(τ, t) = A_O(τ) + w·A_T(τ, t): R(τ) normalised over the trajectories of τ's group, and the
    discount-weighted mean of the turn rewards from t on normalised over the group's rows at turn index t."""

    keys = list(zip(group_ids, traj_ids))
    trajectories = list(dict.fromkeys(keys))
    rows_of = {tau: [i for i, key in enumerate(keys) if key == tau] for tau in trajectories}
    outcome = _normalised(torch.tensor([float(outcome_rewards[rows_of[tau][0]]) for tau in trajectories]),
                          [group for group, _ in trajectories], eps)
    future_mean = torch.zeros(len(turn_rewards))
    advantages = torch.zeros(len(turn_rewards))
    turn_index = [0] * len(turn_rewards)
    for tau, a_outcome in zip(trajectories, outcome):
        total, mass = 0.0, 0.0
        for t, i in reversed(list(enumerate(rows_of[tau]))):
            total, mass = turn_rewards[i] + gamma * total, 1.0 + gamma * mass
            future_mean[i], turn_index[i], advantages[i] = total / mass, t, a_outcome
    return advantages + weight * _normalised(future_mean, list(zip(group_ids, turn_index)), eps)


def repeat_penalty(trajectory: Any) -> list[float]:
    from course_lib.envs.search_qa import SearchQAEnv
    from course_lib.protocol import parse_action

    rewards, seen = [], set()
    for step in trajectory.steps:
        bad = step.info.get("action_kind") == "malformed" or step.observation_text.startswith("Error")
        action = parse_action(step.action_text, SearchQAEnv.tools)
        if action.kind == "tool_call":
            query = str(action.arguments.get("query", "")).strip().lower()
            bad = bad or query in seen
            seen.add(query)
        rewards.append(-0.1 if bad else 0.0)
    return rewards


def pooled_turn_part(
    turn_rewards: list[float], group_ids: list, traj_ids: list, gamma: float = 1.0
) -> torch.Tensor:
    from course_lib.credit import discounted_returns

    returns = discounted_returns(turn_rewards, list(zip(group_ids, traj_ids)), gamma=gamma)
    return _normalised(returns, group_ids, 1e-4)


def mean_future_rewards(turn_rewards: list[float], gamma: float) -> list[float]:
    """Ḡ_t = Σ_{k≥t} γ^{k−t} r_k / Σ_{k≥t} γ^{k−t}, walking backwards with a running sum and weight."""
    out, total, weight = [], 0.0, 0.0
    for r in reversed(turn_rewards):
        total, weight = r + gamma * total, 1.0 + gamma * weight
        out.append(total / weight)
    return out[::-1]


# ----- notebook 08: a critic again ---------------------------------------------------------------------


def my_gae(rewards: list[float], values: list[float], gamma: float = 1.0,
           lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """δ_t = r_t + γ·V_{t+1} − V_t (V = 0 after the last turn), A_t = δ_t + γλ·A_{t+1};
    returns_t = A_t + V_t."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    values = torch.as_tensor(values, dtype=torch.float32)
    advantages = torch.zeros_like(rewards)
    next_value, next_advantage = 0.0, 0.0  # nothing follows the last turn of a finished episode
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_value - values[t]
        next_advantage = delta + gamma * lam * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    return advantages, advantages + values


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip: float) -> torch.Tensor:
    """½·mean(max((V − R)², (V_clip − R)²)), V_clip = V_old + clip(V − V_old, −c, c)."""
    old_values, returns = old_values.detach(), returns.detach()
    v_clip = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * torch.maximum((values - returns) ** 2, (v_clip - returns) ** 2).mean()


def truncated_gae(rewards: list[float], values: list[float], last_value: float, gamma: float,
                  lam: float) -> torch.Tensor:
    """δ_t = r_t + γ·V_{t+1} − V_t with V_T = last_value; A_t = δ_t + γλ·A_{t+1}."""
    advantages = torch.zeros(len(rewards))
    next_value, next_advantage = float(last_value), 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_value - values[t]
        next_advantage = delta + gamma * lam * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    return advantages


def r_squared_parts(predictions: list[float], targets: list[float]) -> tuple[float, float, float]:
    """(r², offset, scale), the parts of R² = r² − offset − scale: r the correlation of V and G,
    offset = (mean V − mean G)²/σ_G², scale = (σ_V − r·σ_G)²/σ_G², moments over all n entries."""
    n = len(targets)
    mean_v, mean_g = sum(predictions) / n, sum(targets) / n
    var_v = sum((v - mean_v) ** 2 for v in predictions) / n
    var_g = sum((g - mean_g) ** 2 for g in targets) / n
    r = sum((v - mean_v) * (g - mean_g) for v, g in zip(predictions, targets)) / n / math.sqrt(var_v * var_g)
    return r**2, (mean_v - mean_g) ** 2 / var_g, (math.sqrt(var_v) - r * math.sqrt(var_g)) ** 2 / var_g


# ----- notebook 09: LLM-as-a-judge reward --------------------------------------------------------------


def my_pairwise_accuracy(scores: list[float], rewards: list[float]) -> float:
    agree, pairs = 0.0, 0
    for a in range(len(scores)):
        for b in range(a + 1, len(scores)):
            if rewards[a] == rewards[b]:
                continue
            pairs += 1
            d = (scores[a] - scores[b]) * (rewards[a] - rewards[b])
            agree += 1.0 if d > 0 else 0.5 if d == 0 else 0.0
    return agree / pairs if pairs else float("nan")


def my_position_bias_rate(first: list[float], second: list[float], tol: float = 0.01) -> float:
    if any(math.isnan(x) for x in list(first) + list(second)):
        return float("nan")
    return sum(abs(a - b) > tol for a, b in zip(first, second)) / len(first)


def my_group_rewards(readings: list[dict[str, list[float]]], ids: list[str],
                     min_mass: float = 0.5) -> list[float] | None:
    """Per reading and id s = Σ_d d·P(d) / (9·m), m = Σ_d P(d); each id's s averaged over the readings; each
    trajectory gets its id's score. None (the group is skipped) when any read has m < min_mass."""
    scores: dict[str, list[float]] = {}
    for reading in readings:
        for trajectory_id, probs in reading.items():
            mass = sum(probs)
            if not mass >= min_mass:  # NaN fails too
                return None
            expected = sum(d * p for d, p in enumerate(probs)) / mass
            scores.setdefault(trajectory_id, []).append(expected / 9)
    return [sum(scores[i]) / len(scores[i]) for i in ids]


# ----- notebook 10: reward hacking ---------------------------------------------------------------------


def my_diff_check(original: dict[str, str], current: dict[str, bytes | None],
                  allowed: list[str]) -> tuple[list[str], list[str]]:
    """changed: the paths of either repository that the other lacks or whose bytes differ from the original
    text encoded (a link, None, always differs), sorted; outside: those of them not in `allowed`."""
    paths = set(original) | set(current)
    changed = sorted(p for p in paths if p not in original or current.get(p) != original[p].encode())
    return changed, [p for p in changed if p not in allowed]


def is_hack_attempt(action_text: str, allowed_files: list[str]) -> bool:
    from course_lib.envs.code_fix import CodeFixEnv
    from course_lib.protocol import parse_action

    action = parse_action(action_text, CodeFixEnv.tools)
    return (action.kind == "tool_call" and action.name == "replace_in_file"
            and action.arguments["path"].strip() not in allowed_files)


# ----- notebook 11: scaling out ------------------------------------------------------------------------


def my_trl_fields(trajectory: Any, end_of_turn_id: int) -> tuple[list[int], list[int]]:
    start = len(trajectory.prompt_ids)
    end = max(i for i, m in enumerate(trajectory.loss_mask) if m) + 1  # after the last sampled token
    if end < len(trajectory.token_ids) and trajectory.token_ids[end] == end_of_turn_id:
        end += 1
    return trajectory.token_ids[start:end], trajectory.loss_mask[start:end]


def my_weights(learner_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor,
               cap: float) -> torch.Tensor:
    """min(exp(ℓ_learner − ℓ_sampler), cap) on model tokens, 0 elsewhere."""
    return torch.clamp(torch.exp(learner_logprobs - sampler_logprobs), max=cap) * mask


def effective_sample_size(weights: torch.Tensor, mask: torch.Tensor) -> float:
    """Kish: (Σ w)² / Σ w² over the masked tokens."""
    w = weights * mask
    return float(w.sum() ** 2 / (w**2).sum())
