"""Check functions for the notebooks' exercises: run them on your answer, read the message."""

from __future__ import annotations


class ExerciseFailed(AssertionError):
    pass


def _ok(msg: str) -> None:
    print(f"Correct! {msg}")


def check_count_prompt_tokens(fn, tokenizer) -> None:
    """Notebook 00: `fn(tokenizer, messages) -> int` counts the tokens of a rendered conversation."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there!"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    got = fn(tokenizer, messages)
    if got != expected:
        raise ExerciseFailed(f"got {got} tokens, expected {expected}. Did you render with the chat template "
                             "(apply_chat_template) and include the generation prompt?")
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
