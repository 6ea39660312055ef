"""Scoping keys: no empty or separator-bearing parts, and session ids parse back exactly."""

from __future__ import annotations

import pytest

from bot.keys import PersonKey, SessionKey


@pytest.mark.parametrize(
    "key", [SessionKey("slack", "T1", "C1"), SessionKey("slack", "T1", "C1", "17.5")]
)
def test_session_id_round_trip(key: SessionKey) -> None:
    assert SessionKey.parse(key.id) == key


@pytest.mark.parametrize("bad", ["slack:T1:C1", "a:b:c:d:e", "slack::C1:-", ""])
def test_parse_refuses_what_is_not_a_session_id(bad: str) -> None:
    with pytest.raises(ValueError):
        SessionKey.parse(bad)


@pytest.mark.parametrize(
    "make",
    [
        lambda: PersonKey("slack", "T1", "U:1"),
        lambda: SessionKey("console", "local", "a:b"),
        lambda: SessionKey("slack", "T1", "C1", "-"),
        lambda: PersonKey("slack", " ", "U1"),
    ],
)
def test_parts_that_would_break_ids_are_refused(make: object) -> None:
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]
