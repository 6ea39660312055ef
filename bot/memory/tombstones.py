"""What is kept of a fact the person asked to forget, so it stays forgotten.

A tombstone holds no text: the SHA-256 of the fact's folded text (`bot.textfold`, with the
normalisation facts use for duplicates), a digest of each of its content words
(`bot.memory.similar.content_words`: "I am allergic to X" and "Is allergic to X" have the same
ones), and the ids of the messages it came from. The nightly consolidation drops a candidate
whose digest matches one, whose content words cover `COVERED` of a tombstone's, or that cites
one of a tombstone's messages: the same statement in other words (as the extraction model words
it) does not make the fact again. A short fact's word digests can be guessed by trying words;
they say no more than the fact's own digest does. `/memory forget all` erases the
person's tombstones with the rest (their messages are gone then, nothing can remake it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from bot.memory.similar import content_words
from bot.stores.ids import normalize_fact
from bot.stores.records import Fact, FactTombstone
from bot.textfold import fold

COVERED = 0.8  # of a tombstone's content words a candidate must have to be the same fact


def digest(text: str) -> str:
    return hashlib.sha256(fold(normalize_fact(text)).encode("utf-8")).hexdigest()


def word_digests(text: str) -> set[str]:
    return {hashlib.sha256(w.encode("utf-8")).hexdigest()[:16] for w in content_words(fold(text))}


def tombstone_of(fact: Fact) -> FactTombstone:
    return FactTombstone(
        person=fact.person,
        digest=digest(fact.text),
        sources=list(fact.source_messages),
        words=sorted(word_digests(fact.text)),
    )


def buried(text: str, message: str, tombstones: Sequence[FactTombstone]) -> bool:
    """A candidate fact the person asked to forget: the same text, the same content words, or
    drawn from a message a forgotten fact came from."""
    if not tombstones:
        return False
    wanted, words = digest(text), word_digests(text)
    return any(
        t.digest == wanted
        or (message and message in t.sources)
        or (t.words and len(words.intersection(t.words)) >= COVERED * len(t.words))
        for t in tombstones
    )
