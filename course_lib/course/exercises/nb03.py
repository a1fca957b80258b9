"""The exercise checks of notebook 03, trajectories and the loss mask
(`notebooks/03_trajectories_and_masks.ipynb`): check_build_trajectory, check_environment_positions,
check_round_trips, check_keeps_prefix.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_build_trajectory(fn: Any, tokenizer: Any) -> Any:
    """Notebook 03: `fn(tokenizer, messages, actions, observations, end_of_turn_id)` returns the episode's
    (token_ids, loss_mask, turn_index), assembled token-in/token-out."""
    return graded(fn, "build_trajectory",
                  "start from the rendered prompt (mask 0, turn −1); for each turn k append the sampled ids "
                  "(mask 1) and the template's delta after them (mask 0), both with turn index k.",
                  partial(_grade_build_trajectory, tokenizer=tokenizer))


def _episodes(tokenizer) -> list[tuple[str, list[dict], list[list[int]], list[str | None]]]:
    """(label, messages, actions, observations) of two lookup episodes: the expert's, whose turns end with
    the end-of-turn token, and one whose first turn was cut at the token limit, then answered."""
    from course_lib.envs import load_tasks, make_env
    from course_lib.rollout import expert_rollout

    task = load_tasks("lookup", "test")[1]
    expert = expert_rollout(tokenizer, "lookup", [task])[0]
    messages = expert.messages[:2]  # system and user: the prompt
    actions = [step.action_ids for step in expert.steps]
    observations = [step.observation_text for step in expert.steps[:-1]] + [None]
    cut = actions[0][:10]  # no closing tag, no end-of-turn token
    env = make_env("lookup")
    env.reset(task)
    cut_reply = env.step(tokenizer.decode(cut)).observation
    return [("the expert's episode", messages, actions, observations),
            ("an episode whose first turn was cut at the token limit", messages, [cut, actions[-1]],
             [cut_reply, None])]


def _library_trajectory(tokenizer, end_of_turn_id, messages, actions, observations):
    """What `TrajectoryBuilder` assembles from the same turns: (token_ids, loss_mask, turn_index)."""
    from course_lib.trajectory import TrajectoryBuilder

    builder = TrajectoryBuilder(tokenizer, messages, task_id="t", group_id="g", traj_id="g#0",
                                end_of_turn_id=end_of_turn_id)
    for action, observation in zip(actions, observations):
        builder.add_action(action, [0.0] * len(action), truncated=action[-1] != end_of_turn_id)
        if observation is None:
            builder.finish(0.0)
        else:
            builder.add_observation(observation)
    traj = builder.traj
    return traj.token_ids, traj.loss_mask, traj.turn_index


def _grade_build_trajectory(fn, tokenizer) -> str:
    from course_lib.models import end_of_turn_id

    eot = end_of_turn_id(tokenizer)
    for label, messages, actions, observations in _episodes(tokenizer):
        expected = _library_trajectory(tokenizer, eot, messages, actions, observations)
        got = fn(tokenizer, [dict(m) for m in messages], [list(a) for a in actions], list(observations), eot)
        ids, mask, turns = (list(x) for x in got)
        if not len(ids) == len(mask) == len(turns):
            raise ExerciseFailed(f"{label}: token_ids, loss_mask and turn_index have {len(ids)}, {len(mask)} "
                                 f"and {len(turns)} entries; give one entry per token in each")
        if ids != expected[0]:
            raise ExerciseFailed(f"{label}: " + _wrong_ids(tokenizer, eot, actions, expected, ids))
        if mask != expected[1]:
            raise ExerciseFailed(f"{label}: " + _wrong_mask(tokenizer, eot, expected, mask))
        if turns != expected[2]:
            raise ExerciseFailed(f"{label}: " + _wrong_turns(expected, turns))
    return ("your token_ids, loss_mask and turn_index equal TrajectoryBuilder's, for turns the model ended "
            "itself and for a turn cut at the token limit.")


def _token(tokenizer, token_id: int) -> str:
    return repr(tokenizer.convert_ids_to_tokens(token_id))


def _wrong_ids(tokenizer, eot, actions, expected, ids) -> str:
    """Why `ids` differ from the library's: the end-of-turn token kept twice or dropped, else the first
    difference."""
    exp_ids, exp_mask, exp_turns = expected
    prompt = exp_ids[:exp_turns.count(-1)]
    twice, dropped = list(prompt), list(prompt)
    for k, action in enumerate(actions):
        delta = [i for i, m, t in zip(exp_ids, exp_mask, exp_turns) if t == k and m == 0]
        stopped = action[-1] == eot
        twice += action + ([eot] if stopped else []) + delta
        dropped += action + (delta[1:] if not stopped and delta[:1] == [eot] else delta)
    if ids == twice:
        return ("the end-of-turn token appears twice after a turn the model ended itself. The template's "
                "delta begins with the ⟨im_end⟩ that closes the turn, which the model already sampled as "
                "the last token of its action: drop that first token of the delta")
    if ids == dropped:
        return ("the ⟨im_end⟩ that closes the cut turn is missing. A turn cut at the token limit has no "
                "end-of-turn token of its own, so the template's stays (with mask 0): drop the delta's "
                "first token only when the action ends with end_of_turn_id")
    if ids[:len(prompt)] != prompt:
        return ("the prompt's ids differ from render(tokenizer, messages, add_generation_prompt=True), "
                "encoded with add_special_tokens=False")
    i = next((i for i, (a, b) in enumerate(zip(ids, exp_ids)) if a != b), min(len(ids), len(exp_ids)))
    mine = _token(tokenizer, ids[i]) if i < len(ids) else "the end"
    library = _token(tokenizer, exp_ids[i]) if i < len(exp_ids) else "the end"
    return (f"your token_ids differ from the library's at position {i}: {mine} where the library has "
            f"{library}. Append each action's ids exactly as sampled; the environment's reply is a message "
            "of role 'tool' after the assistant's, and only the rendered text past what you have is encoded")


def _wrong_mask(tokenizer, eot, expected, mask) -> str:
    exp_ids, exp_mask, exp_turns = expected
    i = next(i for i, (a, b) in enumerate(zip(mask, exp_mask)) if a != b)
    k, token = exp_turns[i], _token(tokenizer, exp_ids[i])
    if k == -1:
        return (f"position {i} ({token}) is part of the prompt, yet its mask is 1. The model read the "
                "prompt, it did not write it: mask 0")
    if exp_mask[i] == 0 and exp_ids[i] == eot and exp_mask[i - 1] == 1:  # closes a turn cut short
        return (f"position {i} is the ⟨im_end⟩ the template wrote to close the cut turn {k}, yet its mask "
                "is 1. The model never sampled it (it was stopped at the token limit): mask 0")
    if exp_mask[i] == 0:
        return (f"position {i} ({token}) is part of the environment's reply to turn {k} (the tool's "
                "output or the template markers around it), yet its mask is 1. The model reads it but did "
                "not choose it: mask 0")
    if exp_ids[i] == eot:
        return (f"position {i} is the end-of-turn token the model sampled to end turn {k}, yet its mask "
                "is 0. Stopping was the model's choice, so it is trained on: mask 1")
    return f"position {i} ({token}) was sampled by the model in turn {k}, yet its mask is 0: mask 1"


def _wrong_turns(expected, turns) -> str:
    _, exp_mask, exp_turns = expected
    i = next(i for i, (a, b) in enumerate(zip(turns, exp_turns)) if a != b)
    k = exp_turns[i]
    if k == -1:
        return f"position {i} is part of the prompt, which belongs to no turn: turn_index −1, not {turns[i]}"
    if exp_mask[i] == 0 and turns[i] == k + 1:
        return (f"position {i} is part of the environment's reply to action {k}, so it belongs to turn {k}; "
                f"you gave it {k + 1}, the turn it leads into. An action and its consequence share one turn "
                "index")
    return (f"turn_index at position {i} is {turns[i]}, expected {k}: the action of turn k and the "
            "environment's reply to it both have turn index k")


def check_environment_positions(fn: Any, tokenizer: Any) -> Any:
    """Notebook 03: `fn(trajectory) -> list[int]` gives the positions the environment wrote after the
    prompt."""
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
        raise ExerciseFailed(
            "your positions include model tokens (loss_mask 1); the environment's have loss_mask 0"
        )
    raise ExerciseFailed(
        f"got {len(got)} positions, expected {len(expected)} (first expected: {expected[:5]}); "
        "return every position with loss_mask 0 and turn_index >= 0, in increasing order"
    )


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
    return graded(
        fn,
        "keeps_prefix",
        "render both conversations with add_generation_prompt=True and compare with str.startswith.",
        partial(_grade_keeps_prefix, tokenizer=tokenizer, rewriting_tokenizer=rewriting_tokenizer),
    )


def _grade_keeps_prefix(fn, tokenizer, rewriting_tokenizer) -> str:
    call = '<tool_call>{"name": "lookup", "arguments": {"name": "Kalo"}}</tool_call>'
    first = [{"role": "user", "content": "Where is Kalo?"},
             {"role": "assistant", "content": "Let me look. " + call},
             {"role": "tool", "content": "Agent Kalo is stationed in Orvane."}]
    second = first + [{"role": "assistant", "content": "Checking again. " + call},
                      {"role": "tool", "content": "Agent Kalo is stationed in Orvane."}]
    if not fn(tokenizer, first, second):
        raise ExerciseFailed(
            "with the model's own ChatML template the prefix property holds, but you said False. "
            "Render both with add_generation_prompt=True and use str.startswith"
        )
    if fn(rewriting_tokenizer, first, second):
        raise ExerciseFailed(
            "the rewriting template drops the first turn's thought once a second turn exists, "
            "so the prefix property is broken, but you said True"
        )
    return "you can tell a template that keeps history from one that rewrites it."
