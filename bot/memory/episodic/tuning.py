"""The constants of episodic ranking and its relevance gate, in one value, so the LoCoMo bench
can cross-validate them (tune on some conversations, measure on the others: bench/locomo.py)
and the retriever is built with the chosen ones.

The defaults are today's values (k-fold figures: `python -m bench.locomo`); the production path
never changes them per place or per question.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    # Weighted reciprocal-rank fusion: BM25 over stemmed words with dates and the previous
    # message is the stronger ranker, the local embedder the weaker, so the dense ranking counts
    # `dense_weight`, and a small `rrf_k` favours each ranking's top.
    rrf_k: int = 10
    dense_weight: float = 0.5
    # Defaults: the gate before issue 25 (no candidate measured kept recall; see bench/locomo.py).
    # The gate (does this question get any memory?), lexical half: some entry must match
    # `lexical_gate` of the question's IDF weight, or `gate_terms` distinct terms when at most
    # `unseen_max` of that weight is in terms the scope has never seen (a question whose names
    # and topics appear nowhere in the place is about something else, whatever common words it
    # shares with it), and in either case at least `info_min` nats of IDF: words that most of
    # the scope's entries hold ("message", "thanks") carry almost none.
    lexical_gate: float = 0.5
    gate_terms: int = 2
    unseen_max: float = 1.0
    info_min: float = 0.0
    # Dense half: the best cosine must reach `dense_gate` and stand `dense_margin` above the
    # scope's median cosine (messages written alike are all close to each other: closeness
    # that every entry shares says nothing about any one of them).
    dense_gate: float = 0.45
    dense_margin: float = 0.0
    # Past the gate, an entry needs some match of either kind to be ranked at all.
    lexical_floor: float = 0.1
    dense_floor: float = 0.25
    candidates: int = 200  # from each ranking, before fusion


DEFAULT = Tuning()
