"""How an approval request reads (bot.approvals.render): readable, bounded, cuts said."""

from __future__ import annotations

import json

from bot.approvals.render import ARGUMENTS_SHOWN, VALUE_CHARS, argument_lines


def test_arguments_one_per_line_long_values_cut_with_a_note() -> None:
    body = "x" * (VALUE_CHARS + 1234)
    lines = argument_lines(json.dumps({"title": "printer\non  fire", "body": body, "n": 3}))
    assert lines[0] == "title: printer on fire"  # whitespace folded onto one line
    assert lines[1] == f"body: {'x' * VALUE_CHARS}… (1,234 more characters not shown)"
    assert lines[2] == "n: 3"


def test_many_arguments_are_counted_not_listed_and_odd_input_is_shown_safely() -> None:
    many = argument_lines(json.dumps({f"k{i}": i for i in range(ARGUMENTS_SHOWN + 5)}))
    assert len(many) == ARGUMENTS_SHOWN + 1 and many[-1] == "… and 5 more arguments"
    assert argument_lines("{}") == ["(no arguments)"]
    assert argument_lines("not json") == ["not json"]
    assert argument_lines(json.dumps([1, 2])) == ["[1, 2]"]
