"""Short fact ids and fact-text normalisation, shared by both durable stores."""

from __future__ import annotations

import secrets

# Crockford's base32: no i, l, o or u, so an id read aloud or retyped by a user stays unambiguous.
_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
FACT_ID_LENGTH = 6
# Ids are random, so a collision is retried with a fresh one; this bounds the retries.
FACT_ID_ATTEMPTS = 8


def new_fact_id() -> str:
    """A random 6-character id (30 bits): short enough to type in `/memory forget <id>`."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(FACT_ID_LENGTH))


def canonical_fact_id(fact_id: str) -> str:
    """What a user typed, as stored: ids are lower case and may be pasted with spaces."""
    return fact_id.strip().lower()


def normalize_fact(text: str) -> str:
    """The de-duplication key of a fact: case, spacing and a final full stop do not count."""
    norm = " ".join(text.casefold().split())
    return norm.rstrip(".!").rstrip()


def clean_fact_text(text: str) -> str:
    """The text to store; an empty fact is a caller bug, not something to remember."""
    cleaned = text.strip()
    if not normalize_fact(cleaned):
        raise ValueError("a fact must have non-empty text")
    return cleaned
