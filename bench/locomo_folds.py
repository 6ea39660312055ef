"""Cross-validated figures and precision for `bench.locomo` (issue 25, items 1 and 4).

Every dev conversation is replayed once; then each setting of the ranking's tuned constants
(`bot.memory.episodic.tuning.Tuning`, a small grid around today's values) is measured on every
conversation through the real retriever: recall of its own questions, and precision: whether a
question gets any memory when nothing relevant exists (another conversation's questions asked in
this one's place; its category-5 questions) and how many recalled blocks (the `MAX_RESULTS` a
turn shows) hold an evidence turn. k-fold: with k folds of conversations, each fold's setting is
chosen on the other folds (best recall@10 among the settings that recall something for at most
`PRECISION_TARGET` of other conversations' questions there) and measured on the held-out fold.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from bot.embeddings.base import Embedder, Vectors
from bot.memory.episodic.retrieval import Retriever
from bot.memory.episodic.service import MAX_RESULTS
from bot.memory.episodic.tuning import Tuning
from bot.stores.memory_index import MemoryScope

PRECISION_TARGET = 0.10  # recalled on another conversation's questions (issue 25)


@dataclass
class Question:
    text: str
    category: int
    evidence: set[str]


@dataclass
class Conversation:
    retriever: Retriever
    scope: MemoryScope
    to_dia: dict[str, str]
    now: datetime
    questions: list[Question]  # categories 1-4 with evidence
    adversarial: list[str]  # category 5


@dataclass
class Measured:
    """One setting on one conversation."""

    recall: list[tuple[int, dict[int, float]]] = field(default_factory=list)  # (category, @k)
    latencies_ms: list[float] = field(default_factory=list)
    no_result: int = 0
    blocks: int = 0  # recalled blocks on its own questions
    blocks_with_evidence: int = 0
    adversarial_recalled: int = 0
    foreign_recalled: dict[int, int] = field(default_factory=dict)  # asked conv -> questions


class QuestionVectors:
    """The embedder with each question's vector kept: the grid asks the same questions again."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name = inner, inner.name
        self._seen: dict[str, Vectors] = {}

    async def embed(self, texts: Sequence[str]) -> Vectors:
        key = "\x00".join(texts)
        if key not in self._seen:
            self._seen[key] = await self.inner.embed(texts)
        return self._seen[key]

    async def close(self) -> None:
        await self.inner.close()


async def measure(
    convs: Sequence[Conversation], tuning: Tuning, ks: Sequence[int], timer: Any
) -> list[Measured]:
    """Each conversation under `tuning`: its own questions, its category-5 ones, and every other
    conversation's questions asked in its place."""
    out: list[Measured] = []
    for conv in convs:
        conv.retriever.tuning = tuning
        got = Measured()
        for q in conv.questions:
            t0 = timer()
            results = await conv.retriever.search(conv.scope, q.text, now=conv.now, limit=max(ks))
            got.latencies_ms.append((timer() - t0) * 1000)
            got.no_result += not results
            ranked: list[str] = []
            for r in results:
                for src in r.entry.source_ids:
                    dia = conv.to_dia.get(src)
                    if dia is not None and dia not in ranked:
                        ranked.append(dia)
            got.recall.append(
                (q.category, {k: len(q.evidence & set(ranked[:k])) / len(q.evidence) for k in ks})
            )
            for r in results[:MAX_RESULTS]:
                got.blocks += 1
                dias = {conv.to_dia.get(s) for s in r.entry.source_ids}
                got.blocks_with_evidence += bool(dias & q.evidence)
        for text in conv.adversarial:
            got.adversarial_recalled += bool(
                await conv.retriever.search(conv.scope, text, now=conv.now, limit=MAX_RESULTS)
            )
        for n, other in enumerate(convs):
            if other is conv:
                continue
            got.foreign_recalled[n] = 0
            for q in other.questions:
                got.foreign_recalled[n] += bool(
                    await conv.retriever.search(conv.scope, q.text, now=conv.now, limit=MAX_RESULTS)
                )
        out.append(got)
    return out


def summary(
    convs: Sequence[Conversation], measured: Sequence[Measured], chosen: Sequence[int]
) -> dict[str, Any]:
    """Recall and precision over the conversations `chosen` (foreign questions: those of the
    other chosen conversations and, for a single one, of all the others, both ways)."""
    recall = [r for i in chosen for r in measured[i].recall]
    ks = sorted(recall[0][1]) if recall else []
    per_cat: dict[int, list[dict[int, float]]] = {}
    for category, at in recall:
        per_cat.setdefault(category, []).append(at)
    pairs = [
        (asked, source)
        for asked in range(len(convs))
        for source in range(len(convs))
        if asked != source
        and (
            (asked in chosen and source in chosen)
            or (len(chosen) == 1 and chosen[0] in (asked, source))
        )
    ]
    foreign = sum(measured[a].foreign_recalled[s] for a, s in pairs)
    foreign_asked = sum(len(convs[s].questions) for _, s in pairs)
    adversarial = sum(len(convs[i].adversarial) for i in chosen)
    blocks = sum(measured[i].blocks for i in chosen)
    return {
        "questions": len(recall),
        "recall_at": {str(k): statistics.fmean(at[k] for _, at in recall) for k in ks},
        "per_category": {
            c: {str(k): statistics.fmean(at[k] for at in v) for k in ks}
            for c, v in sorted(per_cat.items())
        },
        "foreign_recalled": foreign / foreign_asked if foreign_asked else 0.0,
        "adversarial_recalled": (
            sum(measured[i].adversarial_recalled for i in chosen) / adversarial
            if adversarial
            else 0.0
        ),
        "blocks_with_evidence": (
            sum(measured[i].blocks_with_evidence for i in chosen) / blocks if blocks else 0.0
        ),
    }


def grid(base: Tuning, dense: bool) -> list[Tuning]:
    """A small grid around `base`: the gate's constants, and the fusion's when there is a
    dense ranking (without one, fusion does not change the order)."""
    axes: dict[str, list[Any]] = {
        "common_share": [0.2, 0.5, 1.0],
        "terms_coverage": [0.0, 0.2, 0.3],
        "lexical_gate": [0.4, 0.5, 0.6],
        "gate_terms": [2, 3],
        "hop_weight": [0.0, 1.0],
    }
    if dense:
        axes = {
            "terms_coverage": [0.0, 0.2],
            "dense_gate": [0.4, 0.45, 0.5],
            "dense_margin": [0.0, 0.2],
            "dense_weight": [0.25, 0.5],
            "rrf_k": [5, 10, 20],
            "hop_weight": [0.0, 0.5, 1.0],
        }
    names = list(axes)
    return [
        replace(base, **dict(zip(names, values, strict=True)))
        for values in itertools.product(*(axes[n] for n in names))
    ]


def choose(
    convs: Sequence[Conversation], table: Sequence[list[Measured]], train: Sequence[int]
) -> int:
    """The setting (index into `table`) chosen on the conversations `train`."""

    def key(i: int) -> tuple[bool, float, float]:
        s = summary(convs, table[i], train)
        return (s["foreign_recalled"] <= PRECISION_TARGET, s["recall_at"]["10"], -i)

    return max(range(len(table)), key=key)


def cross_validate(
    convs: Sequence[Conversation], settings: Sequence[Tuning], table: Sequence[list[Measured]]
) -> dict[str, Any]:
    """Leave-one-conversation-out (k = the number of conversations): each held-out figure is
    measured with the setting chosen on the others; the pooled held-out questions give the
    per-category table."""
    folds = []
    pooled: list[Measured] = [Measured() for _ in convs]
    for held in range(len(convs)):
        train = [i for i in range(len(convs)) if i != held]
        best = choose(convs, table, train)
        pooled[held] = table[best][held]
        folds.append(
            {
                "held_out": held,
                "tuning": {
                    k: v for k, v in vars(settings[best]).items() if v != getattr(Tuning(), k)
                },
                **summary(convs, table[best], [held]),
            }
        )
    every = list(range(len(convs)))
    return {"folds": folds, "held_out": summary(convs, pooled, every)}
