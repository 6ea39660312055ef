"""What is kept of a fact the person asked to forget, so it stays forgotten.

A tombstone holds no text: the SHA-256 of the fact's folded text (`bot.textfold`, with the
normalisation facts use for duplicates) and the ids of the messages it came from. The nightly
consolidation drops a candidate whose digest matches one, or that cites one of a tombstone's
messages, so the same words never make the fact again. `/memory forget all` erases the
person's tombstones with the rest (their messages are gone then, nothing can remake it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from bot.stores.ids import normalize_fact
from bot.stores.records import Fact, FactTombstone
from bot.textfold import fold


def digest(text: str) -> str:
    return hashlib.sha256(fold(normalize_fact(text)).encode("utf-8")).hexdigest()


def tombstone_of(fact: Fact) -> FactTombstone:
    return FactTombstone(
        person=fact.person, digest=digest(fact.text), sources=list(fact.source_messages)
    )


def buried(text: str, message: str, tombstones: Sequence[FactTombstone]) -> bool:
    """A candidate fact the person asked to forget: the same text, or drawn from a message a
    forgotten fact came from."""
    if not tombstones:
        return False
    wanted = digest(text)
    return any(t.digest == wanted or (message and message in t.sources) for t in tombstones)
