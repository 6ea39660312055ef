"""The relevance gate refuses matches on words that carry no information (issue 25, "Recall
pulls in noise"): in a load test over a public channel, a message sharing only "load test
message ... from" with other threads' messages had them recalled. Real SQLite store and index,
the real indexer; embeddings from the local model when installed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.embeddings import local
from bot.embeddings.base import Embedder
from bot.keys import PersonKey, SessionKey
from bot.memory.episodic.excerpts import message_meta
from bot.memory.episodic.indexer import Indexer
from bot.memory.episodic.retrieval import Retriever
from bot.stores.index_sqlite import SqliteMemoryIndex
from bot.stores.memory_index import MemoryScope, place_id
from bot.stores.records import NewMessage
from bot.stores.sqlite import SqliteStore

TEAM, CHANNEL = "T1", "C1"
SCOPE = MemoryScope(
    SessionKey("slack", TEAM, CHANNEL).team_key, (place_id("slack", TEAM, CHANNEL),)
)
START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
NOW = START + timedelta(hours=2)
PEOPLE = [f"U{i:02d}" for i in range(20)]
# What each person's thread is about: no two share a content word.
TOPICS = [
    "the budget review moved to Tuesday",
    "is the coffee machine fixed",
    "please water the office plants",
    "the parking garage closes early",
    "printer toner arrives soon",
    "our quarterly offsite venue booked",
    "the wifi password rotated",
    "fire drill happens after lunch",
    "new laptops shipped yesterday",
    "holiday party playlist requests",
    "kitchen fridge cleanup rota",
    "visitor badges expire nightly",
    "standup shifts half an hour later",
    "elevator maintenance scheduled",
    "recycling bins relocated downstairs",
    "conference room projector flickers",
    "bike racks installed outside",
    "payroll questions go to Ingrid",
    "mentoring signups close Friday",
    "the Ferreira supplier invoice number is 48213",
]


def load_message(n: int, person: str, topic: str) -> str:
    return f"Load test message {n} from {person}: {topic}"


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


@pytest.fixture
async def retriever(tmp_path: Path, embedder: Embedder | None) -> AsyncIterator[Retriever]:
    """A public channel where each of 20 people started a thread of two load-test messages."""
    store = await SqliteStore.open(tmp_path / "bot.db")
    index = await SqliteMemoryIndex.open(tmp_path / "memory.db")
    indexer = Indexer(store, index, embedder)
    n = 0
    for i, (user, topic) in enumerate(zip(PEOPLE, TOPICS, strict=True)):
        thread = SessionKey("slack", TEAM, CHANNEL, f"1764.{i}")
        person = PersonKey("slack", TEAM, user)
        batch = []
        for part in (topic, f"follow-up on {topic}"):
            n += 1
            batch.append(
                NewMessage(
                    role="user",
                    content=load_message(n, user, part),
                    speaker=person.id,
                    turn_id=f"t{n}",
                    name=user,
                    meta=message_meta(sent_at=START + timedelta(minutes=n), private_place=False),
                )
            )
        await store.append(thread, batch)
        await indexer.index_session(thread)
    try:
        yield Retriever(index, embedder)
    finally:
        await indexer.close()
        await index.close()
        await store.close()


async def test_sharing_only_uninformative_words_recalls_nothing(retriever: Retriever) -> None:
    # Shares "load", "test", "message" (and "from") with every other thread's messages.
    for n, question in enumerate(
        [
            "what time does the gym open on weekends",
            "can someone approve my pull request",
            "where do we order team pizza",
        ],
        start=100,
    ):
        text = load_message(n, "U99", question)
        assert await retriever.search(SCOPE, text, now=NOW) == [], text


async def test_sharing_a_rare_name_or_number_recalls_it(retriever: Retriever) -> None:
    for question in ("who is Ferreira again", "which invoice was 48213"):
        hits = await retriever.search(SCOPE, load_message(200, "U99", question), now=NOW)
        assert hits, question
        assert "48213" in hits[0].entry.text, question


async def test_a_small_place_whose_every_message_shares_the_word_still_recalls(
    tmp_path: Path, embedder: Embedder | None
) -> None:
    """In three messages every word is in most of them: "common" (the gate's uninformative
    words) and "usual closeness" only mean something in a place of ten entries or more."""
    store = await SqliteStore.open(tmp_path / "bot.db")
    index = await SqliteMemoryIndex.open(tmp_path / "memory.db")
    indexer = Indexer(store, index, embedder)
    thread = SessionKey("slack", TEAM, CHANNEL)
    said = [
        "the Lisbon order ships on Friday",
        "the Lisbon order is late again",
        "the Lisbon order needs a customs form",
    ]
    try:
        await store.append(
            thread,
            [
                NewMessage(
                    role="user",
                    content=text,
                    speaker=PersonKey("slack", TEAM, "U01").id,
                    turn_id=f"t{n}",
                    name="U01",
                    meta=message_meta(sent_at=START + timedelta(minutes=n), private_place=False),
                )
                for n, text in enumerate(said)
            ],
        )
        await indexer.index_session(thread)
        retriever = Retriever(index, embedder)
        hits = await retriever.search(SCOPE, "when does the Lisbon order ship?", now=NOW)
        assert len(hits) == 3 and "Friday" in hits[0].entry.text
        # Its shared words are in every entry, the words it adds in none: still recalled.
        assert await retriever.search(SCOPE, "how did the Lisbon order go overall", now=NOW)
    finally:
        await indexer.close()
        await index.close()
        await store.close()
