"""TRL's tool-calling format outside TRL: the episodes `GRPOTrainer`'s own tool loop plays with the
`environment_factory` adapter (`course_lib.integrations.trl_env`), replayed here so that a model can be
measured in the format TRL trains it in, and the expert's episodes rendered in it so that a warm start can
learn it (benchmarks/vs_trl.py's time-to-success mode).

    evaluate_tool_calling        success, interval and turns of greedy episodes in TRL's format
    tool_calling_demonstrations  the expert's episodes in TRL's format, as trajectories `sft_step` trains on
"""

from __future__ import annotations

from typing import Any

import torch

from course_lib.integrations.trl_env import (
    make_trl_environment_factory,
    task_dataset,
    tool_calling_tokenizer,
    tool_schemas,
)
from course_lib.protocol import parse_action
from course_lib.trajectory import Step, TemplatePrefixError, Trajectory


def _trl_tokenizer(tokenizer):
    """`tokenizer` if it already has TRL's response parser (TRL's own `processing_class`), else a copy with
    TRL's tool-calling chat template and parser: the caller's tokenizer (the one a checkpoint saves) stays as
    it is."""
    import copy

    from trl.chat_template_utils import add_response_schema

    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema",
                                                                          None) is None:
        tokenizer = add_response_schema(tool_calling_tokenizer(copy.deepcopy(tokenizer)))
    return tokenizer


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
    from trl.chat_template_utils import parse_response

    from course_lib import wilson_interval

    tokenizer = _trl_tokenizer(tokenizer)
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


# ----- the expert's episodes in TRL's format: demonstrations for a warm start ------------------------------


def _expert_call(env) -> dict[str, Any]:
    """The expert's next action (text in our protocol) as a call of the adapter's tools: a tool call stays
    one, a final answer becomes a call of `answer` (TRL's format has no answer tag)."""
    action = parse_action(env.expert_action(), env.tools)
    if action.kind == "tool_call":
        return {"name": action.name, "arguments": action.arguments}
    if action.kind == "answer":
        return {"name": "answer", "arguments": {"answer": action.answer}}
    raise ValueError(f"the expert of {env.name!r} wrote a malformed action ({action.error}); fix its "
                     "expert_action")


def _expert_episode(adapter, schemas: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Any]]:
    """The expert's episode on a reset adapter: the messages after the prompt (per turn, an assistant message
    with one tool call and, as TRL appends it, the tool's result) and the anchor state of each turn.

    It ends with the call that ends the environment's episode (the answer), without that call's result: the
    evaluator stops there, and nothing after it changes the reward TRL trains on."""
    messages, anchors = [], []
    for _ in range(adapter._env.max_turns):  # every call the adapter runs is a turn of the environment
        anchors.append(adapter._env.state_key())
        tool_call = {"type": "function", "function": _expert_call(adapter._env)}
        messages.append({"role": "assistant", "content": "", "tool_calls": [tool_call]})
        results = _run_tool_calls(adapter, [tool_call], schemas)
        if adapter._env.done:
            return messages, anchors
        messages += results
    raise RuntimeError(f"the expert's episode did not end within {adapter._env.max_turns} turns; its last "
                       f"call came back as {results[0]['content'][:200]!r}")


def _assistant_spans(tokenizer, messages: list[dict[str, Any]],
                     schemas: list[dict[str, Any]]) -> tuple[list[int], list[tuple[int, int]]]:
    """The chat template's token ids of `messages` with the tool `schemas`, and for each assistant message the
    span [start, end) of the tokens the model writes: after the assistant header, through the end-of-sequence
    token that closes its turn (where TRL's loop ends a generated turn).

    A span's ends come from rendering the conversation up to that turn with the generation prompt and
    through the turn; both must be prefixes of the whole rendering, since TRL builds its context by
    concatenating token ids turn by turn."""
    def render_ids(upto: int, generation_prompt: bool = False) -> list[int]:
        return list(tokenizer.apply_chat_template(messages[:upto], tools=schemas, tokenize=True,
                                                  add_generation_prompt=generation_prompt, return_dict=False))

    full, spans = render_ids(len(messages)), []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before, through = render_ids(i, generation_prompt=True), render_ids(i + 1)
        if through[:len(before)] != before or full[:len(through)] != through:
            raise TemplatePrefixError(f"the tool-calling template renders message {i} differently once later "
                                      "messages follow; its tokens cannot be cut out of the conversation")
        ends = [k for k in range(len(before), len(through)) if through[k] == tokenizer.eos_token_id]
        if not ends:
            raise TemplatePrefixError("the tool-calling template does not close an assistant turn with the "
                                      "end-of-sequence token, where TRL's loop ends a turn")
        spans.append((len(before), ends[0] + 1))
    return full, spans


def _demonstration(tokenizer, messages: list[dict[str, Any]], schemas: list[dict[str, Any]], task_id: str,
                   anchors: list[Any], reward: float) -> Trajectory:
    """One rendered episode as a `Trajectory`: loss mask 1 on the assistant spans, turn k from the start of
    turn k's span to the start of the next, the prompt at -1."""
    full, spans = _assistant_spans(tokenizer, messages, schemas)
    results = [m["content"] for m in messages if m["role"] == "tool"] + [""]  # the last call's is not shown
    mask, turn_index, steps = [0] * len(full), [-1] * spans[0][0], []
    for k, (start, end) in enumerate(spans):
        after = spans[k + 1][0] if k + 1 < len(spans) else len(full)
        mask[start:end] = [1] * (end - start)
        turn_index += [k] * (after - start)
        last = k == len(spans) - 1
        steps.append(Step(action_ids=full[start:end], action_text=tokenizer.decode(full[start:end - 1]),
                          logprobs=[0.0] * (end - start), anchor=anchors[k], observation_text=results[k],
                          observation_ids=full[end:after], reward=reward if last else 0.0, done=last))
    return Trajectory(task_id=task_id, group_id=f"{task_id}@expert", traj_id=f"{task_id}@expert#tool_calling",
                      messages=messages, prompt_ids=full[:spans[0][0]], token_ids=full, loss_mask=mask,
                      logprobs=[0.0] * len(full), turn_index=turn_index, steps=steps, reward=reward,
                      verifier_reward=reward)


def tool_calling_demonstrations(tokenizer, env_name: str, tasks: list[dict[str, Any]], *,
                                max_turns: int = 4) -> list[Trajectory]:
    """The expert's episodes in TRL's tool-calling format, one `Trajectory` per task, for `sft_step`.

    The counterpart of `course_lib.rollout.expert_rollout` (our protocol) for the format TRL's tool loop
    trains in: the prompt is the tool-calling dataset row rendered with the tool schemas, as
    `evaluate_tool_calling` and TRL render it; each expert action is an assistant message with one
    `tool_calls` entry (a final answer is a call of the `answer` tool) and its result, run on the adapter
    (`make_trl_environment_factory`), follows as a `tool` message with the text TRL would show. The
    conversation ends with the call that ends the episode.
    `token_ids`: the chat template's rendering of the whole conversation. `loss_mask`: 1 on what the model
    writes in each assistant turn (the tool call and its end-of-turn token), 0 on the system, user and tool
    tokens and on the assistant headers. Log-probs are 0; the reward is the adapter's `get_reward()`.

    tokenizer: the model's tokenizer; a copy gets TRL's tool-calling template if it lacks one.
    max_turns: the environment's turn limit in the adapter.
    """
    tokenizer = _trl_tokenizer(tokenizer)
    factory = make_trl_environment_factory(env_name, max_turns=max_turns)
    schemas = tool_schemas(factory)
    demonstrations = []
    for task, row in zip(tasks, task_dataset(env_name, tasks=tasks, for_tool_calling=True)):
        adapter = factory()
        try:
            adapter.reset(**row)
            episode, anchors = _expert_episode(adapter, schemas)
            reward = adapter.get_reward()
        finally:
            adapter._close()
        demonstrations.append(_demonstration(tokenizer, list(row["prompt"]) + episode, schemas,
                                             str(task["id"]), anchors, reward))
    return demonstrations
