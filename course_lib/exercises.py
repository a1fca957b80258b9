"""Check functions for the notebooks' exercises: run them on your answer, read the message.

Each `check_*` grades one exercise and returns what the cells below should use (see `course_lib.grading`:
a stub or a wrong answer gets a one-line message and the reference solution from `course_lib.solutions`).
Notebooks 00 to 06 here; 07 to 11 in `course_lib.exercises_late`, re-exported below.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from course_lib.exercises_late import (  # noqa: F401  (the notebooks import every check from here)
    check_clipped_value_loss,
    check_diff_check,
    check_effective_sample_size,
    check_group_rewards,
    check_hack_attempt,
    check_mean_future_rewards,
    check_pairwise_accuracy,
    check_pooled_turn_part,
    check_position_bias_rate,
    check_r_squared,
    check_repeat_penalty,
    check_trl_env_mask,
    check_truncated_gae,
    check_truncated_importance_weights,
)
from course_lib.grading import ExerciseFailed, graded  # noqa: F401

# ----- notebook 00: setup ------------------------------------------------------------------------------

def check_count_prompt_tokens(fn: Any, tokenizer: Any) -> Any:
    """Notebook 00: `fn(tokenizer, messages) -> int` counts the tokens of a rendered conversation."""
    return graded(fn, "count_prompt_tokens",
                  "render the conversation with tokenizer.apply_chat_template(..., add_generation_prompt=True) and count its token ids.",
                  partial(_grade_count_prompt_tokens, tokenizer=tokenizer))


def _grade_count_prompt_tokens(fn, tokenizer) -> str:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there!"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    got = fn(tokenizer, messages)
    if got != expected:
        raise ExerciseFailed(f"got {got} tokens, expected {expected}. Did you render with the chat template "
                             "(apply_chat_template) and include the generation prompt? With tokenize=True, recent "
                             "transformers return a dict-like BatchEncoding (its len is the number of fields): "
                             "count its ['input_ids'].")
    return f"{expected} tokens, including the template's role markers."


def check_is_tool_call(fn: Any) -> Any:
    """Notebook 00: `fn(text) -> bool` says whether a model turn is a well-formed tool call."""
    return graded(fn, "is_tool_call",
                  "return True when parse_action(text, tools).kind is 'tool_call'.",
                  _grade_is_tool_call)


def _grade_is_tool_call(fn) -> str:
    cases = {
        '<tool_call>{"name": "lookup", "arguments": {"name": "Kalo"}}</tool_call>': True,
        "<answer>Orvane</answer>": False,
        '<tool_call>{"name": "lookup", "arguments": {"name": "Kalo"}}': False,
        "I think it is Orvane.": False,
    }
    for text, expected in cases.items():
        if bool(fn(text)) != expected:
            raise ExerciseFailed(f"for {text!r} you said {fn(text)}, expected {expected}. "
                                 "Hint: use course_lib.protocol.parse_action and look at .kind")
    return "you can tell a tool call from an answer and from a broken call."


def check_tool_call_text(fn: Any) -> Any:
    """Notebook 00: `fn(name, arguments) -> str` writes the text of a tool call that the parser accepts."""
    return graded(fn, "tool_call_text",
                  "return '<tool_call>' + the JSON of {\"name\": name, \"arguments\": arguments} + '</tool_call>'.",
                  _grade_tool_call_text)


def _grade_tool_call_text(fn) -> str:
    from course_lib.protocol import Tool, parse_action

    tools = [Tool("lookup", "Look up an agent.", {"name": ("string", "code name")}),
             Tool("search", "Search.", {"query": ("string", "what to search for"), "k": ("integer", "results")})]
    for name, arguments in [("lookup", {"name": "Kalo"}), ("search", {"query": 'Zoë "the elder"', "k": 3})]:
        text = fn(name, arguments)
        action = parse_action(text, tools)
        if action.kind != "tool_call":
            raise ExerciseFailed(f"for {name}({arguments}) you wrote {text!r}, which the parser reads as malformed: "
                                 f"{action.error} Write the JSON with json.dumps, keys 'name' and 'arguments'.")
        if action.name != name or action.arguments != arguments:
            raise ExerciseFailed(f"for {name}({arguments}) the parser read {action.name}({action.arguments}).")
    return "the parser reads back the same tool and the same arguments, quotes and accents included."


# ----- notebook 01: the agentic setting ----------------------------------------------------------------

def check_wilson_interval(fn: Any) -> Any:
    """Notebook 01: `fn(successes, n) -> (low, high)`, the 95% Wilson score interval."""
    return graded(fn, "my_wilson",
                  "return (low, high), the 95% Wilson score interval for successes out of n.",
                  _grade_wilson_interval)


def _grade_wilson_interval(fn) -> str:
    from course_lib import wilson_interval

    for successes, n in [(0, 10), (5, 10), (10, 10), (37, 100), (1, 3)]:
        got, expected = fn(successes, n), wilson_interval(successes, n)
        if any(abs(float(g) - e) > 1e-6 for g, e in zip(got, expected)):
            raise ExerciseFailed(f"for {successes}/{n} you gave ({got[0]:.4f}, {got[1]:.4f}), expected "
                                 f"({expected[0]:.4f}, {expected[1]:.4f}). Centre (p + z²/2n)/(1 + z²/n), "
                                 "half-width z·sqrt(p(1−p)/n + z²/4n²)/(1 + z²/n), z = 1.96.")
    return "your interval matches course_lib.wilson_interval, including at 0/n and n/n."


def check_episodes_needed(fn: Any) -> Any:
    """Notebook 01: `fn(half_width) -> int`, episodes for a 95% normal interval of at most ± half_width at p = 0.5."""
    return graded(fn, "episodes_needed",
                  "return the smallest n with 1.96·sqrt(0.25/n) ≤ half_width (round up).",
                  _grade_episodes_needed)


def _grade_episodes_needed(fn) -> str:
    import math

    for h in (0.1, 0.05, 0.02):
        expected = math.ceil((1.96 * 0.5 / h) ** 2)
        got = fn(h)
        if got != expected:
            raise ExerciseFailed(f"for ±{h} you said {got} episodes, expected {expected}. The worst case is p = 0.5, "
                                 "where 1.96·sqrt(p(1−p)/n) ≤ h gives n ≥ (1.96·0.5/h)²; round up.")
    return "halving the interval costs four times the episodes."


def check_classify_action(fn: Any) -> Any:
    """Notebook 01: `fn(text) -> "tool_call" | "answer" | "malformed"` for the lookup environment."""
    return graded(fn, "classify",
                  "return 'tool_call', 'answer' or 'malformed' for the lookup environment's tools.",
                  _grade_classify_action)


def _grade_classify_action(fn) -> str:
    cases = {
        '<tool_call>{"name": "lookup", "arguments": {"name": "Kalo"}}</tool_call>': "tool_call",
        "Agent Kalo is stationed in Orvane. <answer>Orvane</answer>": "answer",
        '<tool_call>{"name": "search", "arguments": {"query": "Kalo"}}</tool_call>': "malformed",
        "Agent Kalo is stationed in Orvane.": "malformed",
        '<tool_call>{"name": "lookup", "arguments": {"name": "Kalo"}}</tool_call>\nResult: Orvane': "malformed",
    }
    for text, expected in cases.items():
        got = fn(text)
        if got != expected:
            raise ExerciseFailed(f"for {text!r} you said {got!r}, expected {expected!r}. "
                                 "Hint: parse_action(text, make_env('lookup').tools).kind")
    return "a call to a tool that does not exist, and a call followed by an imagined result, are both malformed."


# ----- notebook 02: environments -----------------------------------------------------------------------

def check_run_episode(fn: Any) -> Any:
    """Notebook 02: `fn(env, task, policy) -> reward` plays one episode to its end."""
    return graded(fn, "run_episode",
                  "reset the environment, step it with policy(env) until result.done, return result.reward.",
                  _grade_run_episode)


def _grade_run_episode(fn) -> str:
    from course_lib.envs import load_tasks, make_env
    from course_lib.protocol import format_answer, format_tool_call

    task = load_tasks("lookup", "test")[0]
    env = make_env("lookup", max_turns=3)
    policies = {
        "the expert": (lambda e: e.expert_action(), 1.0),
        "a guesser": (lambda e: format_answer("Nowhere"), 0.0),
        "a policy that never answers": (lambda e: format_tool_call("lookup", {"name": task["target"]}), 0.0),
    }
    for label, (policy, expected) in policies.items():
        got = fn(env, task, policy)
        if got is None or float(got) != expected:
            raise ExerciseFailed(f"with {label} your episode returned {got!r}, expected {expected}. Reset the "
                                 "environment, call step() until result.done, and return result.reward.")
    return "the same loop plays any policy; the turn limit ends episodes that never answer."


def check_normalize_answer(fn: Any) -> Any:
    """Notebook 02: `fn(text) -> str`, the search-QA answer normalisation."""
    return graded(fn, "normalize",
                  "lowercase, drop punctuation and the words a/an/the, join on single spaces.",
                  _grade_normalize_answer)


def _grade_normalize_answer(fn) -> str:
    from course_lib.envs.search_qa import normalize_answer

    for text in ["The Orrin Guild", "  port   aldis. ", "An Apple a day", "O'Neill-Varrow!", "1874", "THEATRE"]:
        got, expected = fn(text), normalize_answer(text)
        if got != expected:
            raise ExerciseFailed(f"normalize({text!r}) gave {got!r}, expected {expected!r}. Lowercase, drop "
                                 "string.punctuation, remove whole-word a/an/the, join on single spaces.")
    return "your rule and the verifier's agree."


def check_verifier_reward(fn: Any) -> Any:
    """Notebook 02: `fn(answer, reference) -> float`, 1.0 when the normalised texts are equal, else 0.0."""
    return graded(fn, "verifier_reward",
                  "return 1.0 when normalize(answer) == normalize(reference), else 0.0.", _grade_verifier_reward)


def _grade_verifier_reward(fn) -> str:
    cases = [("Port Aldis", 1.0, ""), ("the PORT aldis.", 1.0, "a right answer written differently"),
             ("not Port Aldis", 0.0, "a denial"), ("Port Aldis, Quenport or Jorvik", 0.0, "a list of guesses"),
             ("Quenport", 0.0, "a wrong answer")]
    for answer, expected, label in cases:
        got = fn(answer, "Port Aldis")
        if got is None or float(got) != expected:
            why = ("it pays for text that merely contains the reference" if expected == 0.0
                   else "it refuses a right answer that differs only in case, punctuation or articles")
            raise ExerciseFailed(f"for {label or 'the reference itself'} ({answer!r}) you gave {got}, expected "
                                 f"{expected}: {why}. Compare the whole normalised texts.")
    return "a denial and a list of guesses get 0, a right answer in other words gets 1."


# ----- notebook 03: trajectories and the loss mask -----------------------------------------------------

def check_environment_positions(fn: Any, tokenizer: Any) -> Any:
    """Notebook 03: `fn(trajectory) -> list[int]` gives the positions the environment wrote after the prompt."""
    return graded(fn, "environment_positions",
                  "return the positions with loss_mask 0 and turn_index >= 0.",
                  partial(_grade_environment_positions, tokenizer=tokenizer))


def _grade_environment_positions(fn, tokenizer) -> str:
    from course_lib.envs import load_tasks
    from course_lib.rollout import expert_rollout

    traj = expert_rollout(tokenizer, "lookup", load_tasks("lookup", "test")[:1])[0]
    expected = [i for i, (m, t) in enumerate(zip(traj.loss_mask, traj.turn_index)) if m == 0 and t >= 0]
    got = list(fn(traj))
    if got == expected:
        return f"{len(expected)} environment tokens after the prompt, none of them trained on."
    prompt = [i for i, t in enumerate(traj.turn_index) if t < 0]
    if set(prompt) & set(got):
        raise ExerciseFailed("your positions include the prompt (turn_index -1); keep only turn_index >= 0")
    if any(traj.loss_mask[i] for i in got):
        raise ExerciseFailed("your positions include model tokens (loss_mask 1); the environment's have loss_mask 0")
    raise ExerciseFailed(f"got {len(got)} positions, expected {len(expected)} (first expected: {expected[:5]}); "
                         "return every position with loss_mask 0 and turn_index >= 0, in increasing order")


def check_round_trips(fn: Any, tokenizer: Any) -> Any:
    """Notebook 03: `fn(tokenizer, ids) -> bool` says whether decode-then-encode gives back `ids`."""
    return graded(fn, "round_trips",
                  "decode the ids, encode the text (add_special_tokens=False), compare with the ids.",
                  partial(_grade_round_trips, tokenizer=tokenizer))


def _grade_round_trips(fn, tokenizer) -> str:
    text = "<answer>Corvath</answer>"
    canonical = tokenizer(text, add_special_tokens=False)["input_ids"]
    vocab = tokenizer.get_vocab()
    split = None
    for k, tid in enumerate(canonical):
        piece = tokenizer.convert_ids_to_tokens(tid)
        for cut in range(1, len(piece)):
            if piece[:cut] in vocab and piece[cut:] in vocab:
                split = canonical[:k] + [vocab[piece[:cut]], vocab[piece[cut:]]] + canonical[k + 1:]
                break
        if split:
            break
    if not fn(tokenizer, canonical):
        raise ExerciseFailed("the canonical ids of a plain string should round-trip, but you said False. "
                             "Encode with add_special_tokens=False and compare lists")
    if split is not None and fn(tokenizer, split):
        raise ExerciseFailed(f"{split} decodes to {tokenizer.decode(split)!r} but re-encodes to {canonical}: "
                             "it does not round-trip, yet you said True")
    return "canonical ids round-trip; a non-canonical split of the same text does not."


def check_keeps_prefix(fn: Any, tokenizer: Any, rewriting_tokenizer: Any) -> Any:
    """Notebook 03: `fn(tokenizer, messages, next_messages) -> bool` checks the prefix property."""
    return graded(fn, "keeps_prefix",
                  "render both conversations with add_generation_prompt=True and compare with str.startswith.",
                  partial(_grade_keeps_prefix, tokenizer=tokenizer, rewriting_tokenizer=rewriting_tokenizer))


def _grade_keeps_prefix(fn, tokenizer, rewriting_tokenizer) -> str:
    call = '<tool_call>{"name": "lookup", "arguments": {"name": "Kalo"}}</tool_call>'
    first = [{"role": "user", "content": "Where is Kalo?"},
             {"role": "assistant", "content": "Let me look. " + call},
             {"role": "tool", "content": "Agent Kalo is stationed in Orvane."}]
    second = first + [{"role": "assistant", "content": "Checking again. " + call},
                      {"role": "tool", "content": "Agent Kalo is stationed in Orvane."}]
    if not fn(tokenizer, first, second):
        raise ExerciseFailed("with the model's own ChatML template the prefix property holds, but you said False. "
                             "Render both with add_generation_prompt=True and use str.startswith")
    if fn(rewriting_tokenizer, first, second):
        raise ExerciseFailed("the rewriting template drops the first turn's thought once a second turn exists, "
                             "so the prefix property is broken, but you said True")
    return "you can tell a template that keeps history from one that rewrites it."


# ----- notebook 04: the masked policy-gradient loss ----------------------------------------------------

def _loss_batch():
    import torch

    g = torch.Generator().manual_seed(4)
    logprobs = (-torch.rand(3, 6, generator=g) * 3).requires_grad_(True)
    mask = torch.tensor([[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [0, 1, 0, 1, 0, 0]], dtype=torch.float32)
    advantages = torch.tensor([1.0, -0.5, 2.0])
    return logprobs, advantages, mask


def check_reinforce_loss(fn: Any) -> Any:
    """Notebook 04: `fn(logprobs, advantages, mask) -> scalar`, the token-mean REINFORCE loss."""
    return graded(fn, "my_reinforce_loss",
                  "return −Σ A_b·ℓ_bt·m_bt / Σ m_bt.",
                  _grade_reinforce_loss)


def _grade_reinforce_loss(fn) -> str:
    from course_lib.losses import policy_loss

    logprobs, advantages, mask = _loss_batch()
    expected, _ = policy_loss(logprobs, logprobs.detach(), advantages, mask, loss_type="bnpo")
    (expected_grad,) = __import__("torch").autograd.grad(expected, logprobs)
    # policy_loss's value is −mean(w·A) with w = 1; REINFORCE's value is −mean(A·ℓ): same gradient, other value.
    expected_value = -(advantages[:, None] * logprobs * mask).sum() / mask.sum()
    got = fn(logprobs, advantages, mask)
    if abs(got.item() - expected_value.item()) > 1e-6:
        raise ExerciseFailed(f"your loss is {got.item():.6f}, expected {expected_value.item():.6f}: "
                             "−Σ A_b·ℓ_bt·m_bt / Σ m_bt (advantages [B] broadcast over tokens).")
    (grad,) = __import__("torch").autograd.grad(got, logprobs)
    if (grad - expected_grad).abs().max().item() > 1e-6:
        raise ExerciseFailed("the value is right but the gradient is not: is a detach() in the wrong place?")
    if grad[mask == 0].abs().max().item() != 0.0:
        raise ExerciseFailed("masked positions got a gradient: multiply by the mask before summing.")
    return "value and gradient equal policy_loss(..., loss_type='bnpo') with old_logprobs = logprobs.detach()."


def check_clipped_objective(fn: Any) -> Any:
    """Notebook 04: `fn(ratio, advantage, eps) -> tensor`, the PPO clipped objective min(wA, clip(w)A)."""
    return graded(fn, "clipped",
                  "return min(w·A, clip(w, 1−ε, 1+ε)·A), elementwise.",
                  _grade_clipped_objective)


def _grade_clipped_objective(fn) -> str:
    import torch

    ratio = torch.tensor([0.5, 0.79, 0.8, 1.0, 1.1, 1.2, 1.21, 2.0])
    for advantage in (1.0, -1.0, 0.5):
        expected = torch.min(ratio * advantage, ratio.clamp(0.8, 1.2) * advantage)
        got = fn(ratio, advantage, 0.2)
        if not torch.allclose(torch.as_tensor(got, dtype=torch.float32), expected, atol=1e-6):
            raise ExerciseFailed(f"for A = {advantage} you gave {[round(float(x), 3) for x in got]}, expected "
                                 f"{[round(float(x), 3) for x in expected]}. Take the min of the unclipped and "
                                 "the clipped term (clip w to [1−ε, 1+ε]) and do not negate it.")
    return "the min makes the objective pessimistic: clipping only removes the incentive to move further."


def check_episode_weights(fn: Any) -> Any:
    """Notebook 04: `fn(lengths, T, loss_type) -> list[float]`, the weight each token of episode b gets."""
    return graded(fn, "token_weights",
                  "return the weight of one token of each episode, from the table of the four normalisations.",
                  _grade_episode_weights)


def _grade_episode_weights(fn) -> str:
    import torch

    from course_lib.losses import policy_loss

    lengths, T = [2, 9, 5], 12
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        logprobs = torch.zeros(len(lengths), T, requires_grad=True)
        loss, _ = policy_loss(logprobs, logprobs.detach(), torch.ones(len(lengths)), mask, loss_type=loss_type,
                              max_completion_length=T)
        (grad,) = torch.autograd.grad(loss, logprobs)
        expected = [-grad[b, 0].item() for b in range(len(lengths))]
        got = [float(x) for x in fn(lengths, T, loss_type)]
        if len(got) != len(expected) or any(abs(g - e) > 1e-6 for g, e in zip(got, expected)):
            raise ExerciseFailed(f"for {loss_type} with lengths {lengths}, T = {T} you gave "
                                 f"{[round(g, 4) for g in got]}, expected {[round(e, 4) for e in expected]} "
                                 "(T is the padded length, a setting, not the longest episode's length).")
    return "grpo divides by each episode's own length; bnpo/dapo by the batch's tokens; dr_grpo by a constant."


# ----- notebook 05: outcome-only credit ----------------------------------------------------------------

def check_informative_fraction(fn: Any) -> Any:
    """Notebook 05: `fn(rewards_by_group) -> float`, the fraction of groups whose rewards are not all equal."""
    return graded(fn, "informative_fraction",
                  "return the share of groups whose rewards are not all equal.",
                  _grade_informative_fraction)


def _grade_informative_fraction(fn) -> str:
    cases = [([[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]], 1 / 3), ([[0.5, 0.5], [0.2, 0.7]], 0.5),
             ([[1, 1], [0, 0]], 0.0), ([[0, 1, 0]], 1.0)]
    for groups, expected in cases:
        got = fn(groups)
        if abs(float(got) - expected) > 1e-9:
            raise ExerciseFailed(f"for {groups} you gave {got}, expected {expected:.4f}. A group carries a "
                                 "signal when at least two of its rewards differ (len(set(rewards)) > 1).")
    return "only groups with mixed rewards move the policy; the rest cost compute and give zero advantage."


def check_dr_grpo_advantages(fn: Any) -> Any:
    """Notebook 05: `fn(rewards, group_ids) -> tensor`, the advantage without the std (Dr. GRPO)."""
    return graded(fn, "dr_grpo_advantages",
                  "return each reward minus its group's mean reward, as a tensor.",
                  _grade_dr_grpo_advantages)


def _grade_dr_grpo_advantages(fn) -> str:
    import torch

    from course_lib.credit import outcome_advantages

    rewards, groups = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0], ["a", "a", "a", "a", "b", "b", "c", "c"]
    expected = outcome_advantages(rewards, groups, scale="none")
    got = torch.as_tensor(fn(rewards, groups), dtype=torch.float32)
    if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-6):
        raise ExerciseFailed(f"got {[round(float(x), 4) for x in got]}, expected "
                             f"{[round(float(x), 4) for x in expected]}. Subtract each group's mean reward, "
                             "and do not divide by anything.")
    return "without the std, a group of one success among four gives +0.75 / −0.25 instead of +1.5 / −0.5."


def check_masked_token_advantages(fn: Any) -> Any:
    """Notebook 05: `fn(advantage, turn_index, loss_mask) -> tensor`, A on the model's tokens, 0 elsewhere."""
    return graded(fn, "masked_token_advantages",
                  "return a tensor with the advantage where loss_mask is 1, 0 elsewhere.",
                  _grade_masked_token_advantages)


def _grade_masked_token_advantages(fn) -> str:
    import torch

    turn_index = [-1, -1, -1, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    loss_mask = [0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0]
    expected = torch.tensor([0.0, 0, 0, 0.8, 0.8, 0, 0, 0, 0.8, 0.8, 0.8, 0])
    got = torch.as_tensor(fn(0.8, turn_index, loss_mask), dtype=torch.float32)
    if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-6):
        raise ExerciseFailed(f"got {got.tolist()}, expected {expected.tolist()}. Every token the model sampled "
                             "(loss_mask 1) gets A; prompt and observation tokens get 0.")
    return "one number per trajectory, copied onto every token the model wrote."


# ----- notebook 06: GiGPO ------------------------------------------------------------------------------

def check_discounted_returns(fn: Any) -> Any:
    """Notebook 06: `fn(rewards, gamma) -> list`, G_t = r_t + γ·G_{t+1} for one trajectory."""
    return graded(fn, "discounted",
                  "walk backwards from the last step with G = r_t + γ·G.",
                  _grade_discounted_returns)


def _grade_discounted_returns(fn) -> str:
    from course_lib.credit import discounted_returns

    for rewards, gamma in [([0, 0, 0, 1], 0.95), ([0, 0, 1], 0.5), ([-0.1, 0, 1], 0.9), ([1], 0.95)]:
        expected = discounted_returns(rewards, [0] * len(rewards), gamma=gamma).tolist()
        got = [float(x) for x in fn(rewards, gamma)]
        if len(got) != len(expected) or any(abs(g - e) > 1e-5 for g, e in zip(got, expected)):
            raise ExerciseFailed(f"for rewards {rewards}, γ={gamma} you gave {[round(g, 4) for g in got]}, "
                                 f"expected {[round(e, 4) for e in expected]}. Walk backwards from the last "
                                 "step: G = r_t + γ·G.")
    return "the same final reward is worth less the further a step is from it."


def check_shared_step_fraction(fn: Any) -> Any:
    """Notebook 06: `fn(anchors, group_ids) -> float`, the fraction of rows whose step group has ≥ 2 rows."""
    return graded(fn, "shared_step_fraction",
                  "return the share of rows whose (group id, anchor) occurs at least twice.",
                  _grade_shared_step_fraction)


def _grade_shared_step_fraction(fn) -> str:
    cases = [(["a", "b", "a", "c"], [0, 0, 0, 0], 0.5), (["a", "a", "a", "a"], [0, 0, 1, 1], 1.0),
             (["a", "b", "c"], [0, 0, 0], 0.0), (["a", "a", "b", "b", "c"], [0, 1, 0, 0, 0], 0.4)]
    for anchors, groups, expected in cases:
        got = fn(anchors, groups)
        if abs(float(got) - expected) > 1e-9:
            raise ExerciseFailed(f"for anchors {anchors} in groups {groups} you gave {got}, expected {expected}. "
                                 "Rows share a step group only when both the task (group id) and the anchor match.")
    return "a row in a step group of one gets no step-level signal."


def check_omega_for_grpo(omega: Any) -> Any:
    """Notebook 06: the ω that turns GiGPO into outcome-only credit on any input."""
    return graded(omega, "omega",
                  "set omega to the ω that makes gigpo_advantages equal outcome-only credit.",
                  _grade_omega_for_grpo)


def _grade_omega_for_grpo(omega: float) -> str:
    if float(omega) != 0.0:
        raise ExerciseFailed(f"ω = {omega} still adds ω·A_step. Which ω removes the step term whatever the anchors?")
    return "ω = 0 drops A_step; with the same normalisation, what remains is the episode-level GRPO advantage."
