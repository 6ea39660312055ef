"""The second retrieval hop must not bring the noise back (issue 25 follow-up): the question is
asked again with the rarest words of its best hits, and an entry reached only through those
words, sharing nothing informative with the question, is the unrelated message issue 25 names
("Recall pulls in noise"). Real SQLite store and index, the real indexer; embeddings from the
local model when installed."""

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
# (who, what): Bob's lunch question follows Alice's vault code, so its context quotes it and
# it is one of the question's best hits; its rarest words ("Bob", "cook", "lunch") seed the hop.
SAID = [
    ("UB", "Bob", "Bob likes tomato soup"),
    ("UA", "Alice", "the vault code is zebra-4411"),
    ("UB", "Bob", "Bob wonders what we should cook for lunch"),
]


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
    store = await SqliteStore.open(tmp_path / "bot.db")
    index = await SqliteMemoryIndex.open(tmp_path / "memory.db")
    indexer = Indexer(store, index, embedder)
    thread = SessionKey("slack", TEAM, CHANNEL, "100.1")
    await store.append(
        thread,
        [
            NewMessage(
                role="user",
                content=text,
                speaker=PersonKey("slack", TEAM, user).id,
                turn_id=f"t{n}",
                name=name,
                meta=message_meta(sent_at=START + timedelta(minutes=n), private_place=False),
            )
            for n, (user, name, text) in enumerate(SAID)
        ],
    )
    await indexer.index_session(thread)
    try:
        yield Retriever(index, embedder)
    finally:
        await indexer.close()
        await index.close()
        await store.close()


async def test_a_hop_seed_does_not_pull_in_an_unrelated_message(retriever: Retriever) -> None:
    hits = await retriever.search(SCOPE, "what is the vault code again", now=NOW)
    texts = [h.entry.text for h in hits]
    # The answer, and Bob's next message (its context quotes the answer): the first hop's own.
    assert any("zebra-4411" in t for t in texts), texts
    assert any("lunch" in t for t in texts), texts
    # Reached only through "Bob" (a hop seed): shares nothing with the question.
    assert not any("tomato soup" in t for t in texts), texts


async def test_the_hop_still_reorders_what_the_question_matches(retriever: Retriever) -> None:
    # "Bob" is in the question: his soup message matches it itself, so it is recalled.
    hits = await retriever.search(SCOPE, "what does Bob like for lunch", now=NOW)
    assert any("tomato soup" in h.entry.text for h in hits), [h.entry.text for h in hits]
