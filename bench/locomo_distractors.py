"""`bench.locomo --distractors N`: LoCoMo recall at the size of a real workspace (issue 25).

Each conversation is replayed into a place that already holds N other turns of the same
audience: turns of the *other* dev conversations, copied as often as needed, each copy with its
speakers renamed (in the speaker field and wherever the name is written in a turn) and its
session dates shifted by a whole number of weeks within about a year either way (so the copies'
dates overlap the conversation's own and date words do not tell them apart). Every copy of a
session is its own thread of the place, written through the real write path (store append,
then the indexer: excerpts, embeddings, the memory index), like the conversation after them.
Then the conversation's questions are asked through the real retriever: recall@k as in
`bench.locomo`, and the query latency (including the question's embedding) over a scope of
N + its own turns.

Copies are deterministic (the copy number picks the names and the shift), so the vector of a
copy's text is computed once and reused when another conversation's place holds the same copy
(`TextVectors`): the same vectors, half the CPU. SQLite always; MongoDB as well when
BENCH_MONGODB_URI names a server (its throw-away database is dropped afterwards).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bot.embeddings.base import Embedder, Vectors
from bot.keys import PersonKey, SessionKey
from bot.memory.episodic.excerpts import message_meta
from bot.memory.episodic.indexer import Indexer
from bot.stores.memory_index import MemoryIndex
from bot.stores.records import NewMessage

# First names for renamed speakers; none is a LoCoMo dev speaker (checked at run time too).
NAMES = """Abel Ada Adrian Agnes Alba Alma Amos Anika Ansel Ariel Arlo Astrid Beatrix Benno Bodhi
Calla Cyrus Dagny Dario Delia Dorian Edda Elio Elke Emrys Enzo Esme Ezra Fenna Florin Gaspard
Greta Hallie Hugo Ilse Imre Ines Ivo Jorun Juno Kasimir Kaja Lev Linnea Lorcan Magda Malo
Marit Nils Noor Odile Orla Otto Pilar Quill Rafe Runa Saoirse Silas Soren Tamsin Teodor Ulla
Veit Wren Xavi Yara Yusuf Zora Zeno""".split()
MAX_SHIFT_WEEKS = 52
MAX_DISTRACTORS = 1_000_000
SEED = 25


@dataclass
class SourceSession:
    """One session of another conversation: its date, speakers and turns (speaker, text)."""

    conversation: str
    number: int
    when: datetime
    speakers: tuple[str, ...]
    turns: list[tuple[str, str]]


def source_sessions(sample: dict[str, Any], parse_date: Any, turn_text: Any) -> list[SourceSession]:
    conv = sample["conversation"]
    numbers = sorted(
        int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k) and conv[k]
    )
    out = []
    for n in numbers:
        turns = [(str(t["speaker"]), turn_text(t)) for t in conv[f"session_{n}"]]
        turns = [(s, text) for s, text in turns if text]
        speakers = tuple(dict.fromkeys(s for s, _ in turns))
        when = parse_date(str(conv.get(f"session_{n}_date_time", "")))
        out.append(SourceSession(str(sample.get("sample_id")), n, when, speakers, turns))
    return out


def renamed(copy: int, speakers: Sequence[str], taken: set[str]) -> dict[str, str]:
    """The names copy `copy` gives these speakers: from NAMES, never one of `taken`."""
    pool = [n for n in NAMES if n not in taken]
    rng = random.Random(f"{SEED}:{copy}")
    chosen = rng.sample(pool, len(speakers))
    return dict(zip(speakers, chosen, strict=True))


def shift(copy: int) -> timedelta:
    """Copy 0 keeps its dates; the others move by whole weeks (weekdays stay true)."""
    if copy == 0:
        return timedelta(0)
    rng = random.Random(f"{SEED}:shift:{copy}")
    return timedelta(weeks=rng.randint(-MAX_SHIFT_WEEKS, MAX_SHIFT_WEEKS))


def rename_text(text: str, names: dict[str, str]) -> str:
    for old, new in names.items():
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    return text


def distractor_threads(
    others: Sequence[SourceSession], n: int, taken: set[str]
) -> Iterator[tuple[str, datetime, list[tuple[str, str]]]]:
    """(thread id, date, turns) of copies of `others` until `n` turns: copy 0 of every session,
    then copy 1, ... (the last session cut to fit)."""
    left, copy = n, 0
    while left > 0 and any(s.turns for s in others):
        for session in others:
            if left <= 0:
                return
            names = renamed(copy, session.speakers, taken)
            turns = [(names[s], rename_text(t, names)) for s, t in session.turns[:left]]
            left -= len(turns)
            thread = f"d{copy}-{session.conversation}-s{session.number}"
            yield thread, session.when + shift(copy), turns
        copy += 1


class TextVectors:
    """The embedder with each text's vector kept (copies repeat across places). Only for
    embedders whose vector of a text does not depend on its batch (both local variants)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name = inner, inner.name
        self._seen: dict[str, Vectors] = {}

    async def embed(self, texts: Sequence[str]) -> Vectors:
        missing = list(dict.fromkeys(t for t in texts if t not in self._seen))
        if missing:
            for text, vector in zip(missing, await self.inner.embed(missing), strict=True):
                self._seen[text] = vector
        return np.stack([self._seen[t] for t in texts]) if texts else await self.inner.embed([])

    def forget(self) -> None:
        self._seen.clear()

    async def close(self) -> None:
        await self.inner.close()


async def fill(
    store: Any,
    indexer: Indexer,
    platform: str,
    team: str,
    channel: str,
    threads: Iterator[tuple[str, datetime, list[tuple[str, str]]]],
) -> int:
    """Write every distractor thread through the real write path; returns turns written."""
    written = 0
    for thread, when, turns in threads:
        session = SessionKey(platform, team, channel, thread)
        batch = [
            NewMessage(
                role="user",
                content=text,
                speaker=PersonKey(platform, team, re.sub(r"\W", "_", speaker)).id,
                turn_id=f"{thread}:{i}",
                name=speaker,
                meta=message_meta(sent_at=when + timedelta(seconds=30 * i), private_place=False),
            )
            for i, (speaker, text) in enumerate(turns)
        ]
        await store.append(session, batch)
        await indexer.index_session(session)
        written += len(batch)
    return written


@contextlib.asynccontextmanager
async def backend(kind: str, root: Path) -> AsyncIterator[tuple[Any, MemoryIndex]]:
    """(store, memory index): SQLite files under `root`, or a throw-away MongoDB database."""
    if kind == "sqlite":
        from bot.stores.index_sqlite import SqliteMemoryIndex
        from bot.stores.sqlite import SqliteStore

        store = await SqliteStore.open(root / "bot.db")
        index = await SqliteMemoryIndex.open(root / "memory.db")
        try:
            yield store, index
        finally:
            await index.close()
            await store.close()
        return
    from bot.stores.index_mongo import MongoMemoryIndex
    from bot.stores.mongo import MongoStore

    db_name = f"bench_locomo_{uuid.uuid4().hex[:8]}"
    mongo = await MongoStore.open(os.environ["BENCH_MONGODB_URI"], db_name)
    index = await MongoMemoryIndex.open(mongo.client, db_name)
    try:
        yield mongo, index
    finally:
        with contextlib.suppress(Exception):
            await mongo.client.drop_database(db_name)
        await mongo.close()


def backends() -> list[str]:
    return ["sqlite", "mongodb"] if os.environ.get("BENCH_MONGODB_URI") else ["sqlite"]


async def run_distractors(
    data: list[dict[str, Any]],
    sizes: Sequence[int],
    ks: Sequence[int],
    embedder: Embedder | None,
    replay_into: Any,
    parse_date: Any,
    turn_text: Any,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per (backend, N): recall@k over every conversation's questions, query latency,
    and the ingest time of the distractors. `replay_into(sample, store, index, indexer)`
    writes a conversation and returns (retriever, scope, to_dia, now, questions, turns); its
    retriever embeds questions with `embedder` itself (their real cost, no cache). Each row
    goes to `progress` as soon as it is measured (a 100,000 run takes a while)."""
    vectors = TextVectors(embedder) if embedder is not None else None
    sessions = {i: source_sessions(s, parse_date, turn_text) for i, s in enumerate(data)}
    taken = {sp for ss in sessions.values() for s in ss for sp in s.speakers}
    rows = []
    for kind in backends():
        for n in sizes:
            recall: list[dict[int, float]] = []
            latencies: list[float] = []
            ingest_s, scope_sizes = 0.0, []
            for i, sample in enumerate(data):
                others = [s for j, ss in sessions.items() if j != i for s in ss]
                sample_id = re.sub(r"[^A-Za-z0-9_-]", "_", str(sample.get("sample_id", i)))
                with tempfile.TemporaryDirectory(prefix="locomo-d-") as tmp:
                    async with backend(kind, Path(tmp)) as (store, index):
                        indexer = Indexer(store, index, vectors)
                        started = time.perf_counter()
                        written = await fill(
                            store,
                            indexer,
                            "locomo",
                            sample_id,
                            "conversation",
                            distractor_threads(others, n, taken),
                        )
                        ingest_s += time.perf_counter() - started
                        retriever, scope, to_dia, now, questions, turns = await replay_into(
                            sample, store, index, indexer
                        )
                        scope_sizes.append(written + turns)
                        await retriever.search(scope, "warm up", now=now, limit=1)
                        for q in questions:
                            t0 = time.perf_counter()
                            found = await retriever.search(scope, q.text, now=now, limit=max(ks))
                            latencies.append((time.perf_counter() - t0) * 1000)
                            ranked: list[str] = []
                            for r in found:
                                for src in r.entry.source_ids:
                                    dia = to_dia.get(src)
                                    if dia is not None and dia not in ranked:
                                        ranked.append(dia)
                            recall.append(
                                {k: len(q.evidence & set(ranked[:k])) / len(q.evidence) for k in ks}
                            )
                        await indexer.close()
            latencies.sort()
            rows.append(
                {
                    "backend": kind,
                    "distractors": n,
                    "entries_per_place": round(statistics.fmean(scope_sizes)),
                    "recall_at": {
                        str(k): round(statistics.fmean(r[k] for r in recall), 4) for k in ks
                    },
                    "query_ms": {
                        "p50": round(latencies[len(latencies) // 2], 2),
                        "p95": round(
                            latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))], 2
                        ),
                    },
                    "ingest_s": round(ingest_s, 1),
                }
            )
            if progress is not None:
                progress(rows[-1])
    return rows
