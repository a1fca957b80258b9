"""Held-out greedy success in TRL's tool-calling format: the episodes `GRPOTrainer`'s own tool loop plays
with the `environment_factory` adapter (`course_lib.integrations.trl`), replayed here so that a model can be
measured in the format TRL trains it in (benchmarks/vs_trl.py's time-to-success mode).

    evaluate_tool_calling   success, interval and turns of greedy episodes in TRL's format
"""

from __future__ import annotations

from typing import Any

import torch

from course_lib.integrations.trl import (
    make_trl_environment_factory,
    task_dataset,
    tool_calling_tokenizer,
    tool_schemas,
)


def _tool_suffix_ids(tokenizer, tool_messages: list[dict[str, Any]]) -> list[int]:
    """The template's tokens after a turn's end-of-turn token: the tool results and the next assistant header.

    Built as TRL 1.16's `GRPOTrainer._get_tool_suffix_ids` builds them: render a dummy conversation with and
    without the tool messages and keep the difference (the turn before ends at its end-of-sequence token).
    """
    call = {"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}
    dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    prefix = tokenizer.apply_chat_template(dummy, tokenize=True, return_dict=False)
    full = tokenizer.apply_chat_template(dummy + tool_messages, add_generation_prompt=True, tokenize=True,
                                         return_dict=False)
    ends = [i for i, token in enumerate(prefix) if token == tokenizer.eos_token_id]
    prefix = prefix[:ends[-1] + 1] if ends else prefix
    if full[:len(prefix)] != prefix:
        raise ValueError("the chat template renders a tool call differently with and without its results; "
                         "the tool-result tokens cannot be cut out of it")
    return full[len(prefix):]


def _greedy_turns(model, tokenizer, contexts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """One greedy turn for each context (one left-padded batch): its new tokens up to the first
    end-of-sequence token, that token included (TRL keeps it: it closes the assistant turn)."""
    from transformers import GenerationConfig

    device = next(model.parameters()).device
    width, pad, eos = max(map(len, contexts)), tokenizer.pad_token_id, tokenizer.eos_token_id
    input_ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts], device=device)
    attention_mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=device)
    greedy = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos,
                              pad_token_id=pad)
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=greedy)
    turns = []
    for row in out[:, width:].tolist():
        turns.append(row[:row.index(eos) + 1] if eos in row else row)
    return turns


def _run_tool_calls(env, calls: list[dict[str, Any]], schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool messages of one turn's parsed calls, run on the adapter `env` as TRL runs them: an unknown
    tool or a failing call comes back to the model as {"error": ...}."""
    known, results = {s["function"]["name"] for s in schemas}, []
    for call in calls:
        function = call.get("function", {})
        name = function.get("name", "unknown")
        try:
            if name not in known:
                raise ValueError(f"Tool {name} not found.")
            result: Any = getattr(env, name)(**function.get("arguments", {}))
        except Exception as exc:
            result = {"error": str(exc)}
        results.append({"role": "tool", "name": name, "content": str(result)})
    return results


def evaluate_tool_calling(model, tokenizer, env_name: str, tasks: list[dict[str, Any]], *, max_turns: int = 4,
                          max_completion_length: int = 192) -> dict[str, Any]:
    """Greedy held-out success in TRL's tool-calling format: the episodes environment_factory plays.

    The counterpart of `course_lib.evaluate.evaluate` (our protocol, our engine) for the format TRL's tool
    loop trains in: the prompt is the tool-calling dataset row rendered with the tool schemas by TRL's chat
    template; each turn is generated greedily up to the end-of-turn token and parsed by TRL's
    `parse_response`; its tool calls run on the adapter (`make_trl_environment_factory`) and their results
    follow as the template's tool messages. An episode ends at a turn without a tool call (an ``<answer>``
    tag in text is no tool call: the adapter then scores the state where the model stopped), when the
    environment says it is over, after `max_turns` turns, or when the completion (all tokens after the
    prompt) would pass `max_completion_length`, as in TRL 1.16's `_tool_call_loop`.
    Success: the adapter's `get_reward()` (our verifier) above 0.5, as `Trajectory.success`.

    tokenizer: the model's tokenizer; a copy gets TRL's tool-calling template and response parser if it
    lacks them.
    Returns {"success", "ci_low", "ci_high", "n", "outcomes", "mean_turns", "turns_with_tool_calls"}:
    turns_with_tool_calls is the share of generated turns in which TRL's parser found a tool call.
    """
    import copy

    from trl.chat_template_utils import add_response_schema, parse_response

    from course_lib import wilson_interval

    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema",
                                                                          None) is None:
        tokenizer = add_response_schema(tool_calling_tokenizer(copy.deepcopy(tokenizer)))
    factory = make_trl_environment_factory(env_name, max_turns=max_turns)
    schemas = tool_schemas(factory)
    rows = task_dataset(env_name, tasks=tasks, for_tool_calling=True)
    envs = [factory() for _ in rows]
    try:
        contexts, prompt_lengths = [], []
        for env, row in zip(envs, rows):
            env.reset(**row)
            ids = tokenizer.apply_chat_template(row["prompt"], tools=schemas, add_generation_prompt=True,
                                                tokenize=True, return_dict=False)
            contexts.append(list(ids))
            prompt_lengths.append(len(ids))
        turns, with_calls = [0] * len(envs), 0
        active = list(range(len(envs)))
        while active:
            budget = {i: max_completion_length - (len(contexts[i]) - prompt_lengths[i]) for i in active}
            generated = _greedy_turns(model, tokenizer, [contexts[i] for i in active], max(budget.values()))
            still = []
            for i, ids in zip(active, generated):
                ids = ids[:budget[i]]
                prefix, contexts[i] = contexts[i], contexts[i] + ids
                turns[i] += 1
                calls = parse_response(tokenizer, ids, prefix=prefix, tools=schemas).get("tool_calls") or []
                with_calls += bool(calls)
                if not calls or turns[i] >= max_turns:
                    continue
                results = _run_tool_calls(envs[i], calls, schemas)
                if envs[i]._env.done:  # answered or out of turns: no later turn changes the reward
                    continue
                extended = contexts[i] + _tool_suffix_ids(tokenizer, results)
                # TRL drops a result that passes the budget; one that fills it leaves no token for a turn
                if len(extended) - prompt_lengths[i] < max_completion_length:
                    contexts[i] = extended
                    still.append(i)
            active = still
        outcomes = [int(env.get_reward() > 0.5) for env in envs]
    finally:
        for env in envs:
            env._close()
    low, high = wilson_interval(sum(outcomes), len(outcomes))
    return {"success": sum(outcomes) / max(1, len(outcomes)), "ci_low": low, "ci_high": high,
            "n": len(outcomes), "outcomes": outcomes, "mean_turns": sum(turns) / max(1, len(turns)),
            "turns_with_tool_calls": with_calls / max(1, sum(turns))}
