"""Embeddings: the endpoint's `/embeddings` (FakeOpenAI), the local model (when the extra is
installed), the BOT_EMBEDDING_MODEL choice, and re-embedding when the model changes (vectors of
two models are never compared)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from bot.embeddings import local
from bot.embeddings.base import EmbeddingError
from bot.embeddings.endpoint import EndpointEmbedder
from bot.embeddings.factory import EmbedderConfigError, open_embedder, resolve_choice
from bot.keys import PersonKey, SessionKey
from bot.memory.episodic.excerpts import message_meta
from bot.memory.episodic.indexer import Indexer
from bot.memory.episodic.retrieval import Retriever
from bot.stores.index_sqlite import SqliteMemoryIndex
from bot.stores.memory_index import MemoryScope, place_id
from bot.stores.records import NewMessage
from bot.stores.sqlite import SqliteStore
from testkit.fakes.openai_server import FakeOpenAI

SESSION = SessionKey("slack", "T1", "C1")
SCOPE = MemoryScope(SESSION.team_key, (place_id("slack", "T1", "C1"),))
ALICE = PersonKey("slack", "T1", "UA")
MARCH = datetime(2026, 3, 2, tzinfo=UTC)


def endpoint(fake: FakeOpenAI, model: str = "text-embedding-3-small") -> EndpointEmbedder:
    return EndpointEmbedder(model, api_key="sk-test", base_url=fake.base_url)


async def test_endpoint_vectors_are_normalised_and_batched(fake_openai: FakeOpenAI) -> None:
    embedder = endpoint(fake_openai)
    try:
        vectors = await embedder.embed(["the Lisbon order", "the Lisbon order ships", "cats", ""])
    finally:
        await embedder.close()
    assert vectors.shape == (4, 64) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:3], axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    assert embedder.name == "endpoint:text-embedding-3-small"
    sent = fake_openai.embedding_requests[-1]
    assert sent["model"] == "text-embedding-3-small" and sent["input"][3] == " "


async def test_endpoint_failure_is_an_embedding_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.embeddings_down = True
    embedder = EndpointEmbedder("m", api_key="sk-test", base_url=fake_openai.base_url, timeout=5.0)
    try:
        with pytest.raises(EmbeddingError):
            await embedder.embed(["hello"])
    finally:
        await embedder.close()


def test_the_setting_picks_the_embedder(fake_openai: FakeOpenAI) -> None:
    assert resolve_choice("none") == "none" and resolve_choice(" LOCAL ") == "local"
    assert resolve_choice("") == ("local" if local.available() else "none")
    assert open_embedder("none", api_key="k", base_url=None) is None
    with pytest.raises(EmbedderConfigError, match="BOT_EMBEDDING_MODEL"):
        open_embedder("text-embedding-3-small", api_key=None, base_url=None)
    made = open_embedder("text-embedding-3-small", api_key="k", base_url=fake_openai.base_url)
    assert isinstance(made, EndpointEmbedder)


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[tuple[SqliteStore, SqliteMemoryIndex]]:
    store = await SqliteStore.open(tmp_path / "bot.db")
    index = await SqliteMemoryIndex.open(tmp_path / "memory.db")
    yield store, index
    await index.close()
    await store.close()


async def test_a_new_model_reembeds_and_never_mixes_vectors(
    parts: tuple[SqliteStore, SqliteMemoryIndex], fake_openai: FakeOpenAI
) -> None:
    store, index = parts
    first, second = endpoint(fake_openai, "model-a"), endpoint(fake_openai, "model-b")
    try:
        await store.append(
            SESSION,
            [
                NewMessage(
                    role="user",
                    content=text,
                    speaker=ALICE.id,
                    turn_id=f"t{i}",
                    meta=message_meta(sent_at=MARCH, private_place=False),
                )
                for i, text in enumerate(["the Lisbon order ships Friday", "lunch at noon"])
            ],
        )
        await Indexer(store, index, first).index_session(SESSION)
        assert {e.embedder for e in (await index.changes(SCOPE)).entries} == {"endpoint:model-a"}

        # Model B's retriever sees no comparable vectors yet: lexical only, no error.
        retriever = Retriever(index, second)
        hits = await retriever.search(SCOPE, "when does the Lisbon order ship?", now=MARCH)
        assert hits and hits[0].cosine is None

        assert await Indexer(store, index, second).reembed() == 2
        entries = (await index.changes(SCOPE)).entries
        assert {e.embedder for e in entries} == {"endpoint:model-b"}
        hits = await retriever.search(SCOPE, "when does the Lisbon order ship?", now=MARCH)
        assert hits[0].cosine is not None and "Lisbon" in hits[0].entry.text
    finally:
        await first.close()
        await second.close()


async def test_an_embedder_outage_loses_nothing(
    parts: tuple[SqliteStore, SqliteMemoryIndex], fake_openai: FakeOpenAI
) -> None:
    store, index = parts
    embedder = endpoint(fake_openai)
    try:
        await store.append(
            SESSION,
            [NewMessage(role="user", content="Ferreira ships", speaker=ALICE.id, turn_id="t")],
        )
        fake_openai.embeddings_down = True
        indexer = Indexer(store, index, embedder)
        assert await indexer.index_session(SESSION) == 1  # written without a vector
        assert (await index.changes(SCOPE)).entries[0].vector is None
        fake_openai.embeddings_down = False
        assert await indexer.reembed() == 1
        assert (await index.changes(SCOPE)).entries[0].vector is not None
    finally:
        await embedder.close()


@pytest.mark.skipif(not local.available(), reason="the `embeddings` extra is not installed")
async def test_local_model_embeds_meaning() -> None:
    embedder = local.LocalEmbedder()
    try:
        vectors = await embedder.embed(
            [
                "The supplier for the Lisbon order is Ferreira & Filhos",
                "Who supplies the Lisbon order?",
                "What is a good name for a cat?",
            ]
        )
    finally:
        await embedder.close()
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert vectors[0] @ vectors[1] > 0.5 > vectors[0] @ vectors[2]


async def test_a_question_is_embedded_only_where_there_are_memories(
    fake_openai: FakeOpenAI, parts: tuple[SqliteStore, SqliteMemoryIndex]
) -> None:
    """A place with nothing indexed (the first message in a channel) costs no embedding of the
    question; once it has entries, the question is embedded and ranks them."""
    store, index = parts
    embedder = endpoint(fake_openai)
    try:
        retriever = Retriever(index, embedder)
        assert await retriever.search(SCOPE, "the Lisbon order", now=MARCH) == []
        assert await retriever.search(SCOPE, "the Lisbon order", now=MARCH) == []
        assert fake_openai.embedding_requests == []
        await store.append(
            SESSION,
            [
                NewMessage(
                    role="user",
                    content="The Lisbon order ships Friday",
                    speaker=ALICE.id,
                    turn_id="t1",
                    meta=message_meta(sent_at=MARCH, private_place=False),
                )
            ],
        )
        await Indexer(store, index, embedder).index_session(SESSION)
        indexed = len(fake_openai.embedding_requests)
        hits = await retriever.search(SCOPE, "When does the Lisbon order ship?", now=MARCH)
        assert hits and hits[0].cosine is not None
        assert fake_openai.embedding_requests[indexed:] != []
        assert fake_openai.embedding_requests[-1]["input"] == ["When does the Lisbon order ship?"]
        # A scope seen with entries: embedded alongside the index round trip from now on.
        await retriever.search(SCOPE, "Lisbon again", now=MARCH)
        assert fake_openai.embedding_requests[-1]["input"] == ["Lisbon again"]
    finally:
        await embedder.close()
