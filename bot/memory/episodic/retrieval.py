"""Retrieval for a turn: the scope's entries (filtered by the index query, before any ranking),
ranked by BM25 and by cosine similarity, fused by reciprocal rank, cut by a relevance threshold.

Cost per turn: one `changes()` round trip to the index (the scope's entries are cached in
process, per scope, and only what changed since the last turn is fetched), plus embedding the
question (concurrently with that round trip; after it, and only if the scope has entries, when
the scope was empty or not cached yet). A deletion in the team (erasure) bumps the team's
generation and the scope is reloaded whole.

Relevance (`relevant`): a question gets memories only if at least one entry matches it on what
carries information: lexically (at least one term that most of the scope's entries do not hold,
and enough of the question's IDF weight, or enough distinct terms carrying a fair share of it)
or semantically (a cosine high in itself and above the scope's usual closeness); so an unrelated
question, or one sharing only words every message holds ("Load test message N from ..."),
brings back nothing. Past that gate, fused results need some match of either kind to
be kept. The constants are in `tuning.py`.
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
from bot.memory.episodic.ranking import LexicalMatch, Ranked, ScopeCorpus, fuse
from bot.memory.episodic.text import relative_date_words, terms
from bot.memory.episodic.tuning import DEFAULT, Tuning
from bot.stores.memory_index import MemoryIndex, MemoryScope

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 2000


@dataclass
class _Scope:
    corpus: ScopeCorpus = field(default_factory=ScopeCorpus)
    cursor: int = 0
    generation: int = -1


class Retriever:
    def __init__(
        self,
        index: MemoryIndex,
        embedder: Embedder | None,
        *,
        cached_scopes: int = 256,
        tuning: Tuning = DEFAULT,
    ) -> None:
        self.index = index
        self.embedder = embedder
        self.tuning = tuning
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
        tuning = self.tuning
        lexical = corpus.bm25(
            query_terms, common_share=tuning.common_share, common_min=tuning.common_min
        )
        cosines: dict[int, float] = {}
        if query_vector is not None and self.embedder is not None:
            cosines = corpus.cosines(query_vector, self.embedder.name)
        if not relevant(lexical, cosines, tuning):
            return []
        excluded, excluded_ids = set(exclude_sources), set(exclude_ids)
        coverage = lexical.coverage

        def usable(at: int) -> bool:
            if (
                coverage.get(at, 0.0) < tuning.lexical_floor
                and cosines.get(at, 0.0) < tuning.dense_floor
            ):
                return False
            if corpus.entries[at].id in excluded_ids:
                return False
            sources = corpus.entries[at].source_ids
            return not (excluded and sources and all(s in excluded for s in sources))

        scores = lexical.scores
        by_terms = [at for at in sorted(scores, key=lambda a: -scores[a]) if usable(at)]
        by_meaning = [at for at in sorted(cosines, key=lambda a: -cosines[a]) if usable(at)]
        fused = fuse(by_terms[: tuning.candidates], by_meaning[: tuning.candidates], tuning)
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


def relevant(lexical: LexicalMatch, cosines: dict[int, float], tuning: Tuning) -> bool:
    """Whether any entry matches the question on what carries information (module docstring)."""
    # In a handful of entries every shared word is in most of them: nothing there is common,
    # and shared terms need no share of the question's weight (the words it adds weigh more).
    few = lexical.entries < tuning.common_min
    for at, information in lexical.information.items():
        if information < tuning.info_min or not lexical.informative.get(at):
            continue
        coverage = lexical.coverage.get(at, 0.0)
        if coverage >= tuning.lexical_gate or (
            lexical.distinct.get(at, 0) >= tuning.gate_terms
            and (few or coverage >= tuning.terms_coverage)
            and lexical.unseen <= tuning.unseen_max
        ):
            return True
    if not cosines:
        return False
    best = max(cosines.values())
    if best < tuning.dense_gate:
        return False
    if tuning.dense_margin <= 0 or len(cosines) < tuning.common_min:
        return True  # a handful of entries has no "usual closeness" to stand above
    return best - float(np.median(list(cosines.values()))) >= tuning.dense_margin
