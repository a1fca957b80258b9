"""The exercise checks of notebook 00, setup (`notebooks/00_setup.ipynb`): check_count_prompt_tokens,
check_is_tool_call, check_tool_call_text.

Each check grades one exercise and returns what the cells below should use (the rules:
`course_lib.course.grading`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from course_lib.course.grading import ExerciseFailed, graded


def check_count_prompt_tokens(fn: Any, tokenizer: Any) -> Any:
    """Notebook 00: `fn(tokenizer, messages) -> int` counts the tokens of a rendered conversation."""
    return graded(
        fn,
        "count_prompt_tokens",
        "render the conversation with tokenizer.apply_chat_template(..., add_generation_prompt=True) and "
        "count its token ids.",
        partial(_grade_count_prompt_tokens, tokenizer=tokenizer),
    )


def _grade_count_prompt_tokens(fn, tokenizer) -> str:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there!"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    got = fn(tokenizer, messages)
    if got != expected:
        raise ExerciseFailed(
            f"got {got} tokens, expected {expected}. Did you render with the chat template "
            "(apply_chat_template) and include the generation prompt? With tokenize=True, recent "
            "transformers return a dict-like BatchEncoding (its len is the number of fields): "
            "count its ['input_ids']."
        )
    return f"{expected} tokens, including the template's role markers."


def check_is_tool_call(fn: Any) -> Any:
    """Notebook 00: `fn(text) -> bool` says whether a model turn is a well-formed tool call."""
    return graded(fn, "is_tool_call",
                  "return True when parse_action(text, tools).kind is 'tool_call'.",
                  _grade_is_tool_call)


def _grade_is_tool_call(fn) -> str:
    from course_lib.protocol import Tool, parse_action

    tools = [Tool("lookup", "Look up an agent.", {"name": ("string", "code name")})]
    call = '<tool_call>{"name": "lookup", "arguments": {"name": "Kalo"}}</tool_call>'
    cases = {
        call: True,
        "Let me look that up. " + call: True,  # a thought before the call is allowed
        "<answer>Orvane</answer>": False,
        '<tool_call>{"name": "lookup", "arguments": {"name": "Kalo"}}': False,  # never closed
        "I think it is Orvane.": False,
        # both tags present, yet no call: a test for the tags alone accepts these. Not JSON; no such tool;
        # a number where the tool wants a string; no such argument
        "<tool_call>not json</tool_call>": False,
        '<tool_call>{"name": "serch", "arguments": {"name": "Kalo"}}</tool_call>': False,
        '<tool_call>{"name": "lookup", "arguments": {"name": 7}}</tool_call>': False,
        '<tool_call>{"name": "lookup", "arguments": {"agent": "Kalo"}}</tool_call>': False,
        call + " It says Orvane.": False,  # the turn must end with the call
        call + call: False,  # one call per turn
    }
    for text, expected in cases.items():
        got = bool(fn(text))
        if got != expected:
            action = parse_action(text, tools)
            why = (f"the parser reads it as malformed: {action.error}" if action.kind == "malformed"
                   else f"the parser reads it as a well-formed {action.kind}")
            raise ExerciseFailed(f"for {text!r} you said {got}, expected {expected}; {why}. Use "
                                 "course_lib.protocol.parse_action with the tools above and look at .kind: "
                                 "the tags alone do not make a call")
    return "you can tell a tool call from an answer, from a broken call and from text that only has the tags."


def check_tool_call_text(fn: Any) -> Any:
    """Notebook 00: `fn(name, arguments) -> str` writes the text of a tool call that the parser accepts."""
    return graded(
        fn,
        "tool_call_text",
        "return '<tool_call>' + the JSON of {\"name\": name, \"arguments\": arguments} + '</tool_call>'.",
        _grade_tool_call_text,
    )


def _grade_tool_call_text(fn) -> str:
    from course_lib.protocol import Tool, parse_action

    tools = [
        Tool("lookup", "Look up an agent.", {"name": ("string", "code name")}),
        Tool("search", "Search.", {"query": ("string", "what to search for"), "k": ("integer", "results")}),
    ]
    for name, arguments in [("lookup", {"name": "Kalo"}), ("search", {"query": 'Zoë "the elder"', "k": 3})]:
        text = fn(name, arguments)
        action = parse_action(text, tools)
        if action.kind != "tool_call":
            raise ExerciseFailed(
                f"for {name}({arguments}) you wrote {text!r}, which the parser reads as malformed: "
                f"{action.error} Write the JSON with json.dumps, keys 'name' and 'arguments'."
            )
        if action.name != name or action.arguments != arguments:
            raise ExerciseFailed(
                f"for {name}({arguments}) the parser read {action.name}({action.arguments})."
            )
    return "the parser reads back the same tool and the same arguments, quotes and accents included."
