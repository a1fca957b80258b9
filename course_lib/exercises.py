"""Check functions for the notebooks' exercises: run them on your answer, read the message."""

from __future__ import annotations


class ExerciseFailed(AssertionError):
    pass


def _ok(msg: str) -> None:
    print(f"Correct! {msg}")


# ----- notebook 00: setup ------------------------------------------------------------------------------

def check_count_prompt_tokens(fn, tokenizer) -> None:
    """Notebook 00: `fn(tokenizer, messages) -> int` counts the tokens of a rendered conversation."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there!"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    got = fn(tokenizer, messages)
    if got != expected:
        raise ExerciseFailed(f"got {got} tokens, expected {expected}. Did you render with the chat template "
                             "(apply_chat_template) and include the generation prompt? With tokenize=True, recent "
                             "transformers return a dict-like BatchEncoding (its len is the number of fields): "
                             "count its ['input_ids'].")
    _ok(f"{expected} tokens, including the template's role markers.")


def check_is_tool_call(fn) -> None:
    """Notebook 00: `fn(text) -> bool` says whether a model turn is a well-formed tool call."""
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
    _ok("you can tell a tool call from an answer and from a broken call.")


# ----- notebook 01: the agentic setting ----------------------------------------------------------------

def check_wilson_interval(fn) -> None:
    """Notebook 01: `fn(successes, n) -> (low, high)`, the 95% Wilson score interval."""
    from course_lib.train import wilson_interval

    for successes, n in [(0, 10), (5, 10), (10, 10), (37, 100), (1, 3)]:
        got, expected = fn(successes, n), wilson_interval(successes, n)
        if any(abs(float(g) - e) > 1e-6 for g, e in zip(got, expected)):
            raise ExerciseFailed(f"for {successes}/{n} you gave ({got[0]:.4f}, {got[1]:.4f}), expected "
                                 f"({expected[0]:.4f}, {expected[1]:.4f}). Centre (p + z²/2n)/(1 + z²/n), "
                                 "half-width z·sqrt(p(1−p)/n + z²/4n²)/(1 + z²/n), z = 1.96.")
    _ok("your interval matches course_lib.train.wilson_interval, including at 0/n and n/n.")


def check_episodes_needed(fn) -> None:
    """Notebook 01: `fn(half_width) -> int`, episodes for a 95% normal interval of at most ± half_width at p = 0.5."""
    import math

    for h in (0.1, 0.05, 0.02):
        expected = math.ceil((1.96 * 0.5 / h) ** 2)
        got = fn(h)
        if got != expected:
            raise ExerciseFailed(f"for ±{h} you said {got} episodes, expected {expected}. The worst case is p = 0.5, "
                                 "where 1.96·sqrt(p(1−p)/n) ≤ h gives n ≥ (1.96·0.5/h)²; round up.")
    _ok("halving the interval costs four times the episodes.")


def check_classify_action(fn) -> None:
    """Notebook 01: `fn(text) -> "tool_call" | "answer" | "malformed"` for the lookup environment."""
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
    _ok("a call to a tool that does not exist, and a call followed by an imagined result, are both malformed.")


# ----- notebook 02: environments -----------------------------------------------------------------------

def check_run_episode(fn) -> None:
    """Notebook 02: `fn(env, task, policy) -> reward` plays one episode to its end."""
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
    _ok("the same loop plays any policy; the turn limit ends episodes that never answer.")


def check_normalize_answer(fn) -> None:
    """Notebook 02: `fn(text) -> str`, the search-QA answer normalisation."""
    from course_lib.envs.search_qa import normalize_answer

    for text in ["The Orrin Guild", "  port   aldis. ", "An Apple a day", "O'Neill-Varrow!", "1874", "THEATRE"]:
        got, expected = fn(text), normalize_answer(text)
        if got != expected:
            raise ExerciseFailed(f"normalize({text!r}) gave {got!r}, expected {expected!r}. Lowercase, drop "
                                 "string.punctuation, remove whole-word a/an/the, join on single spaces.")
    _ok("your rule and the verifier's agree.")


# ----- notebook 03: trajectories and the loss mask -----------------------------------------------------

def check_environment_positions(fn, tokenizer) -> None:
    """Notebook 03: `fn(trajectory) -> list[int]` gives the positions the environment wrote after the prompt."""
    from course_lib.envs import load_tasks
    from course_lib.rollout import expert_rollout

    traj = expert_rollout(tokenizer, "lookup", load_tasks("lookup", "test")[:1])[0]
    expected = [i for i, (m, t) in enumerate(zip(traj.loss_mask, traj.turn_index)) if m == 0 and t >= 0]
    got = list(fn(traj))
    if got == expected:
        _ok(f"{len(expected)} environment tokens after the prompt, none of them trained on.")
        return
    prompt = [i for i, t in enumerate(traj.turn_index) if t < 0]
    if set(prompt) & set(got):
        raise ExerciseFailed("your positions include the prompt (turn_index -1); keep only turn_index >= 0")
    if any(traj.loss_mask[i] for i in got):
        raise ExerciseFailed("your positions include model tokens (loss_mask 1); the environment's have loss_mask 0")
    raise ExerciseFailed(f"got {len(got)} positions, expected {len(expected)} (first expected: {expected[:5]}); "
                         "return every position with loss_mask 0 and turn_index >= 0, in increasing order")


def check_round_trips(fn, tokenizer) -> None:
    """Notebook 03: `fn(tokenizer, ids) -> bool` says whether decode-then-encode gives back `ids`."""
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
    _ok("canonical ids round-trip; a non-canonical split of the same text does not.")


def check_keeps_prefix(fn, tokenizer, rewriting_tokenizer) -> None:
    """Notebook 03: `fn(tokenizer, messages, next_messages) -> bool` checks the prefix property."""
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
    _ok("you can tell a template that keeps history from one that rewrites it.")


# ----- notebook 04: the masked policy-gradient loss ----------------------------------------------------

def _loss_batch():
    import torch

    g = torch.Generator().manual_seed(4)
    logprobs = (-torch.rand(3, 6, generator=g) * 3).requires_grad_(True)
    mask = torch.tensor([[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [0, 1, 0, 1, 0, 0]], dtype=torch.float32)
    advantages = torch.tensor([1.0, -0.5, 2.0])
    return logprobs, advantages, mask


def check_reinforce_loss(fn) -> None:
    """Notebook 04: `fn(logprobs, advantages, mask) -> scalar`, the token-mean REINFORCE loss."""
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
    _ok("value and gradient equal policy_loss(..., loss_type='bnpo') with old_logprobs = logprobs.detach().")


def check_clipped_objective(fn) -> None:
    """Notebook 04: `fn(ratio, advantage, eps) -> tensor`, the PPO clipped objective min(wA, clip(w)A)."""
    import torch

    ratio = torch.tensor([0.5, 0.79, 0.8, 1.0, 1.1, 1.2, 1.21, 2.0])
    for advantage in (1.0, -1.0, 0.5):
        expected = torch.min(ratio * advantage, ratio.clamp(0.8, 1.2) * advantage)
        got = fn(ratio, advantage, 0.2)
        if not torch.allclose(torch.as_tensor(got, dtype=torch.float32), expected, atol=1e-6):
            raise ExerciseFailed(f"for A = {advantage} you gave {[round(float(x), 3) for x in got]}, expected "
                                 f"{[round(float(x), 3) for x in expected]}. Take the min of the unclipped and "
                                 "the clipped term (clip w to [1−ε, 1+ε]) and do not negate it.")
    _ok("the min makes the objective pessimistic: clipping only removes the incentive to move further.")


def check_episode_weights(fn) -> None:
    """Notebook 04: `fn(lengths, T, loss_type) -> list[float]`, the weight each token of episode b gets."""
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
    _ok("grpo divides by each episode's own length; bnpo/dapo by the batch's tokens; dr_grpo by a constant.")


# ----- notebook 05: outcome-only credit ----------------------------------------------------------------

def check_informative_fraction(fn) -> None:
    """Notebook 05: `fn(rewards_by_group) -> float`, the fraction of groups whose rewards are not all equal."""
    cases = [([[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]], 1 / 3), ([[0.5, 0.5], [0.2, 0.7]], 0.5),
             ([[1, 1], [0, 0]], 0.0), ([[0, 1, 0]], 1.0)]
    for groups, expected in cases:
        got = fn(groups)
        if abs(float(got) - expected) > 1e-9:
            raise ExerciseFailed(f"for {groups} you gave {got}, expected {expected:.4f}. A group carries a "
                                 "signal when at least two of its rewards differ (len(set(rewards)) > 1).")
    _ok("only groups with mixed rewards move the policy; the rest cost compute and give zero advantage.")


def check_dr_grpo_advantages(fn) -> None:
    """Notebook 05: `fn(rewards, group_ids) -> tensor`, the advantage without the std (Dr. GRPO)."""
    import torch

    from course_lib.credit import outcome_advantages

    rewards, groups = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0], ["a", "a", "a", "a", "b", "b", "c", "c"]
    expected = outcome_advantages(rewards, groups, scale="none")
    got = torch.as_tensor(fn(rewards, groups), dtype=torch.float32)
    if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-6):
        raise ExerciseFailed(f"got {[round(float(x), 4) for x in got]}, expected "
                             f"{[round(float(x), 4) for x in expected]}. Subtract each group's mean reward, "
                             "and do not divide by anything.")
    _ok("without the std, a group of one success among four gives +0.75 / −0.25 instead of +1.5 / −0.5.")


def check_masked_token_advantages(fn) -> None:
    """Notebook 05: `fn(advantage, turn_index, loss_mask) -> tensor`, A on the model's tokens, 0 elsewhere."""
    import torch

    turn_index = [-1, -1, -1, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    loss_mask = [0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0]
    expected = torch.tensor([0.0, 0, 0, 0.8, 0.8, 0, 0, 0, 0.8, 0.8, 0.8, 0])
    got = torch.as_tensor(fn(0.8, turn_index, loss_mask), dtype=torch.float32)
    if got.shape != expected.shape or not torch.allclose(got, expected, atol=1e-6):
        raise ExerciseFailed(f"got {got.tolist()}, expected {expected.tolist()}. Every token the model sampled "
                             "(loss_mask 1) gets A; prompt and observation tokens get 0.")
    _ok("one number per trajectory, copied onto every token the model wrote.")


# ----- notebook 06: GiGPO ------------------------------------------------------------------------------

def check_discounted_returns(fn) -> None:
    """Notebook 06: `fn(rewards, gamma) -> list`, G_t = r_t + γ·G_{t+1} for one trajectory."""
    from course_lib.credit import discounted_returns

    for rewards, gamma in [([0, 0, 0, 1], 0.95), ([0, 0, 1], 0.5), ([-0.1, 0, 1], 0.9), ([1], 0.95)]:
        expected = discounted_returns(rewards, [0] * len(rewards), gamma=gamma).tolist()
        got = [float(x) for x in fn(rewards, gamma)]
        if len(got) != len(expected) or any(abs(g - e) > 1e-5 for g, e in zip(got, expected)):
            raise ExerciseFailed(f"for rewards {rewards}, γ={gamma} you gave {[round(g, 4) for g in got]}, "
                                 f"expected {[round(e, 4) for e in expected]}. Walk backwards from the last "
                                 "step: G = r_t + γ·G.")
    _ok("the same final reward is worth less the further a step is from it.")


def check_shared_step_fraction(fn) -> None:
    """Notebook 06: `fn(anchors, group_ids) -> float`, the fraction of rows whose step group has ≥ 2 rows."""
    cases = [(["a", "b", "a", "c"], [0, 0, 0, 0], 0.5), (["a", "a", "a", "a"], [0, 0, 1, 1], 1.0),
             (["a", "b", "c"], [0, 0, 0], 0.0), (["a", "a", "b", "b", "c"], [0, 1, 0, 0, 0], 0.4)]
    for anchors, groups, expected in cases:
        got = fn(anchors, groups)
        if abs(float(got) - expected) > 1e-9:
            raise ExerciseFailed(f"for anchors {anchors} in groups {groups} you gave {got}, expected {expected}. "
                                 "Rows share a step group only when both the task (group id) and the anchor match.")
    _ok("a row in a step group of one gets no step-level signal.")


def check_omega_for_grpo(omega: float) -> None:
    """Notebook 06: the ω that turns GiGPO into outcome-only credit on any input."""
    if float(omega) != 0.0:
        raise ExerciseFailed(f"ω = {omega} still adds ω·A_step. Which ω removes the step term whatever the anchors?")
    _ok("ω = 0 drops A_step; with the same normalisation, what remains is the episode-level GRPO advantage.")


# ----- notebook 07: turn-level rewards -----------------------------------------------------------------

def _scripted_trajectory(actions: list[str], observations: list[str]):
    """A Trajectory with steps only (no tokens): enough for functions that read actions and observations."""
    from course_lib.envs.search_qa import SearchQAEnv
    from course_lib.protocol import parse_action
    from course_lib.trajectory import Step, Trajectory

    steps = [Step(action_ids=[], action_text=a, logprobs=[], observation_text=o,
                  info={"action_kind": parse_action(a, SearchQAEnv.tools).kind}) for a, o in zip(actions, observations)]
    return Trajectory(task_id="t", group_id="g", traj_id="x", messages=[], prompt_ids=[], steps=steps)


def check_repeat_penalty(fn) -> None:
    """Notebook 07: `fn(trajectory) -> list[float]`, −0.1 for malformed/tool-error turns and repeated queries."""
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
    _ok("a repeated search now costs as much as a broken one, and no wording can avoid it.")


def check_pooled_turn_part(fn) -> None:
    """Notebook 07: `fn(turn_rewards, group_ids, traj_ids, gamma) -> [N]`, A_T normalised over the whole group."""
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
    _ok("pooling ranks turns by how many turns are left after them; comparing at the same turn index does not.")


# ----- notebook 08: a critic again ---------------------------------------------------------------------

def check_clipped_value_loss(fn) -> None:
    """Notebook 08: `fn(values, old_values, returns, clip) -> scalar`, PPO's clipped value loss."""
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
    _ok("the max keeps the worse error, so a value step cannot profit from jumping more than c.")


def check_truncated_gae(fn) -> None:
    """Notebook 08: `fn(rewards, values, last_value, gamma, lam) -> [T]`, GAE bootstrapped past a cut episode."""
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
    _ok("a truncated episode keeps the critic's estimate of what would have come next.")


# ----- notebook 09: LLM-as-a-judge reward --------------------------------------------------------------

def check_pairwise_accuracy(fn) -> None:
    """Notebook 09: `fn(scores, rewards) -> float`, judge-verifier pairwise accuracy (judge ties count half)."""
    import math

    # (scores, rewards, accuracy): agreements / pairs over the pairs with different rewards
    cases = [([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0], 4 / 4), ([0.9, 0.3, 0.4, 0.1], [1, 1, 0, 0], 3 / 4),
             ([0.5, 0.5, 0.5], [1, 0, 0], 1 / 2), ([0.1, 0.7, 0.4], [0.0, 1.0, 0.5], 3 / 3), ([0.3, 0.9], [1, 1], math.nan)]
    for scores, rewards, expected in cases:
        got = float(fn(scores, rewards))
        if math.isnan(expected) != math.isnan(got) or (not math.isnan(expected) and abs(got - expected) > 1e-9):
            raise ExerciseFailed(f"for scores {scores} and rewards {rewards} you gave {got}, expected {expected}. "
                                 "Skip pairs with equal rewards, count a judge tie as 0.5, return nan with no pairs.")
    _ok("0.5 is a coin flip, and also what a judge that scores everything equal gets.")


def check_position_bias_rate(fn) -> None:
    """Notebook 09: `fn(first, second, tol=0.01) -> float`, the share of scores that moved between two orders."""
    import math

    nan = float("nan")
    cases = [(([0.9, 0.5, 0.1], [0.9, 0.5, 0.1]), 0.0), (([1.0, 0.5, 0.0], [0.0, 0.5, 1.0]), 2 / 3),
             (([0.50, 0.2], [0.505, 0.3]), 0.5), (([0.4, nan], [0.4, nan]), nan), (([0.4, 0.3], [0.1, nan]), nan)]
    for (first, second), expected in cases:
        got = float(fn(first, second))
        if math.isnan(expected) != math.isnan(got) or (not math.isnan(expected) and abs(got - expected) > 1e-9):
            raise ExerciseFailed(f"for {first} and {second} you gave {got}, expected {expected}. Count |a - b| > tol "
                                 "pairwise, divide by the group size; a NaN (failed run) anywhere gives nan.")
    _ok("a fair judge moves no score when only the order changes.")


def check_group_rewards(fn) -> None:
    """Notebook 09: `fn(scores: list[JudgeScore]) -> list[float] | None`, None for a failed group."""
    import math

    from course_lib.judge import JudgeScore

    good = [JudgeScore(0.0, "bad"), JudgeScore(1.0, "good"), JudgeScore(0.25, "meh")]
    got = fn(good)
    if got is None or [float(x) for x in got] != [0.0, 1.0, 0.25]:
        raise ExerciseFailed(f"for valid scores 0.0, 1.0, 0.25 you gave {got}: a real 0.0 is a reward, keep it.")
    failed = [JudgeScore(math.nan, "judge failed", failed=True) for _ in range(3)]
    got = fn(failed)
    if got is not None:
        raise ExerciseFailed(f"for a failed group you gave {got}; return None so the caller skips the group "
                             "(zeros would punish trajectories nobody judged, NaN would poison the loss).")
    _ok("a failed judgement is skipped, never turned into a reward.")


# ----- notebook 10: reward hacking ---------------------------------------------------------------------

def check_diff_check(fn) -> None:
    """Notebook 10: `fn(original, current, allowed) -> (changed, outside)`."""
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
    _ok("edits, additions, deletions and links are all caught.")


def check_hack_attempt(fn) -> None:
    """Notebook 10: `fn(action_text, allowed_files) -> bool` flags an edit outside the allowed files."""
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
    _ok("edits outside the allowed files are flagged; reads, runs, answers and honest edits are not.")


# ----- notebook 11: scaling out ------------------------------------------------------------------------

def check_trl_env_mask(fn, tokenizer) -> None:
    """Notebook 11: `fn(trajectory, end_of_turn_id) -> (completion_ids, env_mask)`, what TRL trains on."""
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
    _ok("TRL will train on exactly the tokens our own trainer trains on.")


def check_truncated_importance_weights(fn) -> None:
    """Notebook 11: `fn(learner_logprobs, sampler_logprobs, mask, cap) -> [B, T]` truncated importance weights."""
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
    _ok("a stale sampler's tokens are re-weighted, and no single token can weigh more than the cap.")
