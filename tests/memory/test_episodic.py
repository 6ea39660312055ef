"""Episodic memory: excerpts, durable indexing, hybrid retrieval with its threshold, CJK terms,
relative dates. Real SQLite store and index; embeddings from the local model when installed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.embeddings import local
from bot.embeddings.base import Embedder
from bot.keys import PersonKey, SessionKey
from bot.memory.episodic.excerpts import message_meta
from bot.memory.episodic.indexer import Indexer
from bot.memory.episodic.retrieval import Retriever
from bot.memory.episodic.text import relative_date_words, terms
from bot.stores.index_sqlite import SqliteMemoryIndex
from bot.stores.memory_index import MemoryScope, place_id
from bot.stores.records import NewMessage
from bot.stores.sqlite import SqliteStore

CHANNEL = SessionKey("slack", "T1", "C1", "1700.1")
ALICE, BOB = PersonKey("slack", "T1", "UA"), PersonKey("slack", "T1", "UB")
JAN = datetime(2026, 1, 14, 10, 0, tzinfo=UTC)
MARCH = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SCOPE = MemoryScope(CHANNEL.team_key, (place_id("slack", "T1", "C1"),))


@dataclass
class Parts:
    store: SqliteStore
    index: SqliteMemoryIndex


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[Parts]:
    store = await SqliteStore.open(tmp_path / "bot.db")
    index = await SqliteMemoryIndex.open(tmp_path / "memory.db")
    try:
        yield Parts(store, index)
    finally:
        await index.close()
        await store.close()


def said(text: str, who: PersonKey, turn: str, when: datetime = JAN) -> NewMessage:
    return NewMessage(
        role="user",
        content=text,
        speaker=who.id,
        turn_id=turn,
        name=who.user,
        meta=message_meta(sent_at=when, private_place=False),
    )


def embedders() -> list[str]:
    return ["none", "local"] if local.available() else ["none"]


@pytest.fixture(params=embedders())
async def embedder(request: pytest.FixtureRequest) -> AsyncIterator[Embedder | None]:
    if request.param == "none":
        yield None
        return
    made = local.LocalEmbedder()
    yield made
    await made.close()


async def test_recall_with_threshold(parts: Parts, embedder: Embedder | None) -> None:
    await parts.store.append(
        CHANNEL,
        [
            said("The supplier for the Lisbon order is Ferreira & Filhos", ALICE, "t1"),
            said("Lunch at noon tomorrow?", BOB, "t2"),
            said("The printer on floor 3 is broken again", BOB, "t3"),
        ],
    )
    indexer = Indexer(parts.store, parts.index, embedder)
    assert await indexer.index_session(CHANNEL) == 3
    retriever = Retriever(parts.index, embedder)

    hits = await retriever.search(SCOPE, "Who supplies the Lisbon order?", now=MARCH)
    assert hits and "Ferreira & Filhos" in hits[0].entry.text
    assert "January 2026" in hits[0].entry.text  # the date is part of what is indexed
    assert hits[0].entry.people == [ALICE.id]
    assert await retriever.search(SCOPE, "What is a good name for a cat?", now=MARCH) == []
    # Already in the context: not retrieved again.
    src = set(hits[0].entry.source_ids)
    again = await retriever.search(SCOPE, "Lisbon order supplier", now=MARCH, exclude_sources=src)
    assert all(h.entry.id != hits[0].entry.id for h in again)


async def test_a_crash_between_message_write_and_indexing_loses_nothing(parts: Parts) -> None:
    first = Indexer(parts.store, parts.index, None)
    await parts.store.append(CHANNEL, [said("We ship the Lisbon order on Friday", ALICE, "t1")])
    first.enqueue(CHANNEL)
    assert await first.idle(timeout=10)
    # Written, then the process died before the indexer ran:
    await parts.store.append(CHANNEL, [said("Ferreira & Filhos confirmed the pallets", BOB, "t2")])
    await first.close()

    restarted = Indexer(parts.store, parts.index, None)
    assert await restarted.recover() == 1
    assert await restarted.idle(timeout=10)
    assert await restarted.recover() == 0  # nothing left behind
    entries = (await parts.index.changes(SCOPE)).entries
    assert sorted(e.text.split(": ", 1)[1] for e in entries) == [
        "Ferreira & Filhos confirmed the pallets",
        "We ship the Lisbon order on Friday",
    ]
    # Indexing the same messages again writes nothing twice.
    await parts.index.set_checkpoint(CHANNEL.id, 0)
    assert await restarted.index_session(CHANNEL) == 0
    assert len((await parts.index.changes(SCOPE)).entries) == 2
    await restarted.close()


async def test_chinese_and_mixed_questions(parts: Parts) -> None:
    await parts.store.append(
        CHANNEL,
        [
            said("里斯本订单的供应商是费雷拉父子公司", ALICE, "t1"),
            said("The Lisbon order ships on Friday", BOB, "t2"),
            said("明天中午一起吃饭吗", BOB, "t3"),
        ],
    )
    await Indexer(parts.store, parts.index, None).index_session(CHANNEL)
    retriever = Retriever(parts.index, None)
    zh = await retriever.search(SCOPE, "里斯本订单的供应商是谁？", now=MARCH)
    assert zh and "费雷拉" in zh[0].entry.text
    mixed = await retriever.search(SCOPE, "Lisbon order 供应商 里斯本订单", now=MARCH, limit=2)
    assert {h.entry.source_ids[0].rsplit("#", 1)[1] for h in mixed} == {"1", "2"}


def test_terms_stem_drop_stop_words_and_cut_cjk() -> None:
    assert terms("The suppliers are shipping orders") == ["supplier", "ship", "order"]
    assert terms("供应商") == ["供", "应", "商", "供应", "应商"]
    assert terms("Caroline's café in May") == ["carolin", "café", "may"]


def test_relative_dates_become_date_words() -> None:
    assert relative_date_words("what did we say last week?", MARCH) == "february 2026"
    assert relative_date_words("and yesterday", MARCH) == "march 2026"
    assert relative_date_words("two months ago", MARCH) == "january 2026"
    assert relative_date_words("last year", MARCH) == "2025"
    assert relative_date_words("the weekly report", MARCH) == ""
