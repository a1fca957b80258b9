"""The tool-call parser: well-formed actions parse, malformed ones become readable errors, nothing raises."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.protocol import (
    Tool,
    completes_stop_string,
    format_answer,
    format_tool_call,
    parse_action,
    quoted,
    render_system_prompt,
)

TOOLS = [
    Tool("search", "Search the corpus.", {"query": ("string", "what to look for")}),
    Tool("move", "Move one cell.",
         {"direction": ("string", "up/down/left/right"), "steps": ("integer", "how far")},
         optional=("steps",)),
]


def test_tool_call_parses():
    a = parse_action('I will search. <tool_call>{"name": "search", "arguments": {"query": "Orrin '
                     'Guild"}}</tool_call>', TOOLS)
    assert (a.kind, a.name, a.arguments) == ("tool_call", "search", {"query": "Orrin Guild"})


def test_answer_parses_and_trailing_whitespace_is_fine():
    a = parse_action("<answer> Port Aldis </answer>\n", TOOLS)
    assert (a.kind, a.answer) == ("answer", "Port Aldis")


def test_optional_argument_may_be_left_out():
    assert parse_action(format_tool_call("move", {"direction": "up"}), TOOLS).ok


def test_canonical_formatters_round_trip():
    assert parse_action(format_tool_call("search", {"query": "ä ö"}), TOOLS).arguments == {"query": "ä ö"}
    assert parse_action(format_answer("42"), TOOLS).answer == "42"


def test_system_prompt_lists_every_tool_and_the_syntax():
    prompt = render_system_prompt("Answer questions.", TOOLS)
    assert "search" in prompt and "move" in prompt and "<tool_call>" in prompt and "<answer>" in prompt


MALFORMED = {
    "plain text, no call": ("The answer is probably Paris.", "no tool call and no answer"),
    "bad json": ('<tool_call>{"name": "search", "arguments": {query: x}}</tool_call>', "not valid JSON"),
    "truncated json": ('<tool_call>{"name": "search", "arguments": {"query": "a"</tool_call>',
                       "not valid JSON"),
    "unknown tool": ('<tool_call>{"name": "serch", "arguments": {"query": "a"}}</tool_call>',
                     "tools are: search, move"),
    "missing argument": ('<tool_call>{"name": "search", "arguments": {}}</tool_call>',
                         "needs the argument 'query'"),
    "unknown argument": ('<tool_call>{"name": "search", "arguments": {"query": "a", "k": 3}}</tool_call>',
                         "no argument 'k'"),
    "wrong argument type": ('<tool_call>{"name": "search", "arguments": {"query": 5}}</tool_call>',
                            "must be of type string"),
    "bool is not an integer": ('<tool_call>{"name": "move", "arguments": {"direction": "up", '
                               '"steps": true}}</tool_call>', "must be of type integer"),
    "two calls at once": (format_tool_call("search",
                                           {"query": "a"}) + format_tool_call("search", {"query": "b"}),
                          "exactly one"),
    "call and answer at once": (format_tool_call("search", {"query": "a"}) + format_answer("x"),
                                "exactly one"),
    "text after the call": (format_tool_call("search", {"query": "a"}) + "\nResult: found it",
                            "nothing may follow"),
    "text after the answer": (format_answer("x") + " because", "nothing may follow"),
    "unclosed call": ('<tool_call>{"name": "search", "arguments": {"query": "a"}}', "not closed"),
    "unclosed answer": ("<answer>Paris", "not closed"),
    "empty answer": ("<answer>  </answer>", "empty"),
    "closing tag only": ('{"name": "search"}</tool_call>', "closing tag without"),
    "json array instead of object": ('<tool_call>["search", "a"]</tool_call>', "JSON object"),
    "name is not a string": ('<tool_call>{"name": 3, "arguments": {}}</tool_call>', "'name'"),
    "arguments not an object": ('<tool_call>{"name": "search", "arguments": "a"}</tool_call>',
                                "must be a JSON object"),
    "extra top-level key": ('<tool_call>{"name": "search", "arguments": {"query": "a"}, "id": 1}</tool_call>',
                            "unexpected key"),
    "empty call": ("<tool_call></tool_call>", "not valid JSON"),
    "deeply nested json": ("<tool_call>" + "[" * 100000 + "]" * 100000 + "</tool_call>", ""),
    # json.loads raises a plain ValueError (not a JSONDecodeError) past Python's 4300-digit int limit.
    "integer too long": ('<tool_call>{"name": "search", "arguments": {"query": '
                         + "9" * 5000 + "}}</tool_call>", "a number is too long"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_action_becomes_readable_error(case):
    text, expected = MALFORMED[case]
    action = parse_action(text, TOOLS)
    assert action.kind == "malformed" and not action.ok
    assert expected in action.error, action.error


def test_non_string_input_is_an_error_not_an_exception():
    assert parse_action(None, TOOLS).kind == "malformed"  # type: ignore[arg-type]


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_random_text_never_raises(text):
    action = parse_action(text, TOOLS)
    assert action.kind in {"tool_call", "answer", "malformed"}
    assert action.ok or action.error


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<tool_call>", "</tool_call>", "<answer>",
                                 "</answer>", "{", "}", '"name"', ":",
                                 '"search"', '"arguments"', '"query"', ",", "[", "]", "x",
                                 " ", "\n", "null", "1"]),
                max_size=40))
def test_random_tag_soup_never_raises(parts):
    action = parse_action("".join(parts), TOOLS)
    assert action.kind in {"tool_call", "answer", "malformed"}


NUMBER_TOOL = Tool("scale", "Scale by a factor.", {"factor": ("number", "the factor")})


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_rejected(literal):
    action = parse_action('<tool_call>{"name": "scale", "arguments": {"factor": ' + literal
                          + "}}</tool_call>", [NUMBER_TOOL])
    assert action.kind == "malformed" and "must be a finite number" in action.error, action.error
    assert parse_action(format_tool_call("scale", {"factor": 1e300}), [NUMBER_TOOL]).ok


@pytest.mark.parametrize("text", [
    format_tool_call("x" * 200_000, {"query": "a"}),  # unknown tool
    format_tool_call("search", {"query": "a", "k" * 200_000: 1}),  # unknown argument
    # extra key
    '<tool_call>{"name": "search", "arguments": {"query": "a"}, "' + "k" * 200_000 + '": 1}</tool_call>',
])
def test_errors_echo_at_most_a_short_excerpt(text):
    action = parse_action(text, TOOLS)
    assert action.kind == "malformed" and len(action.error) < 250 and "…" in action.error, action.error[:300]


def test_quoted_cuts_long_text_with_an_ellipsis():
    assert quoted("up") == "'up'"
    assert quoted("x" * 80) == repr("x" * 80)
    assert quoted("x" * 81) == repr("x" * 79 + "…")


def test_a_stop_string_is_found_only_when_the_newest_piece_completes_it():
    assert completes_stop_string('<tool_call>{"name": "search"}</tool_call>', "call>")
    assert completes_stop_string("<answer>Port Aldis</answer>", ">")
    assert not completes_stop_string("<answer>Port Aldis</ans", "ans")
    # Only the tail is looked at: an old closing tag far back does not end the turn again.
    assert not completes_stop_string("</answer>" + " words" * 10, " words")
