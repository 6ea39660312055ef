"""What both fact stores share: drafting a version, subject keys, lineage of versions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from bot.keys import PersonKey, SessionKey
from bot.stores import codec
from bot.stores.ids import clean_fact_text
from bot.stores.records import Fact, FactSource


def user_key(person_id: str) -> str | None:
    """`platform:user` of a person id (`platform:team:user`): what every scope of one user on one
    platform (each team or guild, and a DM scope) shares. Parts never contain ":", so it is
    unambiguous; None for a malformed id (such a row never matches)."""
    parts = person_id.split(":")
    if len(parts) != 3 or not all(parts):
        return None
    return f"{parts[0]}:{parts[2]}"


def closed_norm(fact_id: str) -> str:
    """The `live_norm` of a closed version: "~" never starts a normalised live text."""
    return f"~{fact_id}"


def draft_fact(
    person: PersonKey,
    text: str,
    key: str | None,
    source: FactSource,
    session: SessionKey | None,
    source_ref: str | None,
    source_messages: Sequence[str],
    valid_from: datetime | None = None,
) -> Fact:
    """A new live version (its id is assigned on insert), true since `valid_from` (when it was
    said; now by default)."""
    now = codec.now_ms()
    return Fact(
        id="-",
        person=person.id,
        text=clean_fact_text(text),
        key=clean_key(key),
        source=source,
        session=session.id if session is not None else None,
        source_ref=source_ref,
        source_messages=list(source_messages),
        valid_from=valid_from or now,
        created_at=now,
    )


def clean_key(key: str | None) -> str | None:
    """A subject key as stored: lower case, words joined by "_"; empty means none."""
    if key is None:
        return None
    cleaned = "_".join(key.casefold().replace("-", " ").split())
    return cleaned[:64] or None


def lineage(fact_id: str, by_id: dict[str, Fact]) -> list[str]:
    """The fact and every older version it (transitively) replaced."""
    out: list[str] = []
    todo = [fact_id]
    while todo:
        current = todo.pop()
        if current in out or current not in by_id:
            continue
        out.append(current)
        todo.extend(by_id[current].replaces)
    return out
