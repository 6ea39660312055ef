"""Ranking the entries of one scope: BM25 over the terms, cosine over the vectors, fused by
reciprocal rank. Pure and synchronous (callers run it where blocking is fine).

`ScopeCorpus` holds one scope's entries with their postings and a vector matrix, updated
incrementally as entries arrive (the retrieval cache keeps one per scope).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from bot.memory.episodic.text import terms
from bot.memory.episodic.tuning import Tuning
from bot.stores.memory_index import MemoryEntry

BM25_K1 = 1.2
BM25_B = 0.75
LEXICAL_CONTEXT = True  # the context (previous message) counts in BM25 too


@dataclass
class Ranked:
    entry: MemoryEntry
    score: float  # fused score (higher is better)
    lexical: float = 0.0  # share of the question's term weight this entry matched (0..1)
    cosine: float | None = None


def _empty(dtype: type = np.float64) -> npt.NDArray[Any]:
    return np.zeros(0, dtype=dtype)


@dataclass
class LexicalMatch:
    """Per entry (arrays indexed by position, zero where it holds no question term): its BM25
    score, the IDF weight of the question's terms it holds (`information`, in nats), that
    weight as a share of the question's (`coverage`), how many distinct question terms it holds
    (`distinct`) and how many of those are held by at most `common_share` of the scope's entries
    (`informative`: a word most entries hold, such as "message" in a channel of load-test
    messages or the year in dated turns, says nothing about any one of them; the scope's own
    statistics decide, not a word list); `matched`, the positions holding any; and the share of
    the question's IDF weight in terms no entry holds (`unseen`: what this scope has never
    heard of). Arrays, not dicts: at 100,000 entries a common term's postings are most of
    them."""

    scores: npt.NDArray[np.float64] = field(default_factory=_empty)
    information: npt.NDArray[np.float64] = field(default_factory=_empty)
    coverage: npt.NDArray[np.float64] = field(default_factory=_empty)
    distinct: npt.NDArray[np.int32] = field(default_factory=lambda: _empty(np.int32))
    informative: npt.NDArray[np.int32] = field(default_factory=lambda: _empty(np.int32))
    matched: npt.NDArray[np.intp] = field(default_factory=lambda: _empty(np.intp))
    unseen: float = 1.0
    entries: int = 0  # in the scope


@dataclass
class Cosines:
    """The question's cosine with every entry embedded by the model asked for: `rows` (their
    positions) and `sims`, aligned."""

    rows: npt.NDArray[np.intp] = field(default_factory=lambda: _empty(np.intp))
    sims: npt.NDArray[np.float32] = field(default_factory=lambda: _empty(np.float32))

    def __len__(self) -> int:
        return len(self.rows)

    def at(self, n: int) -> npt.NDArray[np.float64]:
        """Per position of a scope of `n` entries: the cosine, 0 where there is none."""
        out = np.zeros(n, dtype=np.float64)
        out[self.rows] = self.sims
        return out


@dataclass
class ScopeCorpus:
    entries: list[MemoryEntry] = field(default_factory=list)
    _pos: dict[str, int] = field(default_factory=dict)
    _tf: list[Counter[str]] = field(default_factory=list)
    _len: list[int] = field(default_factory=list)
    _postings: dict[str, dict[int, int]] = field(default_factory=dict)
    _arrays: dict[str, tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]] = field(
        default_factory=dict
    )  # a term's postings as (positions, term frequencies), made when first asked for
    _lengths: npt.NDArray[np.float64] | None = None
    _total_len: int = 0
    _matrix: npt.NDArray[np.float32] | None = None
    _matrix_rows: npt.NDArray[np.intp] = field(default_factory=lambda: _empty(np.intp))
    _matrix_model: str | None = None
    _matrix_dirty: bool = True

    def __len__(self) -> int:
        return len(self._pos)

    def upsert(self, entry: MemoryEntry) -> None:
        """Add an entry, or replace one with the same id (a re-embedded copy). A new entry is
        appended to the arrays the ranking reads (postings, lengths, vectors) rather than
        making them again: in a place of 100,000 entries that took over a second, on the next
        turn after every write."""
        at = self._pos.get(entry.id)
        if at is not None:
            if self.entries[at].stamp == entry.stamp:
                return  # the same version, handed out again (readers' cursor overlap)
            if self.entries[at].text == entry.text:
                self.entries[at] = entry  # same text: only the vector changed
                self._matrix_dirty = True
                return
            self._remove_terms(at)
            self.entries[at] = entry
            self._matrix_dirty = True
            added = False
        else:
            at = len(self.entries)
            self._pos[entry.id] = at
            self.entries.append(entry)
            self._tf.append(Counter())
            self._len.append(0)
            added = True
        tf = Counter(terms(entry.text))
        if LEXICAL_CONTEXT and entry.context:
            tf.update(terms(entry.context))
        self._tf[at], self._len[at] = tf, sum(tf.values())
        self._total_len += self._len[at]
        for term, n in tf.items():
            self._postings.setdefault(term, {})[at] = n
            arrays = self._arrays.get(term)
            if arrays is not None:  # `at` is not in it (new, or the term is new to the entry)
                self._arrays[term] = (np.append(arrays[0], at), np.append(arrays[1], float(n)))
        if self._lengths is not None:
            if added:
                self._lengths = np.append(self._lengths, float(self._len[at]))
            else:
                self._lengths[at] = self._len[at]
        if added and not self._matrix_dirty:
            self._append_vector(at, entry)

    def _append_vector(self, at: int, entry: MemoryEntry) -> None:
        if entry.embedder != self._matrix_model or entry.vector is None:
            return  # not compared with this model's question vectors
        if self._matrix is None or len(entry.vector) != self._matrix.shape[1]:
            self._matrix_dirty = True
            return
        n = len(self._matrix_rows)
        if n == len(self._matrix):  # full: double the buffer
            grown = np.empty((max(2 * n, 64), self._matrix.shape[1]), dtype=np.float32)
            grown[:n] = self._matrix
            self._matrix = grown
        self._matrix[n] = entry.vector
        self._matrix_rows = np.append(self._matrix_rows, at)

    def _remove_terms(self, at: int) -> None:
        for term in self._tf[at]:
            posting = self._postings.get(term)
            if posting is not None:
                posting.pop(at, None)
            self._arrays.pop(term, None)
        self._total_len -= self._len[at]

    # --- lexical ------------------------------------------------------------------------------

    def _posting(self, term: str) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
        arrays = self._arrays.get(term)
        if arrays is None:
            posting = self._postings.get(term, {})
            arrays = (
                np.fromiter(posting.keys(), dtype=np.intp, count=len(posting)),
                np.fromiter(posting.values(), dtype=np.float64, count=len(posting)),
            )
            self._arrays[term] = arrays
        return arrays

    def bm25(
        self, query: list[str], *, common_share: float = 1.0, common_min: int = 0
    ) -> LexicalMatch:
        """BM25 of the question against every entry holding one of its terms; a term held by
        more than `common_share` of the entries, and by at least `common_min` of them (in a
        handful of entries every word is in most), is not counted as `informative`."""
        n = len(self.entries)
        found = LexicalMatch(entries=n)
        if not n or not query:
            return found
        if self._lengths is None:
            self._lengths = np.asarray(self._len, dtype=np.float64)
        avg = max(self._total_len / n, 1.0)
        scores, information = np.zeros(n), np.zeros(n)
        distinct, informative = np.zeros(n, dtype=np.int32), np.zeros(n, dtype=np.int32)
        idf_total = unseen = 0.0
        for term, q in Counter(query).items():
            rows, tf = self._posting(term)
            # A term found nowhere weighs like the rarest term found (df 1) in the coverage:
            # what the scope cannot match should lower relevance, not swamp it.
            df = max(len(rows), 1)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            idf_total += idf * q
            if not len(rows):
                unseen += idf * q
                continue
            lengths = self._lengths[rows]
            norm = tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * lengths / avg))
            scores[rows] += idf * norm * q
            information[rows] += idf * q
            distinct[rows] += 1
            if len(rows) <= common_share * n or len(rows) < common_min:
                informative[rows] += 1
        found.scores, found.information = scores, information
        found.distinct, found.informative = distinct, informative
        found.matched = np.flatnonzero(distinct)
        if idf_total > 0:
            found.coverage = information / idf_total
            found.unseen = unseen / idf_total
        else:
            found.coverage = np.zeros(n)
        return found

    def rarest(self, at: int, skip: set[str], count: int = 3) -> list[str]:
        """The `count` terms of entry `at` held by the fewest entries, apart from `skip`."""
        own = [t for t in self._tf[at] if t not in skip]
        own.sort(key=lambda t: (len(self._postings.get(t, ())), t))
        return own[:count]

    # --- dense --------------------------------------------------------------------------------

    def cosines(self, query: npt.NDArray[np.float32], model: str) -> Cosines:
        """Cosine of the question with every entry embedded by `model` (others are skipped:
        vectors of two models are never compared)."""
        if self._matrix_dirty or self._matrix_model != model:
            rows = [
                i
                for i, e in enumerate(self.entries)
                if e.embedder == model and e.vector is not None
            ]
            self._matrix_rows = np.asarray(rows, dtype=np.intp)
            self._matrix = (
                np.asarray([self.entries[i].vector for i in rows], dtype=np.float32)
                if rows
                else None
            )
            self._matrix_model, self._matrix_dirty = model, False
        n = len(self._matrix_rows)
        if self._matrix is None or not n or self._matrix.shape[1] != query.shape[-1]:
            return Cosines()
        sims = self._matrix[:n] @ query.reshape(-1).astype(np.float32)
        return Cosines(self._matrix_rows, sims)


def fuse(lexical: list[int], dense: list[int], tuning: Tuning) -> dict[int, float]:
    """Weighted reciprocal-rank fusion: weight / (rrf_k + rank) summed over both rankings."""
    fused: dict[int, float] = {}
    for weight, ranking in ((1.0, lexical), (tuning.dense_weight, dense)):
        for rank, at in enumerate(ranking, start=1):
            fused[at] = fused.get(at, 0.0) + weight / (tuning.rrf_k + rank)
    return fused
