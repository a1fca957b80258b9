"""The exercise checks of notebook 03, trajectories and the loss mask
(`notebooks/03_trajectories_and_masks.ipynb`): check_environment_positions, check_round_trips,
check_keeps_prefix.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


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
