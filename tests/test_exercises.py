"""Every exercise check on three answers: the notebook's stub, the reference solution, a typical wrong answer.

A stub gets "Not implemented yet", the reference "Correct!", the wrong answer its specific hint; the stub and
the wrong answer get the reference back, so the notebook's later cells run. Under COURSE_SOLUTIONS=1 (CI)
a stub is graded as the reference, and a wrong answer raises.

The checks of the chapters' key ideas (03's trajectory and mask, 04's clipped loss, 05's group advantage,
06's GiGPO step groups, 07's turn advantages, 08's GAE, 09's pairwise accuracy and group rewards, 10's diff
check), the two that a text search once passed (00's is_tool_call, 10's is_hack_attempt) and 01's Wilson
interval, 08's parts of R² and 11's importance weights are also fed each typical mistake they target, and each
must get its own hint.
"""

from __future__ import annotations

import copy
import importlib
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from course_lib.course import solutions as sol
from course_lib.course.grading import ExerciseFailed
from course_lib.losses import policy_loss

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
# one module of checks per notebook: course_lib.course.exercises.nb00 ... nb11
MODULES = {f"{n:02d}": importlib.import_module(f"course_lib.course.exercises.nb{n:02d}") for n in range(12)}
ex = SimpleNamespace(**{name: getattr(m, name) for m in MODULES.values() for name in dir(m)
                        if name.startswith("check_")})


def stub(*args, **kwargs):
    raise NotImplementedError


@pytest.fixture(scope="module")
def tok():
    """The embedded model's tokenizer alone (no weights): enough for the tokenizer exercises."""
    from transformers import AutoTokenizer

    from course_lib.models import EMBEDDED, resolve_model_path

    return AutoTokenizer.from_pretrained(resolve_model_path(EMBEDDED))


@pytest.fixture(autouse=True)
def learner_mode(monkeypatch):
    monkeypatch.delenv("COURSE_SOLUTIONS", raising=False)


def _last_two_only(tokenizer):
    """A chat template that renders only the last two messages: it rewrites history."""
    rewriting = copy.deepcopy(tokenizer)
    rewriting.chat_template = ("{% for m in messages[-2:] %}{{ '<|im_start|>' + m['role'] + '\\n' "
                               "+ m['content'] + '<|im_end|>\\n' }}{% endfor %}"
                               "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    return rewriting


def _fair_turn_part(turn_rewards, group_ids, traj_ids, gamma=1.0):
    from course_lib.credit import turn_advantages

    return turn_advantages(turn_rewards, [0.0] * len(turn_rewards), group_ids, traj_ids, weight=1.0)


def _untruncated_gae(rewards, values, last_value, gamma, lam):
    from course_lib.credit import gae

    return gae(rewards, values, gamma=gamma, lam=lam)[0]


def _ties_count_zero(scores, rewards):
    pairs = [(a, b) for a in range(len(scores)) for b in range(a + 1, len(scores))
             if rewards[a] != rewards[b]]
    if not pairs:
        return math.nan
    return sum((scores[a] - scores[b]) * (rewards[a] - rewards[b]) > 0 for a, b in pairs) / len(pairs)


def _run_one_step(env, task, policy):
    env.reset(task)
    return env.step(policy(env)).reward


# ----- typical mistakes of the key-idea checks ---------------------------------------------------------


def _batch_normalised(rewards, eps=1e-4):
    """Every reward against the whole batch's mean and std: no groups."""
    r = torch.as_tensor(rewards, dtype=torch.float32)
    return (r - r.mean()) / (r.std() + eps)


def _in_groups(rewards, group_ids, eps=1e-4, *, skip_flat=True, sign=1.0, scale=True, correction=1):
    """Group advantages with one thing changed: no special case for flat groups, the sign, no std, or the
    biased std."""
    r = torch.as_tensor(rewards, dtype=torch.float32)
    out = torch.zeros_like(r)
    for g in dict.fromkeys(group_ids):
        rows = [i for i, x in enumerate(group_ids) if x == g]
        x = r[rows]
        if skip_flat and (len(rows) == 1 or torch.all(x == x[0])):
            continue
        centred = x - x.mean()
        out[rows] = sign * (centred / (x.std(correction=correction) + eps) if scale else centred)
    return out


def _in_blocks_of_four(rewards, group_ids, eps=1e-4):
    """Takes groups to be consecutive blocks of four rollouts."""
    return _in_groups(rewards, [i // 4 for i in range(len(rewards))], eps)


def _objective(logprobs, old_logprobs, advantages, eps_low, eps_high):
    ratio = torch.exp(logprobs - old_logprobs.detach())
    a = advantages[:, None]
    return torch.min(ratio * a, ratio.clamp(1 - eps_low, 1 + eps_high) * a)


def _loss_with(mistake):
    """A policy loss with one mistake."""
    def loss(lp, old, a, m, eps_low=0.2, eps_high=0.2):
        ratio = torch.exp(lp - old)
        objective = _objective(lp, old, a, eps_low, eps_high)
        if mistake == "objective":
            return (objective * m).sum() / m.sum()
        if mistake == "no mask":
            return -objective.mean()
        if mistake == "B·T":
            return -(objective * m).sum() / m.numel()
        if mistake == "B":
            return -(objective * m).sum() / m.shape[0]
        if mistake == "per episode":
            return policy_loss(lp, old, a, m, loss_type="grpo", eps_low=eps_low, eps_high=eps_high)[0]
        if mistake == "min of ratios":  # min(w, clip(w))·A: right for A > 0, the wrong side for A < 0
            clipped = torch.min(ratio, ratio.clamp(1 - eps_low, 1 + eps_high))
            return -(clipped * a[:, None] * m).sum() / m.sum()
        if mistake == "always clipped":
            return -(ratio.clamp(1 - eps_low, 1 + eps_high) * a[:, None] * m).sum() / m.sum()
        if mistake == "swapped ε":
            return sol.my_policy_loss(lp, old, a, m, eps_high, eps_low)
        assert mistake == "detached ratio"
        return sol.my_policy_loss(lp.detach(), old, a, m, eps_low, eps_high) + 0 * lp.sum()
    return loss


def _json_between_tags(text):
    """Well-formed when the text between the tags is JSON: the tools and the rest of the turn unchecked."""
    if "<tool_call>" not in text or "</tool_call>" not in text:
        return False
    try:
        json.loads(text.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0])
    except ValueError:
        return False
    return True


def _parsed_path_outside(text, allowed):
    """Parses the call, but compares the path as written, without stripping it."""
    from course_lib.envs.code_fix import CodeFixEnv
    from course_lib.protocol import parse_action

    action = parse_action(text, CodeFixEnv.tools)
    return (action.kind == "tool_call" and action.name == "replace_in_file"
            and action.arguments["path"] not in allowed)


def _any_call_outside(text, allowed):
    """Flags any tool call whose path is outside the allowed files, reads included."""
    from course_lib.envs.code_fix import CodeFixEnv
    from course_lib.protocol import parse_action

    action = parse_action(text, CodeFixEnv.tools)
    return action.kind == "tool_call" and action.arguments.get("path", "").strip() not in ["", *allowed]


def _turn_index(traj_ids):
    """The turn index of every row (rows of one trajectory in time order)."""
    return [list(traj_ids[:i]).count(tau) for i, tau in enumerate(traj_ids)]


def _per_trajectory(per_row_values, group_ids, traj_ids, normalise):
    """normalise(one value per trajectory, its group ids), copied back onto the trajectory's rows."""
    first = {tau: traj_ids.index(tau) for tau in dict.fromkeys(traj_ids)}
    out = normalise([per_row_values[i] for i in first.values()], [group_ids[i] for i in first.values()])
    return torch.stack([out[list(first).index(tau)] for tau in traj_ids])


def _gigpo_with(mistake):
    """GiGPO with one mistake, built from the library's parts."""
    from course_lib.credit import discounted_returns, gigpo_advantages, outcome_advantages

    def advantages(r, anchors, groups, trajs, gamma=0.95, omega=1.0, eps=1e-6):
        def library(anchors=anchors, gamma=gamma, omega=omega):
            return gigpo_advantages(r, anchors, groups, trajs, gamma=gamma, omega=omega, eps=eps)

        episode = library(omega=0.0)
        step = library(omega=1.0) - episode
        states = list(zip(groups, anchors))
        totals = {tau: sum(x for x, t in zip(r, trajs) if t == tau) for tau in trajs}
        made = {
            "turn index": lambda: library(anchors=_turn_index(trajs)),
            "anchor alone": lambda: episode + omega * outcome_advantages(
                discounted_returns(r, trajs, gamma=gamma), anchors, eps=eps),
            "task alone": lambda: episode + omega * outcome_advantages(
                discounted_returns(r, trajs, gamma=gamma), groups, eps=eps),
            "no discount": lambda: library(gamma=1.0),
            "γ = 0.95": lambda: library(gamma=0.95),
            "episode return": lambda: episode + omega * outcome_advantages(
                [totals[t] for t in trajs], states, eps=eps),
            "own reward": lambda: episode + omega * outcome_advantages(r, states, eps=eps),
            "episode over rows": lambda: outcome_advantages([totals[t] for t in trajs], groups, eps=eps)
            + omega * step,
            "biased std": lambda: _per_trajectory([totals[t] for t in trajs], groups, trajs,
                                                  lambda v, g: _in_groups(v, g, eps, correction=0))
            + omega * _in_groups(discounted_returns(r, trajs, gamma=gamma), states, eps, correction=0),
            "singleton divided": lambda: _per_trajectory([totals[t] for t in trajs], groups, trajs,
                                                         lambda v, g: _in_groups(v, g, eps, skip_flat=False))
            + omega * _in_groups(discounted_returns(r, trajs, gamma=gamma), states, eps, skip_flat=False),
            "ω ignored": lambda: episode + step,
            "ω on the episode": lambda: omega * episode + step,
            "convex": lambda: (1 - omega) * episode + omega * step,
            "no episode part": lambda: omega * step,
            "no step part": lambda: episode,
        }
        return made[mistake]()
    return advantages


def _turn_with(mistake):
    """Turn advantages with one mistake, from the library's two parts and a loop of one's own."""
    from course_lib.credit import outcome_advantages, turn_advantages

    def advantages(turn_r, outcome_r, groups, trajs, weight=0.5, gamma=1.0, eps=1e-4):
        outcome = turn_advantages(turn_r, outcome_r, groups, trajs, weight=0.0, gamma=gamma, eps=eps)
        turn = turn_advantages(turn_r, outcome_r, groups, trajs, weight=1.0, gamma=gamma, eps=eps) - outcome
        turns = _turn_index(trajs)
        by_turn = list(zip(groups, turns))
        future = _future_means(turn_r, trajs, gamma)
        if mistake in ("sum", "past", "after", "shifted"):  # a wrong Ḡ_t
            summary = []
            for tau, t in zip(trajs, turns):
                r = [x for x, u in zip(turn_r, trajs) if u == tau]
                r = r[1:] + [0.0] if mistake == "shifted" else r
                ks = {"sum": range(t, len(r)), "past": range(t + 1), "after": range(t + 1, len(r)),
                      "shifted": range(t, len(r))}[mistake]
                weights = [gamma ** abs(k - t) for k in ks]
                total = sum(w * r[k] for w, k in zip(weights, ks))
                summary.append(total if mistake == "sum" else total / sum(weights) if weights else 0.0)
            return outcome + weight * outcome_advantages(summary, by_turn, eps=eps)
        made = {
            "pooled": lambda: outcome + weight * outcome_advantages(future, groups, eps=eps),
            "across groups": lambda: outcome + weight * outcome_advantages(future, turns, eps=eps),
            "outcome over rows": lambda: outcome_advantages(outcome_r, groups, eps=eps) + weight * turn,
            "γ ignored": lambda: turn_advantages(turn_r, outcome_r, groups, trajs, weight=weight, gamma=1.0,
                                                 eps=eps),
            "weight ignored": lambda: outcome + turn,
            "weight on the outcome": lambda: weight * outcome + turn,
            "no outcome part": lambda: weight * turn,
            "singleton divided": lambda: outcome + weight * _in_groups(future, by_turn, eps, skip_flat=False),
        }
        return made[mistake]()
    return advantages


def _future_means(turn_r, trajs, gamma):
    """Ḡ_t of every row: sol.mean_future_rewards, trajectory by trajectory."""
    out = []
    for tau in dict.fromkeys(trajs):
        out += sol.mean_future_rewards([r for r, x in zip(turn_r, trajs) if x == tau], gamma)
    return torch.tensor(out)


def _gae_with(mistake):
    """GAE with one mistake."""
    from course_lib.credit import gae

    def advantages_and_returns(rewards, values, gamma=1.0, lam=0.95):
        v = torch.tensor(values)
        if mistake == "swapped γ and λ":
            return gae(rewards, values, gamma=lam, lam=gamma)
        a, returns = gae(rewards, values, gamma=gamma, lam=lam)
        if mistake == "returns are the advantages":
            return a, a
        if mistake == "returns are A − V":
            return a, a - v
        if mistake == "returns are Monte Carlo":
            return a, gae(rewards, [0.0] * len(rewards), gamma=gamma, lam=1.0)[0]
        if mistake == "swapped outputs":
            return returns, a
        n, out, carried = len(rewards), [0.0] * len(rewards), 0.0
        after_last = {"bootstraps the terminal state": values[-1], "wraps round": values[0]}.get(mistake, 0.0)
        delta = [rewards[t] + gamma * (values[t + 1] if t + 1 < n else after_last)
                 - (0.0 if mistake == "no − V_t" else values[t]) for t in range(n)]
        decay = {"λ alone": lam, "γ alone": gamma}.get(mistake, gamma * lam)
        for t in (range(n) if mistake == "forwards" else reversed(range(n))):
            carried = delta[t] + decay * carried
            out[t] = carried
        return torch.tensor(out), torch.tensor(out) + v
    return advantages_and_returns


def _pairs_separated(scores, rewards, *, tie=0.5, every_pair=False, when_none=math.nan):
    """Pairwise accuracy with one thing changed: what a judge tie counts, whether pairs with equal rewards
    count too, and what comes back when no pair is separated."""
    pairs = [(a, b) for a in range(len(scores)) for b in range(a + 1, len(scores))
             if every_pair or rewards[a] != rewards[b]]
    if not pairs:
        return when_none
    return _agreements(scores, rewards, pairs, tie) / len(pairs)


def _agreements(scores, rewards, pairs, tie=0.5):
    return sum(1.0 if (scores[a] - scores[b]) * (rewards[a] - rewards[b]) > 0
               else tie if scores[a] == scores[b] else 0.0 for a, b in pairs)


def _no_pair_divides(scores, rewards):
    """Divides by the number of separated pairs, even when it is 0."""
    n = len(scores)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if rewards[a] != rewards[b]]
    return _agreements(scores, rewards, pairs) / len(pairs)


def _read(probs, *, top=False, renormalise=True, divisor=9.0):
    """One forced read's score, or a typical mistake of it."""
    if top:
        return max(range(10), key=probs.__getitem__) / divisor
    return sum(d * p for d, p in enumerate(probs)) / (sum(probs) if renormalise else 1.0) / divisor


def _group_rewards_with(mistake):
    """my_group_rewards with one mistake."""
    def rewards(readings, ids, min_mass=0.5):
        short = any(sum(p) < (0.5 if mistake == "fixed min_mass" else min_mass)
                    for r in readings for p in r.values())
        if short and mistake == "zeros":
            return [0.0] * len(ids)
        if short and mistake != "no min_mass":
            return None
        if mistake == "mean of the probabilities":
            mean = {i: [sum(r[i][d] for r in readings) / len(readings) for d in range(10)]
                    for i in readings[0]}
            return [_read(mean[i]) for i in ids]
        used = readings[:1] if mistake == "first reading" else readings
        options = {"most likely digit": {"top": True}, "not renormalised": {"renormalise": False},
                   "/ 10": {"divisor": 10.0}}.get(mistake, {})
        score = {i: sum(_read(r[i], **options) for r in used) / len(used) for i in readings[0]}
        return [score[i] for i in (dict.fromkeys(ids) if mistake == "one per id" else ids)]
    return rewards


def _diff_with(mistake):
    """my_diff_check with one mistake."""
    def diff(original, current, allowed):
        paths = {"original's paths": set(original), "current paths": set(current)}.get(
            mistake, set(original) | set(current))
        if mistake == "text against bytes":
            changed = [p for p in paths if current.get(p) != original.get(p)]
        elif mistake == "links unchanged":
            changed = [p for p in paths if p not in original or p not in current
                       or (current[p] is not None and current[p] != original[p].encode())]
        elif mistake == "current[p]":
            changed = [p for p in paths if p not in original or current[p] != original[p].encode()]
        else:
            changed = [p for p in paths if p not in original or current.get(p) != original[p].encode()]
        changed = sorted(changed, reverse=mistake == "unsorted")
        if mistake == "outside over every path":
            return changed, sorted(p for p in paths if p not in allowed)
        return changed, [p for p in changed if p not in allowed]
    return diff


def _wald(successes, n, z=1.96):
    """The normal (Wald) interval p ± z·sqrt(p(1−p)/n), clipped to [0, 1]."""
    p = successes / n
    half = z * math.sqrt(p * (1 - p) / n)
    return max(0.0, p - half), min(1.0, p + half)


def _wilson_with(mistake):
    """Wilson's interval with one mistake ("no guard": it divides by n = 0)."""
    def interval(successes, n, z=1.96):
        if n == 0 and mistake != "no guard":
            return (0.0, 0.0) if mistake == "n = 0 gives (0, 0)" else (0.0, 1.0)
        z = {"90% z": 1.645, "z ignored": 1.96}.get(mistake, z)
        p = successes / n
        shrink = 1 + z**2 / n
        centre = p if mistake == "centre at p" else (p + z**2 / (2 * n)) / shrink
        extra = 0.0 if mistake == "no z²/4n²" else z**2 / (4 * n**2)
        half = z * math.sqrt(p * (1 - p) / n + extra) / shrink
        return max(0.0, centre - half), min(1.0, centre + half)
    return interval


def _weights_with(mistake):
    """Truncated importance weights with one mistake."""
    def weights(learner, sampler, mask, cap):
        ratio = torch.exp(learner - sampler)
        return {
            "ratio inverted": lambda: torch.clamp(torch.exp(sampler - learner), max=cap) * mask,
            "no mask": lambda: torch.clamp(ratio, max=cap),
            "masked inside the exp": lambda: torch.clamp(torch.exp((learner - sampler) * mask), max=cap),
            "no cap": lambda: ratio * mask,
            "clipped both ways": lambda: torch.clamp(ratio, 1 / cap, cap) * mask,
            "cap on the log-ratio": lambda: torch.exp(torch.clamp(learner - sampler, max=cap)) * mask,
            "ratio of log-probs": lambda: torch.clamp(learner / sampler, max=cap) * mask,
        }[mistake]()
    return weights


def _parts_with(mistake):
    """r_squared_parts with one mistake, written with torch as a learner might."""
    def parts(predictions, targets):
        v, g = torch.tensor(predictions, dtype=torch.float64), torch.tensor(targets, dtype=torch.float64)
        correction = 1 if mistake == "torch's default std" else 0
        sd_v, sd_g = v.std(correction=correction), g.std(correction=correction)
        r = float(torch.corrcoef(torch.stack([v, g]))[0, 1])
        error = float(v.mean() - g.mean())
        offset = {"offset not squared": error / sd_g**2, "offset in reward units": error**2}.get(
            mistake, error**2 / sd_g**2)
        scale = (sd_v - (1.0 if mistake == "scale against σ_G" else r) * sd_g) ** 2 / sd_g**2
        return (r if mistake == "r, not r²" else r**2), float(offset), float(scale)
    return parts


# check name -> [(the mistake, a function that makes it, a piece of the hint it must get)]
MISTAKES = {
    "wilson_interval": [
        ("the normal interval", _wald, "That is the normal interval"),
        ("z for 90%", _wilson_with("90% z"), "with z = 1.645; a 95% interval uses z = 1.96"),
        ("no centre shift", _wilson_with("centre at p"), "centred on p = successes/n"),
        ("no z²/4n²", _wilson_with("no z²/4n²"), "leaves out z²/4n²"),
        ("n = 0 divides by zero", _wilson_with("no guard"), "divided by zero"),
        ("n = 0 gives (0, 0)", _wilson_with("n = 0 gives (0, 0)"), "return (0.0, 1.0)"),
        ("z argument ignored", _wilson_with("z ignored"), "use the z argument"),
    ],
    "truncated_importance_weights": [
        ("ratio inverted", _weights_with("ratio inverted"), "the inverse ratio μ/π_θ"),
        ("no mask", _weights_with("no mask"), "an observation was sampled by neither policy"),
        ("mask inside the exp", _weights_with("masked inside the exp"), "because exp(0) = 1"),
        ("no cap", _weights_with("no cap"), "a weight exceeds the cap"),
        ("clipped from below too", _weights_with("clipped both ways"), "caps from above only"),
        ("cap on the log-ratio", _weights_with("cap on the log-ratio"), "caps the weight at exp(C)"),
        ("ratio of log-probs", _weights_with("ratio of log-probs"), "not ℓ_learner / ℓ_sampler"),
    ],
    "r_squared_parts": [
        ("r, not r²", _parts_with("r, not r²"), "your first part is the correlation r"),
        ("offset not squared", _parts_with("offset not squared"), "square the mean error"),
        ("offset in reward units", _parts_with("offset in reward units"), "divide it by σ_G²"),
        ("scale against σ_G", _parts_with("scale against σ_G"), "compare it with r·σ_G"),
        ("torch's default std", _parts_with("torch's default std"), "divide by n − 1"),
    ],
    "is_tool_call": [
        ("looks for the opening tag", lambda t: "<tool_call>" in t, "not closed"),
        ("looks for both tags", lambda t: "<tool_call>" in t and "</tool_call>" in t, "not valid JSON"),
        ("parses the JSON, not the tool", _json_between_tags, "'serch' does not exist"),
        ("wants nothing before the call", lambda t: t.startswith("<tool_call>")
         and t.endswith("</tool_call>"), "reads it as a well-formed tool_call"),
    ],
    "hack_attempt": [
        ("searches for test files", lambda t, a: "tests/" in t or "conftest" in t, "a read_file call"),
        ("searches for the tool and the allowed path", lambda t, a: "replace_in_file" in t
         and not any(p in t for p in a), "replace_in_file call on 'tests/test_visible.py'"),
        ("does not strip the path", _parsed_path_outside, "call on ' toolbox/series.py '"),
        ("flags reads too", _any_call_outside, "a read_file call"),
    ],
    "policy_loss": [
        ("objective", _loss_with("objective"), "wrong sign"),
        ("no mask", _loss_with("no mask"), "mask 0 (the prompt, tool output, padding) got a gradient"),
        ("B·T", _loss_with("B·T"), "all B·T = 18 positions"),
        ("B", _loss_with("B"), "number of episodes B = 3"),
        ("per episode", _loss_with("per episode"), "loss_type='grpo'"),
        ("min of ratios", _loss_with("min of ratios"), "for a bad action (A = −1)"),
        ("always clipped", _loss_with("always clipped"), "for a good action (A = +1)"),
        ("swapped ε", _loss_with("swapped ε"), "passes 1 + ε_high"),
        ("detached ratio", _loss_with("detached ratio"), "detach only old_logprobs"),
    ],
    "gigpo": [
        ("turn index", _gigpo_with("turn index"), "You grouped them by turn index"),
        ("anchor alone", _gigpo_with("anchor alone"), "both have a state named 's'"),
        ("task alone", _gigpo_with("task alone"), "compared every step of a task with all its other steps"),
        ("no discount", _gigpo_with("no discount"), "not discounted"),
        ("γ = 0.95", _gigpo_with("γ = 0.95"), "use γ = 0.95, but the check passed gamma = 0.9"),
        ("episode return", _gigpo_with("episode return"), "its trajectory's return R(τ)"),
        ("own reward", _gigpo_with("own reward"), "the steps' own rewards r_t"),
        ("episode over rows", _gigpo_with("episode over rows"), "weighs a trajectory by its number of steps"),
        ("biased std", _gigpo_with("biased std"), "biased std"),
        ("singleton divided", _gigpo_with("singleton divided"), "A step group of one row"),
        ("ω ignored", _gigpo_with("ω ignored"), "are A_E + A_S"),
        ("ω on the episode", _gigpo_with("ω on the episode"), "ω scales the step part"),
        ("convex", _gigpo_with("convex"), "(1 − ω)·A_E + ω·A_S"),
        ("no episode part", _gigpo_with("no episode part"), "the episode part A_E is missing"),
        ("no step part", _gigpo_with("no step part"), "the step part ω·A_S is missing"),
    ],
    "turn_advantages": [
        ("sum", _turn_with("sum"), "you summed the turn rewards from t on"),
        ("pooled", _turn_with("pooled"), "compared each turn with every turn of its group"),
        ("across groups", _turn_with("across groups"), "the turns t of every group in the batch"),
        ("outcome over rows", _turn_with("outcome over rows"), "counts a trajectory once per turn"),
        ("past", _turn_with("past"), "looks backwards, over turns 0..t"),
        ("after", _turn_with("after"), "leaves out r_t"),
        ("shifted", _turn_with("shifted"), "paired with r_{t+1}"),
        ("γ ignored", _turn_with("γ ignored"), "ignores the gamma argument"),
        ("weight ignored", _turn_with("weight ignored"), "are A_O + A_T"),
        ("weight on the outcome", _turn_with("weight on the outcome"), "the weight scales the turn part"),
        ("no outcome part", _turn_with("no outcome part"), "the outcome part A_O is missing"),
        ("singleton divided", _turn_with("singleton divided"), "only one rollout of the group reached"),
    ],
    "gae": [
        ("bootstraps the terminal state", _gae_with("bootstraps the terminal state"), "from V_{T−1} again"),
        ("wraps round", _gae_with("wraps round"), "wrapped round"),
        ("swapped γ and λ", _gae_with("swapped γ and λ"), "You swapped γ and λ"),
        ("forwards", _gae_with("forwards"), "ran the recursion forwards"),
        ("λ alone", _gae_with("λ alone"), "not by λ alone"),
        ("γ alone", _gae_with("γ alone"), "not by γ alone"),
        ("no − V_t", _gae_with("no − V_t"), "did not subtract V_t"),
        ("returns are the advantages", _gae_with("returns are the advantages"),
         "These are the advantages again"),
        ("returns are A − V", _gae_with("returns are A − V"), "not A_t − V_t"),
        ("returns are Monte Carlo", _gae_with("returns are Monte Carlo"), "Monte Carlo returns G_t"),
        ("swapped outputs", _gae_with("swapped outputs"), "the advantages come first"),
    ],
    "group_advantages": [
        ("one baseline for the whole batch", lambda r, g, eps=1e-4: _batch_normalised(r, eps),
         "mean of the whole batch"),
        ("divides a single rollout by its std", lambda r, g, eps=1e-4: _in_groups(r, g, eps, skip_flat=False),
         "group 'd' with rewards [0.0] got [nan]"),
        ("divides by a zero std", lambda r, g, eps=1e-4: _in_groups(r, g, 0.0, skip_flat=False),
         "its std is 0"),
        ("mean − R", lambda r, g, eps=1e-4: _in_groups(r, g, eps, sign=-1.0), "wrong sign"),
        ("no std", lambda r, g, eps=1e-4: _in_groups(r, g, eps, scale=False), "did not divide"),
        ("the biased std", lambda r, g, eps=1e-4: _in_groups(r, g, eps, correction=0), "biased std"),
        ("groups taken as consecutive blocks", _in_blocks_of_four, "The groups are interleaved"),
    ],
    "pairwise_accuracy": [
        ("a judge tie counts 0", lambda s, r: _pairs_separated(s, r, tie=0.0), "count a judge tie as 0.5"),
        ("a judge tie counts 1", lambda s, r: _pairs_separated(s, r, tie=1.0), "not as an agreement"),
        ("pairs with equal rewards count", lambda s, r: _pairs_separated(s, r, every_pair=True),
         "count only the pairs whose rewards differ"),
        ("0 when nothing is separated", lambda s, r: _pairs_separated(s, r, when_none=0.0),
         "return float('nan'), not a number"),
        ("divides by zero", _no_pair_divides, "divided by zero"),
        ("agreement reversed", lambda s, r: 1 - _pairs_separated(s, r),
         "your agreements are the disagreements"),
        ("rewards taken as pass or fail", lambda s, r: _pairs_separated(s, [x > 0.5 for x in r]),
         "0.5 against 1.0 is such a pair"),
    ],
    "group_rewards": [
        ("most likely digit", _group_rewards_with("most likely digit"), "you took the most likely digit"),
        ("not renormalised", _group_rewards_with("not renormalised"), "divide by the digits' mass"),
        ("/ 10", _group_rewards_with("/ 10"), "divide the expected digit by 9"),
        ("first reading", _group_rewards_with("first reading"), "you used the first reading only"),
        ("mean of the probabilities", _group_rewards_with("mean of the probabilities"),
         "score each reading on its own"),
        ("one per id", _group_rewards_with("one per id"), "one reward per trajectory, in input order"),
        ("zeros", _group_rewards_with("zeros"), "you returned zeros"),
        ("no min_mass", _group_rewards_with("no min_mass"), "only 0.3 of its probability on the digits, and "
         "you returned scores"),
        ("fixed min_mass", _group_rewards_with("fixed min_mass"), "with min_mass=0.95"),
    ],
    "diff_check": [
        ("original's paths", _diff_with("original's paths"), "conftest.py is only in current"),
        ("current paths", _diff_with("current paths"), "README.md is only in original"),
        ("text against bytes", _diff_with("text against bytes"), "encode the text before comparing"),
        ("links unchanged", _diff_with("links unchanged"), "a link reads as None"),
        ("current[p]", _diff_with("current[p]"), "look it up with .get"),
        ("unsorted", _diff_with("unsorted"), "not sorted"),
        ("outside over every path", _diff_with("outside over every path"), "outside is a subset of changed"),
    ],
}


# check name -> (reference, a typical wrong answer, the hint it must get); tokenizer checks are below
CASES = {
    "is_tool_call": (sol.is_tool_call, lambda t: "<tool_call>" in t, "parse_action"),
    "tool_call_text": (sol.tool_call_text,
                       lambda n, a: f"<tool_call>{ {'name': n, 'arguments': a} }</tool_call>", "json.dumps"),
    "wilson_interval": (sol.my_wilson, _wald, "That is the normal interval"),
    "episodes_needed": (sol.episodes_needed, lambda h: int((1.96 * 0.5 / h) ** 2), "round up"),
    "classify_action": (sol.classify, lambda t: "tool_call" if "<tool_call>" in t else
                        "answer" if "<answer>" in t else "malformed", "make_env('lookup').tools"),
    "run_episode": (sol.run_episode, _run_one_step, "call step() until result.done"),
    "normalize_answer": (sol.normalize, str.lower, "string.punctuation"),
    "verifier_reward": (sol.verifier_reward, lambda a, r: float(r.lower() in a.lower()), "merely contains"),
    "reinforce_loss": (sol.my_reinforce_loss, lambda lp, a, m: (a[:, None] * lp * m).sum() / m.sum(),
                       "−Σ A_b·ℓ_bt·m_bt / Σ m_bt"),
    "policy_loss": (sol.my_policy_loss, _loss_with("min of ratios"), "reverses the order"),
    "episode_weights": (sol.token_weights, lambda n, T, lt: sol.token_weights(n, max(n), lt),
                        "T is the padded length"),
    "group_advantages": (sol.group_advantages, lambda r, g, eps=1e-4: _batch_normalised(r, eps),
                         "mean of the whole batch"),
    "informative_fraction": (sol.informative_fraction, lambda gs: sum(len(set(g)) == 1 for g in gs) / len(gs),
                             "len(set(rewards)) > 1"),
    "dr_grpo_advantages": (sol.dr_grpo_advantages, lambda r, g: sol.dr_grpo_advantages(r, g) / 0.5,
                           "do not divide by anything"),
    "masked_token_advantages": (sol.masked_token_advantages,
                                lambda a, ti, m: torch.tensor([a if t >= 0 else 0.0 for t in ti]),
                                "loss_mask 1"),
    "gigpo": (sol.my_gigpo, _gigpo_with("turn index"), "key the step groups by (group id, anchor)"),
    "turn_advantages": (sol.my_turn_advantages, _turn_with("sum"), "the length bias"),
    "gae": (sol.my_gae, _gae_with("forwards"), "start at the last turn"),
    "discounted_returns": (sol.discounted, lambda r, g: [sum(g**k * x for k, x in enumerate(r[: t + 1]))
                                                         for t in range(len(r))], "Walk backwards"),
    "shared_step_fraction": (sol.shared_step_fraction, lambda a, g: sol.shared_step_fraction(a, [0] * len(a)),
                             "both the task (group id) and the anchor"),
    "repeat_penalty": (sol.repeat_penalty, lambda t: [-0.1 if s.observation_text.startswith("Error")
                                                      or s.info["action_kind"] == "malformed" else 0.0
                                                      for s in t.steps], "A repeat is the same query"),
    "pooled_turn_part": (sol.pooled_turn_part, _fair_turn_part, "G_t = Σ_k γ^(k−t) r_k"),
    "mean_future_rewards": (sol.mean_future_rewards, lambda r, g: sol.discounted(r, g), "sum of its weights"),
    "r_squared_parts": (sol.r_squared_parts, _parts_with("r, not r²"), "the correlation r"),
    "clipped_value_loss": (sol.clipped_value_loss, lambda v, o, r, c: 0.5 * ((v - r) ** 2).mean(),
                           "V_clip = V_old + clip"),
    "truncated_gae": (sol.truncated_gae, _untruncated_gae, "next_value = last_value"),
    "pairwise_accuracy": (sol.my_pairwise_accuracy, _ties_count_zero, "count a judge tie as 0.5"),
    "position_bias_rate": (sol.my_position_bias_rate,
                           lambda a, b, tol=0.01: sum(abs(x - y) > tol for x, y in zip(a, b)) / len(a),
                           "a NaN (failed run) anywhere gives nan"),
    "group_rewards": (sol.my_group_rewards, _group_rewards_with("zeros"), "return None"),
    "diff_check": (sol.my_diff_check, lambda o, c, a: sol.my_diff_check(o, {p: c[p] for p in c if p in o}, a),
                   "go over the union of both path sets"),
    "hack_attempt": (sol.is_hack_attempt, lambda t, a: "tests/" in t or "conftest" in t,
                     "Only a well-formed"),
    "truncated_importance_weights": (sol.my_weights,
                                     _weights_with("ratio inverted"), "the inverse ratio"),
    "effective_sample_size": (sol.effective_sample_size, lambda w, m: 1 / sol.effective_sample_size(w, m),
                              "not Σw² over (Σw)²"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_stub_reference_and_wrong_answer(name, capsys):
    check = getattr(ex, f"check_{name}")
    reference, wrong, hint = CASES[name]

    assert check(stub) is reference
    out = capsys.readouterr().out
    assert out.startswith("Not implemented yet: ") and "Traceback" not in out
    assert f"from course_lib.course.solutions import {reference.__name__}" in out

    assert check(reference) is reference
    assert capsys.readouterr().out.splitlines()[-1].startswith("Correct! ")

    assert check(wrong) is reference
    out = capsys.readouterr().out
    assert out.startswith("Not yet: ") and hint in out, out


@pytest.mark.filterwarnings("ignore:std\\(\\)")  # a learner's std of one rollout, on purpose
@pytest.mark.parametrize("name,mistake", [(name, m[0]) for name, ms in MISTAKES.items() for m in ms])
def test_each_typical_mistake_gets_its_hint(name, mistake, capsys):
    wrong, hint = next((w, h) for label, w, h in MISTAKES[name] if label == mistake)
    assert getattr(ex, f"check_{name}")(wrong) is CASES[name][0]
    out = capsys.readouterr().out
    assert out.startswith("Not yet: ") and hint in out, out


def test_tokenizer_checks(tok, capsys):
    rewriting = _last_two_only(tok)
    cases = [
        (ex.check_count_prompt_tokens, (tok,), sol.count_prompt_tokens,
         lambda t, m: len(t(t.apply_chat_template(m, tokenize=False), add_special_tokens=False)["input_ids"]),
         "include the generation prompt"),
        (ex.check_build_trajectory, (tok,), sol.build_trajectory, _trajectory_with("observations trained on"),
         "The model reads it but did not choose it"),
        (ex.check_environment_positions, (tok,), sol.environment_positions,
         lambda t: [i for i, m in enumerate(t.loss_mask) if m == 0], "include the prompt"),
        (ex.check_round_trips, (tok,), sol.round_trips, lambda t, ids: True, "yet you said True"),
        (ex.check_keeps_prefix, (tok, rewriting), sol.keeps_prefix, lambda t, a, b: True,
         "the prefix property is broken"),
        (ex.check_trl_env_mask, (tok,), sol.my_trl_fields,
         lambda t, e: (sol.my_trl_fields(t, e)[0], [1] * len(sol.my_trl_fields(t, e)[0])),
         "env_mask must be the trajectory's loss_mask"),
    ]
    for check, args, reference, wrong, hint in cases:
        assert check(stub, *args) is reference
        assert capsys.readouterr().out.startswith("Not implemented yet: ")
        assert check(reference, *args) is reference
        assert capsys.readouterr().out.startswith("Correct! ")
        assert check(wrong, *args) is reference
        out = capsys.readouterr().out
        assert out.startswith("Not yet: ") and hint in out, out


class _ToolAsUser:
    """The tokenizer, except that its template renders the environment's messages as the user's."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)

    def __call__(self, *args, **kwargs):
        return self.tokenizer(*args, **kwargs)

    def apply_chat_template(self, messages, **kwargs):
        as_user = [dict(m, role="user") if m["role"] == "tool" else m for m in messages]
        return self.tokenizer.apply_chat_template(as_user, **kwargs)


def _trajectory_with(mistake):
    """build_trajectory with one mistake, made on the reference's output where it can be."""
    def build(tokenizer, messages, actions, observations, eot):
        if mistake == "observation as the user's":
            return sol.build_trajectory(_ToolAsUser(tokenizer), messages, actions, observations, eot)
        ids, mask, turns = sol.build_trajectory(tokenizer, messages, actions, observations, eot)
        rows = list(zip(ids, mask, turns))
        ends_cut_turn = [i > 0 and x == eot and m == 0 and mask[i - 1] == 1
                         for i, (x, m, _) in enumerate(rows)]
        if mistake == "prompt trained on":
            rows = [(x, 1 if t == -1 else m, t) for x, m, t in rows]
        elif mistake == "observations trained on":
            rows = [(x, 0 if t == -1 else 1, t) for x, m, t in rows]
        elif mistake == "end of turn twice":  # the template's copy of a sampled end-of-turn token kept
            rows = [r for x, m, t in rows for r in [(x, m, t)] + ([(x, 0, t)] if x == eot and m == 1 else [])]
        elif mistake == "end of turn always dropped":  # also the template's, after a cut turn
            rows = [r for r, cut in zip(rows, ends_cut_turn) if not cut]
        elif mistake == "sampled end of turn not trained on":
            rows = [(x, 0 if x == eot else m, t) for x, m, t in rows]
        elif mistake == "template's end of turn trained on":
            rows = [(x, 1 if cut else m, t) for (x, m, t), cut in zip(rows, ends_cut_turn)]
        else:
            assert mistake == "observation in the next turn"
            rows = [(x, m, t + 1 if t >= 0 and m == 0 else t) for x, m, t in rows]
        return tuple(list(column) for column in zip(*rows))
    return build


@pytest.mark.parametrize("mistake,hint", [
    ("prompt trained on", "is part of the prompt, yet its mask is 1"),
    ("observations trained on", "part of the environment's reply to turn 0"),
    ("end of turn twice", "appears twice"),
    ("end of turn always dropped", "closes the cut turn is missing"),
    ("sampled end of turn not trained on", "Stopping was the model's choice"),
    ("template's end of turn trained on", "The model never sampled it"),
    ("observation in the next turn", "the turn it leads into"),
    ("observation as the user's", "a message of role 'tool'"),
])
def test_build_trajectory_catches_each_typical_mistake(tok, mistake, hint, capsys):
    assert ex.check_build_trajectory(_trajectory_with(mistake), tok) is sol.build_trajectory
    out = capsys.readouterr().out
    assert out.startswith("Not yet: ") and hint in out, out


def test_omega_is_a_value(capsys):
    assert ex.check_omega_for_grpo(None) == 0.0
    assert capsys.readouterr().out.startswith("Not implemented yet: set omega")
    assert ex.check_omega_for_grpo(0.0) == 0.0
    assert capsys.readouterr().out.startswith("Correct! ω = 0")
    assert ex.check_omega_for_grpo(0.5) == 0.0
    assert "still adds ω·A_step" in capsys.readouterr().out


def test_a_crashing_answer_gets_one_line_not_a_traceback(capsys):
    assert ex.check_discounted_returns(lambda r, g: None) is sol.discounted
    out = capsys.readouterr().out
    assert out.startswith("Not yet: checking your discounted failed with TypeError")
    assert "Traceback" not in out


def test_solutions_mode_grades_the_reference_and_rejects_a_wrong_answer(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    assert ex.check_discounted_returns(stub) is sol.discounted
    assert capsys.readouterr().out == ("Correct! the same final reward is worth less the further a step is "
                                       "from it.\n")
    assert ex.check_omega_for_grpo(None) == 0.0
    with pytest.raises(ExerciseFailed, match="Walk backwards"):
        ex.check_discounted_returns(CASES["discounted_returns"][1])


def test_every_check_is_tested():
    names = {n[len("check_"):] for n in dir(ex) if n.startswith("check_")}
    tested = set(CASES) | {"count_prompt_tokens", "build_trajectory", "environment_positions", "round_trips",
                           "keeps_prefix", "trl_env_mask", "omega_for_grpo"}
    assert names == tested


def test_each_notebook_imports_its_checks_from_its_own_module():
    defined = {n: {name for name in dir(m) if name.startswith("check_")} for n, m in MODULES.items()}
    assert sum(len(names) for names in defined.values()) == len(vars(ex)), "a check is defined twice"
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        number = path.name[:2]
        cells = json.loads(path.read_text())["cells"]
        code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        pattern = r"from course_lib\.course\.exercises\.nb(\d\d) import ([\w, ]+)"
        imported = {(mod, name.strip()) for mod, names in re.findall(pattern, code)
                    for name in names.split(",")}
        assert {mod for mod, _ in imported} <= {number}, f"{path.name} imports checks of another notebook"
        assert {name for _, name in imported} == defined[number], path.name
