"""Text matched the way people type it: one folding shared by the erasure and the audit.

`fold` makes `Straße`, `STRASSE` and `strasse` equal, and a composed `é` equal to `e` + a
combining accent (Unicode compatibility decomposition, then case folding, then decomposition
again, since case folding can produce characters that decompose), with every run of
whitespace one space, and curly apostrophes and quotes, primes and dashes their ASCII forms
(`landlord’s` as typed on a phone is `landlord's` as typed on a keyboard). Accents are kept:
`resume` does not match `résumé`.

`fold_map` also says, for every folded character, which character of the original it came
from, so a match found in folded text can be cut from the original (`spans`, `cut`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

CUT_MARK = "[…]"


# What phones and word processors type for the ASCII a keyboard gives: curly apostrophes and
# quotes, primes, the dash family.
_PUNCTUATION = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201b\u02bc\u2032\uff07", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\uff02", '"'),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d", "-"),
    }
)


def _fold_char(char: str) -> str:
    if char.isspace():
        return " "
    char = char.translate(_PUNCTUATION)
    return unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", char).casefold())


def fold(text: str) -> str:
    """`text` as matched: compatibility-decomposed, case-folded, whitespace runs as one space."""
    return fold_map(text).text


@dataclass(frozen=True)
class Folded:
    text: str
    origin: list[int]  # origin[i]: index in the original of the character folded into text[i]


def fold_map(text: str) -> Folded:
    out: list[str] = []
    origin: list[int] = []
    last_space = True  # leading whitespace dropped
    for i, char in enumerate(text):
        folded = _fold_char(char)
        if folded == " ":
            if last_space:
                continue
            last_space = True
        else:
            last_space = False
        for piece in folded:
            out.append(piece)
            origin.append(i)
    while out and out[-1] == " ":
        out.pop()
        origin.pop()
    return Folded("".join(out), origin)


def contains(haystack: str, needle: str) -> bool:
    """True when `needle` occurs in `haystack`, both folded (an empty needle never occurs)."""
    wanted = fold(needle)
    return bool(wanted) and wanted in fold(haystack)


def spans(haystack: str, needles: Iterable[str]) -> list[tuple[int, int]]:
    """Where the needles occur in `haystack` (folded matching), as merged [start, end) ranges of
    the original text, in order. Needles that fold to nothing are ignored."""
    folded = fold_map(haystack)
    found: list[tuple[int, int]] = []
    for needle in {fold(n) for n in needles}:
        if not needle:
            continue
        start = folded.text.find(needle)
        while start != -1:
            end = start + len(needle)
            found.append((folded.origin[start], folded.origin[end - 1] + 1))
            start = folded.text.find(needle, end)
    return merge(found)


def cut(text: str, ranges: list[tuple[int, int]], mark: str = CUT_MARK) -> str:
    """`text` with each range replaced by `mark` (ranges as `spans` gives them)."""
    if not ranges:
        return text
    out: list[str] = []
    at = 0
    for start, end in ranges:
        out.append(text[at:start])
        out.append(mark)
        at = end
    out.append(text[at:])
    return "".join(out)


def merge(ranges: list[tuple[int, int]], *, gap: int = 0) -> list[tuple[int, int]]:
    """Ranges sorted, overlapping ones (or ones at most `gap` characters apart) made one."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + gap:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
