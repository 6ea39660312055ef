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
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import numpy.typing as npt
from cachetools import LRUCache

from bot.embeddings.base import Embedder, EmbeddingError, Vectors
from bot.memory.episodic.ranking import Cosines, LexicalMatch, Ranked, ScopeCorpus, fuse
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
        cosines = Cosines()
        if query_vector is not None and self.embedder is not None:
            cosines = corpus.cosines(query_vector, self.embedder.name)
        if not relevant(lexical, cosines, tuning):
            return []
        n = len(corpus.entries)
        coverage, closeness = lexical.coverage, cosines.at(n)
        embedded = np.zeros(n, dtype=bool)
        embedded[cosines.rows] = True
        # Past the gate, an entry needs some match of either kind to be ranked at all.
        matching = (coverage >= tuning.lexical_floor) | (closeness >= tuning.dense_floor)
        excluded, excluded_ids = set(exclude_sources), set(exclude_ids)

        def kept(at: int) -> bool:
            if corpus.entries[at].id in excluded_ids:
                return False
            sources = corpus.entries[at].source_ids
            return not (excluded and sources and all(s in excluded for s in sources))

        by_terms = _best(lexical.matched, lexical.scores, matching, kept, tuning.candidates)
        by_meaning = _best(cosines.rows, closeness, matching, kept, tuning.candidates)
        fused = fuse(by_terms, by_meaning, tuning)
        best = sorted(fused, key=lambda a: (-fused[a], a))[:limit]
        if tuning.hop_weight > 0 and best:
            # A second hop: the question again with the rarest words of its best hits (the
            # person, object or place they name), for the turn that shares those rather than
            # the question's words (multi-hop questions); ranked and fused like the others.
            asked = set(query_terms)
            seeds = [
                t
                for at in best[: tuning.hop_seeds]
                for t in corpus.rarest(at, asked, tuning.hop_terms)
            ]
            # BM25 adds up per term: the question's scores plus those of the new words alone.
            added = corpus.bm25(seeds)
            scores = lexical.scores + added.scores if len(added.scores) else lexical.scores
            rows = np.union1d(lexical.matched, added.matched)
            by_hop = _best(rows, scores, matching | (scores > 0), kept, tuning.candidates)
            for rank, at in enumerate(by_hop, start=1):
                if not (matching[at] or tuning.hop_outside):
                    # Reached through a seed's words alone: it shares nothing with the
                    # question, and a seed names the hit's speaker as readily as its subject
                    # (issue 25 follow-up: "what is the vault code again" recalled "Bob likes
                    # tomato soup" through Bob's hit). Dropped, its rank kept: ranking only
                    # what the question matches lost 0.7 point more of held-out recall@10.
                    continue
                fused[at] = fused.get(at, 0.0) + tuning.hop_weight / (tuning.rrf_k + rank)
            best = sorted(fused, key=lambda a: (-fused[a], a))[:limit]
        return [
            Ranked(
                entry=corpus.entries[at],
                score=fused[at],
                lexical=float(coverage[at]),
                cosine=float(closeness[at]) if embedded[at] else None,
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


def _best(
    rows: npt.NDArray[np.intp],
    score: npt.NDArray[np.float64],
    matching: npt.NDArray[np.bool_],
    kept: Callable[[int], bool],
    count: int,
) -> list[int]:
    """The `count` best positions among `rows` by `score` (ties: the earlier entry first) that
    match and are `kept`: the top is found by partition, not by sorting every row."""
    rows = rows[matching[rows]]
    if not len(rows):
        return []
    take = count
    while True:
        if take < len(rows):
            top = rows[np.argpartition(-score[rows], take)[:take]]
        else:
            top = rows
        order = top[np.lexsort((top, -score[top]))]
        out = [int(at) for at in order if kept(int(at))][:count]
        if len(out) >= count or take >= len(rows):
            return out
        take *= 4  # some of the top were excluded (already in the context): look further


def relevant(lexical: LexicalMatch, cosines: Cosines, tuning: Tuning) -> bool:
    """Whether any entry matches the question on what carries information (module docstring)."""
    # In a handful of entries every shared word is in most of them: nothing there is common,
    # and shared terms need no share of the question's weight (the words it adds weigh more).
    few = lexical.entries < tuning.common_min
    at = lexical.matched
    if len(at):
        coverage = lexical.coverage[at]
        enough_terms = (lexical.distinct[at] >= tuning.gate_terms) & (
            few | (coverage >= tuning.terms_coverage)
        )
        passes = (
            (lexical.information[at] >= tuning.info_min)
            & (lexical.informative[at] > 0)
            & (
                (coverage >= tuning.lexical_gate)
                | (enough_terms & (lexical.unseen <= tuning.unseen_max))
            )
        )
        if passes.any():
            return True
    if not len(cosines):
        return False
    best = float(cosines.sims.max())
    if best < tuning.dense_gate:
        return False
    if tuning.dense_margin <= 0 or len(cosines) < tuning.common_min:
        return True  # a handful of entries has no "usual closeness" to stand above
    return best - float(np.median(cosines.sims)) >= tuning.dense_margin
