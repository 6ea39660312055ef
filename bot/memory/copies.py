"""Finding a person's words where other records quote them, to cut them out (the rest kept).

A model repeats and quotes what it was given, so a person's words travel: into the bot's replies
in other people's turns, summaries, index entries (their text and their match-only context),
consolidated memories, tool-call arguments. `/memory forget all` and a platform delete cut them
from those records with a `WordCutter` built from what the person said.

What counts as a quote (matched after `bot.textfold` folding, so case and Unicode forms do not
hide one): any run of `SHINGLE` consecutive words of one of the person's texts; a whole shorter
sentence of theirs that carries a distinctive word (`LONG_WORD` letters or more, letters mixed
with digits, or a number of `MIN_NUMBER` digits or more); a one-word message that is a code
(letters and digits, `MIN_CODE` or more characters). Common short sentences ("thank you so
much", "yes", "I love my cat", "room 4") are not cut from other people's records: they say
nothing of the person and are everyone's words too.
A paraphrase is not a quote and is not found; records drawn wholly from
the person's words (their messages, summaries of their turns, entries naming them) are erased
whole elsewhere, not cut here.

Matching is linear: the target's words are read once per distinct n-gram length (at most
`SHINGLE` lengths), each window looked up in a set.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bot.textfold import Folded, cut, fold, fold_map, merge

SHINGLE = 6
LONG_WORD = 8
MIN_CODE = 6
MIN_NUMBER = 3  # digits
_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"[.!?;\n]+")


def _words(folded: str) -> list[str]:
    return _WORD.findall(folded)


def _rare(word: str) -> bool:
    """A word that says something of who wrote it: long, a code (letters and digits), or a
    number of three digits or more ("room 4" and "at 5" are everyone's)."""
    digits = sum(c.isdigit() for c in word)
    return len(word) >= LONG_WORD or (0 < digits < len(word)) or digits >= MIN_NUMBER


def _distinctive(words: list[str]) -> bool:
    if len(words) == 1:
        (word,) = words
        has_digit = any(c.isdigit() for c in word)
        return len(word) >= MIN_CODE and has_digit and any(c.isalpha() for c in word)
    return any(_rare(w) for w in words)


@dataclass
class WordCutter:
    """The person's quotable n-grams, by length."""

    grams: dict[int, set[tuple[str, ...]]] = field(default_factory=dict)

    @classmethod
    def of(cls, texts: Iterable[str]) -> WordCutter:
        cutter = cls()
        for text in texts:
            cutter.add(text)
        return cutter

    def add(self, text: str) -> None:
        folded = fold_map(text).text
        words = _words(folded)
        for i in range(len(words) - SHINGLE + 1):
            self.grams.setdefault(SHINGLE, set()).add(tuple(words[i : i + SHINGLE]))
        for sentence in _SENTENCE_END.split(folded):
            said = _words(sentence)
            if not said or len(said) >= SHINGLE:
                continue  # longer sentences are covered by their shingles
            if _distinctive(said):
                self.grams.setdefault(len(said), set()).add(tuple(said))

    def __bool__(self) -> bool:
        return bool(self.grams)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where `text` quotes the person: merged [start, end) ranges of the original text."""
        if not self.grams or not text:
            return []
        folded = fold_map(text)
        tokens = [(m.group(), m.start(), m.end()) for m in _WORD.finditer(folded.text)]
        found: list[tuple[int, int]] = []
        for n, grams in self.grams.items():
            for i in range(len(tokens) - n + 1):
                if tuple(t[0] for t in tokens[i : i + n]) in grams:
                    found.append(_original(folded, tokens[i][1], tokens[i + n - 1][2]))
        return merge(found, gap=1)  # quotes one space or mark apart: one cut

    def cut(self, text: str, *, theirs: Sequence[str] = ()) -> str:
        """`text` with every quote of the person replaced by a mark; unchanged when none.
        `theirs`: what the people whose record this is said themselves, folded
        (`bot.textfold.fold`): a quote of their own words is theirs too, and stays. Read only
        where a quote was found."""
        ranges = self.spans(text)
        if theirs and ranges:
            ranges = [(a, b) for a, b in ranges if not _said_in(fold(text[a:b]), theirs)]
        return cut(text, ranges)


def _said_in(piece: str, texts: Sequence[str]) -> bool:
    return any(piece in t for t in texts)


def _original(folded: Folded, start: int, end: int) -> tuple[int, int]:
    return folded.origin[start], folded.origin[end - 1] + 1
