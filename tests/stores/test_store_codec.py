"""Fact ids, fact de-duplication keys and schema upgrades (shared by both stores)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from bot.stores import codec
from bot.stores.ids import canonical_fact_id, new_fact_id, normalize_fact
from bot.stores.records import SCHEMA_VERSION, StoredMessage, ToolInstall


def test_fact_ids_are_short_and_unambiguous() -> None:
    ids = {new_fact_id() for _ in range(2000)}
    assert len(ids) > 1990
    assert all(re.fullmatch(r"[0-9a-hjkmnp-tv-z]{6}", i) for i in ids)
    assert canonical_fact_id("  AB12CD ") == "ab12cd"


@given(st.text())
def test_normalizing_a_fact_is_idempotent(text: str) -> None:
    once = normalize_fact(text)
    assert normalize_fact(once) == once


@given(st.text(alphabet=st.characters(categories=["L", "N"]), min_size=1))
def test_normalizing_ignores_case_and_spacing(text: str) -> None:
    assert normalize_fact(f"  {text}  ") == normalize_fact(text.casefold() + ".")
    assert normalize_fact(f"{text} {text}") == normalize_fact(f"{text}\n\t {text}")


def test_normalized_examples() -> None:
    assert normalize_fact("  Allergic to   PEANUTS!") == "allergic to peanuts"
    assert normalize_fact("Likes C++") != normalize_fact("Likes C")


def test_upgrade_fills_fields_of_version_zero_and_keeps_current_ones() -> None:
    old = {"session": "s", "seq": 7, "speaker": "p", "role": "user", "content": "hi"}
    message = codec.load(StoredMessage, old)
    assert (message.turn_id, message.schema_version) == ("legacy-7", SCHEMA_VERSION)
    assert "turn_id" not in old  # the stored document is not mutated

    current = ToolInstall(team="slack:T1", pack="weather")
    assert codec.load_json(ToolInstall, codec.dump_json(current)) == current
