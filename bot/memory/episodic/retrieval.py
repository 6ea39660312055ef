"""Retrieval for a turn: the scope's entries (filtered by the index query, before any ranking),
ranked by BM25 and by cosine similarity, fused by reciprocal rank, cut by a relevance threshold.

Cost per turn: one `changes()` round trip to the index (the scope's entries are cached in
process, per scope, and only what changed since the last turn is fetched), plus embedding the
question (concurrently with that round trip; after it, and only if the scope has entries, when
the scope was empty or not cached yet). A deletion in the team (erasure) bumps the team's
generation and the scope is reloaded whole.

Relevance: a question gets memories only if at least one entry matches it well: lexically (its
terms carry at least `LEXICAL_GATE` of the question's IDF weight, or it shares at least
`GATE_TERMS` distinct terms with the question) or semantically (cosine at least `DENSE_GATE`);
so an unrelated question brings back nothing. Past that gate, fused results need some match of
either kind to be kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from cachetools import LRUCache

from bot.embeddings.base import Embedder, EmbeddingError, Vectors
from bot.memory.episodic.ranking import Ranked, ScopeCorpus, fuse
from bot.memory.episodic.text import relative_date_words, terms
from bot.stores.memory_index import MemoryIndex, MemoryScope

log = logging.getLogger(__name__)

LEXICAL_GATE = 0.5
GATE_TERMS = 2
DENSE_GATE = 0.45
LEXICAL_FLOOR = 0.1
DENSE_FLOOR = 0.25
CANDIDATES = 200  # from each ranking, before fusion
MAX_QUESTION_CHARS = 2000


@dataclass
class _Scope:
    corpus: ScopeCorpus = field(default_factory=ScopeCorpus)
    cursor: int = 0
    generation: int = -1


class Retriever:
    def __init__(
        self, index: MemoryIndex, embedder: Embedder | None, *, cached_scopes: int = 256
    ) -> None:
        self.index = index
        self.embedder = embedder
        self._scopes: LRUCache[str, _Scope] = LRUCache(maxsize=cached_scopes)

    async def search(
        self,
        scope: MemoryScope,
        question: str,
        *,
        now: datetime,
        limit: int = 25,
        exclude_sources: Collection[str] = (),
        exclude_ids: Collection[str] = (),
    ) -> list[Ranked]:
        """The best `limit` entries for `question` within `scope`, best first; [] when nothing
        is relevant. Entries whose sources are all in `exclude_sources` (already in the
        context) are skipped."""
        question = question[:MAX_QUESTION_CHARS]
        known = self._scopes.get(scope.key)
        if known is not None and len(known.corpus):
            # The usual case: embed the question while the index round trip runs.
            vector_task = asyncio.create_task(self._embed(question))
            try:
                cached = await self._refresh(scope)
            finally:
                query_vector = await vector_task
        else:
            # A scope not seen yet, or seen empty (a new place: the first message in a channel):
            # embedding the question (~2.5 ms of CPU with the local model) waits for the round
            # trip to show there is anything to compare it with.
            cached = await self._refresh(scope)
            query_vector = await self._embed(question) if len(cached.corpus) else None
        corpus = cached.corpus
        if not len(corpus):
            return []
        query_terms = terms(f"{question} {relative_date_words(question, now)}")
        scores, coverage, distinct = corpus.bm25(query_terms)
        cosines: dict[int, float] = {}
        if query_vector is not None and self.embedder is not None:
            cosines = corpus.cosines(query_vector, self.embedder.name)

        if (
            max(coverage.values(), default=0.0) < LEXICAL_GATE
            and max(distinct.values(), default=0) < GATE_TERMS
            and max(cosines.values(), default=0.0) < DENSE_GATE
        ):
            return []
        excluded, excluded_ids = set(exclude_sources), set(exclude_ids)

        def usable(at: int) -> bool:
            if coverage.get(at, 0.0) < LEXICAL_FLOOR and cosines.get(at, 0.0) < DENSE_FLOOR:
                return False
            if corpus.entries[at].id in excluded_ids:
                return False
            sources = corpus.entries[at].source_ids
            return not (excluded and sources and all(s in excluded for s in sources))

        lexical = [at for at in sorted(scores, key=lambda a: -scores[a]) if usable(at)]
        dense = [at for at in sorted(cosines, key=lambda a: -cosines[a]) if usable(at)]
        fused = fuse(lexical[:CANDIDATES], dense[:CANDIDATES])
        best = sorted(fused, key=lambda a: (-fused[a], a))[:limit]
        return [
            Ranked(
                entry=corpus.entries[at],
                score=fused[at],
                lexical=coverage.get(at, 0.0),
                cosine=cosines.get(at),
            )
            for at in best
        ]

    async def _embed(self, question: str) -> Vectors | None:
        if self.embedder is None:
            return None
        try:
            vectors = await self.embedder.embed([question])
            row: Vectors = vectors[0]
            return row
        except EmbeddingError as exc:
            log.warning("episodic_question_embed_failed", extra={"fields": {"error": str(exc)}})
            return None

    async def _refresh(self, scope: MemoryScope) -> _Scope:
        cached = self._scopes.get(scope.key)
        if cached is None:
            cached = _Scope()
        changes = await self.index.changes(scope, after=cached.cursor)
        if cached.generation not in (-1, changes.generation):
            # Something was deleted in this team since: reload the scope whole.
            cached = _Scope()
            changes = await self.index.changes(scope)
        for entry in changes.entries:
            cached.corpus.upsert(entry)
        cached.cursor, cached.generation = changes.cursor, changes.generation
        self._scopes[scope.key] = cached
        return cached

    def forget_cache(self) -> None:
        self._scopes.clear()


def as_vector(values: list[float]) -> Vectors:
    return np.asarray(values, dtype=np.float32)
