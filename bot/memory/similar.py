"""Cheap text similarity for facts: near duplicates (NOOP without asking a model) and whether
two facts could be about the same subject (a guard on what an UPDATE or DELETE may touch)."""

from __future__ import annotations

import re
from difflib import SequenceMatcher

from bot.stores.ids import normalize_fact

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset(
    "a an the i i'm im am is are was be been my me to of in on at for and or but with that this "
    "it its user they he she his her their now not do does".split()
)


def content_words(text: str) -> set[str]:
    words = {w for w in _WORD.findall(text.casefold()) if w not in _STOP}
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words}  # crude plural


def jaccard(a: str, b: str) -> float:
    wa, wb = content_words(a), content_words(b)
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / len(wa | wb)


def near_duplicate(a: str, b: str) -> bool:
    """Same fact in other words: equal when normalised, or nearly equal character by character
    or word for word."""
    na, nb = normalize_fact(a), normalize_fact(b)
    if na == nb:
        return True
    if SequenceMatcher(None, na, nb).ratio() >= 0.9:
        return True
    wa, wb = content_words(a), content_words(b)
    return len(wa) >= 2 and wa == wb


def related(a: str, b: str) -> bool:
    """Could be about the same subject: some content word in common."""
    return (
        jaccard(a, b) >= 0.25
        or SequenceMatcher(None, normalize_fact(a), normalize_fact(b)).ratio() >= 0.6
    )
