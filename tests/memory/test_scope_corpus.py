"""The retrieval cache's corpus grows in place (issue 25: a place of 100,000 entries made its
arrays again after every write, over a second on the next turn): entries added, edited and
re-embedded between queries must rank exactly as a corpus built from scratch from the same
entries (the oracle)."""

from __future__ import annotations

import numpy as np

from bot.memory.episodic.ranking import ScopeCorpus
from bot.memory.episodic.text import terms
from bot.stores.memory_index import MemoryEntry

MODEL, OTHER = "m", "other"
WORDS = "lisbon order ships friday invoice ferreira customs form late again noon lunch".split()


def entry(i: int, *, text: str | None = None, model: str = MODEL, seed: int = 0) -> MemoryEntry:
    rng = np.random.default_rng(i * 1000 + seed)
    vector = rng.standard_normal(8).astype(np.float32)
    words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 5))
    return MemoryEntry(
        id=f"e{i}",
        team="t",
        place="t:c",
        session="s",
        text=text or f"Monday 8 May 2023\nAlice: {words} {i}",
        embedder=model,
        vector=(vector / np.linalg.norm(vector)).tolist(),
        stamp=i * 10 + seed,
    )


def ask(
    corpus: ScopeCorpus, query: str, vector: np.ndarray
) -> tuple[dict[int, float], dict[int, float]]:
    lexical = corpus.bm25(terms(query))
    cosines = corpus.cosines(vector, MODEL)
    scores = {int(at): float(lexical.scores[at]) for at in lexical.matched}
    return scores, {int(r): float(c) for r, c in zip(cosines.rows, cosines.sims, strict=True)}


def test_a_corpus_grown_between_queries_ranks_as_one_built_at_once() -> None:
    query, vector = "when does the Lisbon order ship friday", np.ones(8, dtype=np.float32)
    grown = ScopeCorpus()
    final: dict[str, MemoryEntry] = {}

    def put(e: MemoryEntry) -> None:
        grown.upsert(e)
        final[e.id] = e
        ask(grown, query, vector)  # the arrays exist before the next write

    for i in range(70):  # past the matrix buffer's first doubling (64 rows)
        put(entry(i, model=OTHER if i % 7 == 0 else MODEL))
    put(entry(3, text="Tuesday 9 May 2023\nAlice: the Lisbon order is late", seed=1))  # edited
    put(entry(5, seed=2))  # re-embedded: same text, new vector
    put(entry(7, model=MODEL, seed=3))  # re-embedded by this model (was another's)
    put(entry(70))

    fresh = ScopeCorpus()
    for e in final.values():  # positions follow first insertion in both
        fresh.upsert(e)
    got_terms, got_cosines = ask(grown, query, vector)
    want_terms, want_cosines = ask(fresh, query, vector)
    assert got_terms.keys() == want_terms.keys()
    for at, score in want_terms.items():
        assert abs(got_terms[at] - score) < 1e-9
    assert got_cosines.keys() == want_cosines.keys()
    for at, cosine in want_cosines.items():
        assert abs(got_cosines[at] - cosine) < 1e-6
    assert len(want_cosines) == sum(e.embedder == MODEL for e in final.values()) == 62
