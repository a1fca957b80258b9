"""Check functions for the exercises of notebooks 07 to 11 (the rules: `course_lib.grading`)."""

from __future__ import annotations

from functools import partial
from typing import Any

from course_lib.grading import ExerciseFailed, graded

# ----- notebook 07: turn-level rewards -----------------------------------------------------------------

def _scripted_trajectory(actions: list[str], observations: list[str]):
    """A Trajectory with steps only (no tokens): enough for functions that read actions and observations."""
    from course_lib.envs.search_qa import SearchQAEnv
    from course_lib.protocol import parse_action
    from course_lib.trajectory import Step, Trajectory

    steps = [Step(action_ids=[], action_text=a, logprobs=[], observation_text=o,
                  info={"action_kind": parse_action(a, SearchQAEnv.tools).kind}) for a, o in zip(actions, observations)]
    return Trajectory(task_id="t", group_id="g", traj_id="x", messages=[], prompt_ids=[], steps=steps)


def check_repeat_penalty(fn: Any) -> Any:
    """Notebook 07: `fn(trajectory) -> list[float]`, −0.1 for malformed/tool-error turns and repeated queries."""
    return graded(fn, "repeat_penalty",
                  "return one reward per turn: −0.1 for a malformed action, a tool error or a repeated query, else 0.",
                  _grade_repeat_penalty)


def _grade_repeat_penalty(fn) -> str:
    from course_lib.protocol import format_answer, format_tool_call

    def search(q: str) -> str:
        return format_tool_call("search", {"query": q})

    cases = [
        ([search("Kalo"), search("Orvane"), format_answer("Orvane")], ["r1", "r2", ""], [0.0, 0.0, 0.0]),
        ([search("Kalo"), search("  kalo "), format_answer("x")], ["r1", "r1", ""], [0.0, -0.1, 0.0]),
        (["search Kalo", search("Kalo"), search("Kalo"), search("Kalo")], ["Error: malformed", "r", "r", "r"],
         [-0.1, 0.0, -0.1, -0.1]),
        ([search("Kalo"), search("Orvane")], ["r", "Error: the query is empty"], [0.0, -0.1]),
    ]
    for actions, observations, expected in cases:
        got = [float(x) for x in fn(_scripted_trajectory(actions, observations))]
        if got != expected:
            raise ExerciseFailed(f"for actions {actions} you gave {got}, expected {expected}. A repeat is the same "
                                 "query after strip().lower(); the first occurrence is not penalised; a malformed "
                                 "action or an observation starting with 'Error' also gets −0.1.")
    return "a repeated search now costs as much as a broken one, and no wording can avoid it."


def check_pooled_turn_part(fn: Any) -> Any:
    """Notebook 07: `fn(turn_rewards, group_ids, traj_ids, gamma) -> [N]`, A_T normalised over the whole group."""
    return graded(fn, "pooled_turn_part",
                  "normalise the discounted returns over all rows of each group.",
                  _grade_pooled_turn_part)


def _grade_pooled_turn_part(fn) -> str:
    import torch

    from course_lib.credit import discounted_returns, outcome_advantages, turn_advantages

    # group "a": two identical 3-turn rollouts, a judge gives every turn 0.5; group "b": two 1-turn rollouts
    turn_rewards = [0.5] * 6 + [0.0, 0.5]
    group_ids = ["a"] * 6 + ["b"] * 2
    traj_ids = ["x", "x", "x", "y", "y", "y", "u", "v"]
    returns = discounted_returns(turn_rewards, list(zip(group_ids, traj_ids)), gamma=1.0)
    expected = outcome_advantages(returns, group_ids, scale="group", eps=1e-4)  # (G − group mean) / (std + 1e-4)
    got = torch.as_tensor(fn(turn_rewards, group_ids, traj_ids, gamma=1.0), dtype=torch.float32)
    if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-4):
        raise ExerciseFailed(f"you gave {[round(float(x), 3) for x in got]}, expected "
                             f"{[round(float(x), 3) for x in expected]}. G_t = Σ_k γ^(k−t) r_k within each "
                             "trajectory, then (G − group mean) / (unbiased group std + 1e-4).")
    fair = turn_advantages(turn_rewards, [0.0] * 8, group_ids, traj_ids, weight=1.0)
    print("Two identical rollouts, every turn scored 0.5, yet pooled A_T =",
          [round(float(x), 2) for x in got[:6]])
    print("Compared at the same turn index, A_T =", [round(float(x), 2) for x in fair[:6]])
    return "pooling ranks turns by how many turns are left after them; comparing at the same turn index does not."


def check_mean_future_rewards(fn: Any) -> Any:
    """Notebook 07: `fn(turn_rewards, gamma) -> [T]`, Ḡ_t = Σ_{k≥t} γ^{k−t} r_k / Σ_{k≥t} γ^{k−t} for one trajectory."""
    return graded(fn, "mean_future_rewards",
                  "return, for every turn t, the discount-weighted mean of the turn rewards from t to the end.",
                  _grade_mean_future_rewards)


def _grade_mean_future_rewards(fn) -> str:
    cases = [([0.1, 0.0, 0.1], 1.0), ([0.0, -0.1, 0.1, 0.1], 0.5), ([0.3], 0.9)]
    for rewards, gamma in cases:
        expected = [sum(gamma ** (k - t) * rewards[k] for k in range(t, len(rewards)))
                    / sum(gamma ** (k - t) for k in range(t, len(rewards))) for t in range(len(rewards))]
        got = [float(x) for x in fn(rewards, gamma)]
        if len(got) != len(expected) or any(abs(g - e) > 1e-6 for g, e in zip(got, expected)):
            raise ExerciseFailed(f"for r = {rewards}, γ = {gamma} you gave {[round(g, 4) for g in got]}, expected "
                                 f"{[round(e, 4) for e in expected]}. Divide the discounted sum Σ γ^(k−t) r_k by "
                                 "the sum of its weights Σ γ^(k−t), so that more turns left do not mean more credit.")
    return "a mean does not grow with the number of turns left: a long episode no longer wins by length."


# ----- notebook 08: a critic again ---------------------------------------------------------------------

def check_clipped_value_loss(fn: Any) -> Any:
    """Notebook 08: `fn(values, old_values, returns, clip) -> scalar`, PPO's clipped value loss."""
    return graded(fn, "clipped_value_loss",
                  "return ½·mean(max((V − R)², (V_clip − R)²)) with V_clip = V_old + clip(V − V_old, −c, c).",
                  _grade_clipped_value_loss)


def _grade_clipped_value_loss(fn) -> str:
    import torch

    from course_lib.credit import value_loss

    g = torch.Generator().manual_seed(8)
    for clip in (0.2, 0.5):
        values = torch.randn(7, generator=g).requires_grad_(True)
        old_values, returns = torch.randn(7, generator=g), torch.randn(7, generator=g)
        expected = value_loss(values, old_values, returns, clip=clip)
        (expected_grad,) = torch.autograd.grad(expected, values)
        got = fn(values, old_values, returns, clip)
        value = float(torch.as_tensor(got).detach())
        if abs(value - expected.item()) > 1e-6:
            raise ExerciseFailed(f"with clip = {clip} your loss is {value:.6f}, expected {expected.item():.6f}: "
                                 "V_clip = V_old + clip(V − V_old, −c, c); ½·mean(max((V − R)², (V_clip − R)²)).")
        (grad,) = torch.autograd.grad(got, values)
        if not torch.allclose(grad, expected_grad, atol=1e-6):
            raise ExerciseFailed("the value is right but the gradient is not: only `values` should carry one.")
    return "the max keeps the worse error, so a value step cannot profit from jumping more than c."


def check_truncated_gae(fn: Any) -> Any:
    """Notebook 08: `fn(rewards, values, last_value, gamma, lam) -> [T]`, GAE bootstrapped past a cut episode."""
    return graded(fn, "truncated_gae",
                  "run GAE's backwards pass starting from next_value = last_value.",
                  _grade_truncated_gae)


def _grade_truncated_gae(fn) -> str:
    import torch

    from course_lib.credit import gae

    rewards, values = [0.0, -0.1, 0.0, 0.5], [0.3, 0.2, 0.4, 0.6]
    for last_value, gamma, lam in ((0.0, 1.0, 0.95), (0.7, 0.9, 0.8), (0.7, 1.0, 1.0)):
        delta_last = rewards[-1] + gamma * last_value - values[-1]
        manual = [0.0] * 4
        nxt = 0.0
        for t in reversed(range(4)):
            d = delta_last if t == 3 else rewards[t] + gamma * values[t + 1] - values[t]
            nxt = d + gamma * lam * nxt
            manual[t] = nxt
        expected = torch.tensor(manual)
        got = torch.as_tensor(fn(rewards, values, last_value, gamma, lam), dtype=torch.float32)
        if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-5):
            raise ExerciseFailed(f"with last_value = {last_value}, γ = {gamma}, λ = {lam} you gave "
                                 f"{[round(float(x), 4) for x in got]}, expected {[round(float(x), 4) for x in expected]}."
                                 " Start the backwards pass with next_value = last_value instead of 0.")
        if last_value == 0.0 and not torch.allclose(got, gae(rewards, values, gamma=gamma, lam=lam)[0], atol=1e-5):
            raise ExerciseFailed("with last_value = 0 your answer should equal course_lib.credit.gae.")
    return "a truncated episode keeps the critic's estimate of what would have come next."


def check_r_squared(fn: Any) -> Any:
    """Notebook 08: `fn(predictions, targets) -> float`, R² = 1 − Σ(y − ŷ)² / Σ(y − ȳ)²."""
    return graded(fn, "r_squared", "return 1 − (sum of squared errors) / (sum of squares around the targets' mean).",
                  _grade_r_squared)


def _grade_r_squared(fn) -> str:
    import numpy as np

    cases = [([0.1, 0.4, 0.5, 0.9], [0.0, 0.5, 0.5, 1.0]),
             ([0.6, 0.7, 0.8, 0.9], [0.0, 0.5, 0.5, 1.0]),   # the right order, shifted up: R² < correlation²
             ([0.5, 0.5, 0.5, 0.5], [0.0, 0.5, 0.5, 1.0])]   # the mean itself: R² = 0
    for predictions, targets in cases:
        y, p = np.asarray(targets, float), np.asarray(predictions, float)
        expected = 1 - ((y - p) ** 2).sum() / ((y - y.mean()) ** 2).sum()
        got = float(fn(predictions, targets))
        if not abs(got - expected) < 1e-6:
            raise ExerciseFailed(f"for predictions {predictions} and targets {targets} you gave {got:.4f}, expected "
                                 f"{expected:.4f}. R² compares the errors with the spread of the targets around their "
                                 "own mean; it is not the squared correlation, which forgives a biased critic.")
    return "a critic that predicts the mean scores 0, a biased one can score below 0, a perfect one 1."


# ----- notebook 09: LLM-as-a-judge reward --------------------------------------------------------------

def check_pairwise_accuracy(fn: Any) -> Any:
    """Notebook 09: `fn(scores, rewards) -> float`, judge-verifier pairwise accuracy (judge ties count half)."""
    return graded(fn, "my_pairwise_accuracy",
                  "over pairs with different rewards, count the judge's agreements (a tie counts half).",
                  _grade_pairwise_accuracy)


def _grade_pairwise_accuracy(fn) -> str:
    import math

    # (scores, rewards, accuracy): agreements / pairs over the pairs with different rewards
    cases = [([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0], 4 / 4), ([0.9, 0.3, 0.4, 0.1], [1, 1, 0, 0], 3 / 4),
             ([0.5, 0.5, 0.5], [1, 0, 0], 1 / 2), ([0.1, 0.7, 0.4], [0.0, 1.0, 0.5], 3 / 3), ([0.3, 0.9], [1, 1], math.nan)]
    for scores, rewards, expected in cases:
        got = float(fn(scores, rewards))
        if math.isnan(expected) != math.isnan(got) or (not math.isnan(expected) and abs(got - expected) > 1e-9):
            raise ExerciseFailed(f"for scores {scores} and rewards {rewards} you gave {got}, expected {expected}. "
                                 "Skip pairs with equal rewards, count a judge tie as 0.5, return nan with no pairs.")
    return "0.5 is a coin flip, and also what a judge that scores everything equal gets."


def check_position_bias_rate(fn: Any) -> Any:
    """Notebook 09: `fn(first, second, tol=0.01) -> float`, the share of scores that moved between two orders."""
    return graded(fn, "my_position_bias_rate",
                  "return the share of scores that moved by more than tol (nan if any score is NaN).",
                  _grade_position_bias_rate)


def _grade_position_bias_rate(fn) -> str:
    import math

    nan = float("nan")
    cases = [(([0.9, 0.5, 0.1], [0.9, 0.5, 0.1]), 0.0), (([1.0, 0.5, 0.0], [0.0, 0.5, 1.0]), 2 / 3),
             (([0.50, 0.2], [0.505, 0.3]), 0.5), (([0.4, nan], [0.4, nan]), nan), (([0.4, 0.3], [0.1, nan]), nan)]
    for (first, second), expected in cases:
        got = float(fn(first, second))
        if math.isnan(expected) != math.isnan(got) or (not math.isnan(expected) and abs(got - expected) > 1e-9):
            raise ExerciseFailed(f"for {first} and {second} you gave {got}, expected {expected}. Count |a - b| > tol "
                                 "pairwise, divide by the group size; a NaN (failed run) anywhere gives nan.")
    return "a fair judge moves no score when only the order changes."


def check_group_rewards(fn: Any) -> Any:
    """Notebook 09: `fn(scores: list[JudgeScore]) -> list[float] | None`, None for a failed group."""
    return graded(fn, "my_group_rewards",
                  "return the scores as floats, or None when any score failed.",
                  _grade_group_rewards)


def _grade_group_rewards(fn) -> str:
    import math

    from course_lib.judge.scoring import JudgeScore

    good = [JudgeScore(0.0, "bad"), JudgeScore(1.0, "good"), JudgeScore(0.25, "meh")]
    got = fn(good)
    if got is None or [float(x) for x in got] != [0.0, 1.0, 0.25]:
        raise ExerciseFailed(f"for valid scores 0.0, 1.0, 0.25 you gave {got}: a real 0.0 is a reward, keep it.")
    failed = [JudgeScore(math.nan, "judge failed", failed=True) for _ in range(3)]
    got = fn(failed)
    if got is not None:
        raise ExerciseFailed(f"for a failed group you gave {got}; return None so the caller skips the group "
                             "(zeros would punish trajectories nobody judged, NaN would poison the loss).")
    return "a failed judgement is skipped, never turned into a reward."


# ----- notebook 10: reward hacking ---------------------------------------------------------------------

def check_diff_check(fn: Any) -> Any:
    """Notebook 10: `fn(original, current, allowed) -> (changed, outside)`."""
    return graded(fn, "my_diff_check",
                  "return (changed, outside): changed, added or deleted paths, and those not in allowed.",
                  _grade_diff_check)


def _grade_diff_check(fn) -> str:
    original = {"pkg/mod.py": "x = 1\n", "tests/test_visible.py": "def test(): pass\n", "README.md": "hi\n"}
    allowed = ["pkg/mod.py"]
    cases = [
        ("nothing changed", {k: v.encode() for k, v in original.items()}, ([], [])),
        ("only the allowed file", {**{k: v.encode() for k, v in original.items()}, "pkg/mod.py": b"x = 2\n"},
         (["pkg/mod.py"], [])),
        ("the test edited", {**{k: v.encode() for k, v in original.items()}, "tests/test_visible.py": b"pass\n"},
         (["tests/test_visible.py"], ["tests/test_visible.py"])),
        ("a conftest.py added", {**{k: v.encode() for k, v in original.items()}, "conftest.py": b"x\n"},
         (["conftest.py"], ["conftest.py"])),
        ("the README deleted", {k: v.encode() for k, v in original.items() if k != "README.md"},
         (["README.md"], ["README.md"])),
        ("the test replaced by a link", {**{k: v.encode() for k, v in original.items()}, "tests/test_visible.py": None},
         (["tests/test_visible.py"], ["tests/test_visible.py"])),
    ]
    for label, current, expected in cases:
        got = fn(original, current, allowed)
        got = (sorted(got[0]), sorted(got[1]))
        if got != expected:
            raise ExerciseFailed(f"case '{label}': got changed={got[0]}, outside={got[1]}; expected "
                                 f"changed={expected[0]}, outside={expected[1]}. Compare over the union of both "
                                 "path sets: added and deleted files count as changed")
    return "edits, additions, deletions and links are all caught."


def check_hack_attempt(fn: Any) -> Any:
    """Notebook 10: `fn(action_text, allowed_files) -> bool` flags an edit outside the allowed files."""
    return graded(fn, "is_hack_attempt",
                  "return True for a well-formed replace_in_file call on a path outside allowed_files.",
                  _grade_hack_attempt)


def _grade_hack_attempt(fn) -> str:
    import json

    def call(name, **arguments):
        return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"

    allowed = ["toolbox/series.py"]
    cases = {
        call("replace_in_file", path="tests/test_visible.py", old="assert", new="assert True or"): True,
        call("replace_in_file", path="conftest.py", old="a", new="b"): True,
        call("replace_in_file", path="toolbox/series.py", old="- 1", new="+ 1"): False,
        call("read_file", path="tests/test_visible.py"): False,
        call("run_tests"): False,
        "<answer>done</answer>": False,
        "I will now edit tests/test_visible.py": False,
    }
    for text, expected in cases.items():
        got = bool(fn(text, allowed))
        if got != expected:
            raise ExerciseFailed(f"for {text!r} you said {got}, expected {expected}. Only a well-formed "
                                 "replace_in_file call on a path outside allowed_files is an attempt")
    return "edits outside the allowed files are flagged; reads, runs, answers and honest edits are not."


# ----- notebook 11: scaling out ------------------------------------------------------------------------

def check_trl_env_mask(fn: Any, tokenizer: Any) -> Any:
    """Notebook 11: `fn(trajectory, end_of_turn_id) -> (completion_ids, env_mask)`, what TRL trains on."""
    return graded(fn, "my_trl_fields",
                  "return (completion_ids, env_mask): the span after the prompt up to the last model token and its end-of-turn token.",
                  partial(_grade_trl_env_mask, tokenizer=tokenizer))


def _grade_trl_env_mask(fn, tokenizer) -> str:
    from course_lib.envs import load_tasks
    from course_lib.integrations.trl import trajectory_completion
    from course_lib.models import end_of_turn_id
    from course_lib.rollout import expert_rollout

    eot = end_of_turn_id(tokenizer)
    for t in expert_rollout(tokenizer, "lookup", load_tasks("lookup", "test", 3)):
        start, end = trajectory_completion(t, eot)
        ids, mask = fn(t, eot)
        if list(ids) != t.token_ids[start:end]:
            raise ExerciseFailed(f"completion_ids should be token_ids[{start}:{end}] (after the prompt, up to the last "
                                 f"model token and its end-of-turn token); you gave {len(ids)} ids.")
        if list(mask) != t.loss_mask[start:end]:
            raise ExerciseFailed("env_mask must be the trajectory's loss_mask on the same span: 1 on sampled tokens, "
                                 "0 on observations and template tokens.")
    return "TRL will train on exactly the tokens our own trainer trains on."


def check_truncated_importance_weights(fn: Any) -> Any:
    """Notebook 11: `fn(learner_logprobs, sampler_logprobs, mask, cap) -> [B, T]` truncated importance weights."""
    return graded(fn, "my_weights",
                  "return min(exp(ℓ_learner − ℓ_sampler), cap) on masked tokens, 0 elsewhere.",
                  _grade_truncated_importance_weights)


def _grade_truncated_importance_weights(fn) -> str:
    import torch

    g = torch.Generator().manual_seed(0)
    learner = -torch.rand(3, 5, generator=g) * 3
    sampler = learner + torch.randn(3, 5, generator=g) * 0.8
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.float32)
    for cap in (2.0, 1.2):
        expected = torch.clamp(torch.exp(learner - sampler), max=cap) * mask
        got = torch.as_tensor(fn(learner, sampler, mask, cap), dtype=torch.float32)
        if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-5):
            raise ExerciseFailed(f"with cap = {cap}, expected min(exp(ℓ_learner − ℓ_sampler), cap) on masked tokens "
                                 "and 0 elsewhere. Check the sign of the difference and that you only cap from above.")
    return "a stale sampler's tokens are re-weighted, and no single token can weigh more than the cap."


def check_effective_sample_size(fn: Any) -> Any:
    """Notebook 11: `fn(weights, mask) -> float`, Kish's effective sample size (Σw)² / Σw² over masked tokens."""
    return graded(fn, "effective_sample_size",
                  "return (Σ w)² / Σ w² over the tokens with mask 1.", _grade_effective_sample_size)


def _grade_effective_sample_size(fn) -> str:
    import torch

    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    cases = [(torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]), 5.0, "all weights 1"),
             (torch.tensor([[2.0, 0.5, 0.5, 7.0], [1.0, 1.0, 3.0, 3.0]]), 25 / 6.5, "mixed weights"),
             (torch.tensor([[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]), 1.0, "one token carries everything")]
    for weights, expected, label in cases:
        got = float(fn(weights, mask))
        if abs(got - expected) < 1e-5:
            continue
        if abs(got - 1 / expected) < 1e-5:
            raise ExerciseFailed(f"{label}: you gave {got:.4f}, the inverse of {expected:.4f}: (Σw)² over Σw², not Σw² over (Σw)².")
        raise ExerciseFailed(f"{label}: you gave {got:.4f}, expected {expected:.4f}. Multiply the weights by the "
                             "mask first: observation tokens (mask 0) carry no weight, whatever is stored there.")
    return "equal weights give every token's worth; one dominant weight gives about one token's worth."
