"""The hot tail of a session (bot.memory.session): read from the cache only while it is current
with the store's head, re-read from the store otherwise. Real SQLite store, in-process cache."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.keys import PersonKey, SessionKey
from bot.memory.session import CompressionPolicy, SessionMemory, hot_key
from bot.stores.memory_cache import MemoryCache
from bot.stores.records import NewMessage
from bot.stores.sqlite import SqliteStore
from bot.tokens import TokenCounter

SESSION = SessionKey("slack", "T1", "C1")
ALICE, BOB = PersonKey("slack", "T1", "UA"), PersonKey("slack", "T1", "UB")


def said(text: str, who: PersonKey = ALICE, turn: str = "t1") -> NewMessage:
    return NewMessage(role="user", content=text, speaker=who.id, turn_id=turn)


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[tuple[SessionMemory, SqliteStore, MemoryCache]]:
    store = await SqliteStore.open(tmp_path / "bot.db")
    cache = MemoryCache()
    memory = SessionMemory(
        store, cache, TokenCounter("gpt-4o-mini"), CompressionPolicy.for_budget(8000, 1000)
    )
    yield memory, store, cache
    await cache.close()
    await store.close()


async def test_a_current_cache_is_used_and_a_stale_one_is_not(
    parts: tuple[SessionMemory, SqliteStore, MemoryCache],
) -> None:
    memory, store, cache = parts
    hot = await memory.load(SESSION)
    assert hot.tail == [] and hot.state.session == SESSION.id
    await memory.append(SESSION, hot, [said("one"), said("two")])

    # Mark the cached copy (same seqs): a load that returns the mark read the cache.
    cached = await cache.get_json(hot_key(SESSION.id))
    assert [m["seq"] for m in cached] == [1, 2]
    cached[0]["content"] = "from the cache"
    await cache.set_json(hot_key(SESSION.id), cached, ttl=60)
    assert [m.content for m in (await memory.load(SESSION)).tail] == ["from the cache", "two"]

    # Another process wrote a message: the cache is behind the store's head, so not used.
    await store.append(SESSION, [said("three", BOB, "t2")])
    assert [m.content for m in (await memory.load(SESSION)).tail] == ["one", "two", "three"]


async def test_after_an_erasure_of_the_newest_message_the_store_is_read(
    parts: tuple[SessionMemory, SqliteStore, MemoryCache],
) -> None:
    """Erasure drops the hot copies of the sessions it touched (bot.memory.erasure); the head
    (the seq counter) stays past the store's last message, so the tail is read from the store
    until the next message is written, and is current again from then on."""
    memory, store, cache = parts
    hot = await memory.load(SESSION)
    await memory.append(SESSION, hot, [said("mine"), said("bob's", BOB, "t2")])
    await store.delete_speaker(BOB)
    await memory.forget_hot([SESSION.id])
    for _ in range(2):
        assert [m.content for m in (await memory.load(SESSION)).tail] == ["mine"]
    hot = await memory.load(SESSION)
    await memory.append(SESSION, hot, [said("next", turn="t3")])
    cached = await cache.get_json(hot_key(SESSION.id))
    cached[0]["content"] = "from the cache"
    await cache.set_json(hot_key(SESSION.id), cached, ttl=60)
    assert [(m.seq, m.content) for m in (await memory.load(SESSION)).tail] == [
        (1, "from the cache"),
        (3, "next"),
    ]


async def test_the_cached_copy_is_the_whole_tail_after_every_write(
    parts: tuple[SessionMemory, SqliteStore, MemoryCache],
) -> None:
    """Saves add only the new messages' JSON to what the cache held: the cached copy must still
    equal the store's messages, also across summary folds and reloads."""
    memory, store, cache = parts
    for turn in range(6):
        if turn == 4:  # the hot copy is dropped: the next load reads the store
            await memory.forget_hot([SESSION.id])
        hot = await memory.load(SESSION)
        await memory.append(SESSION, hot, [said(f"q{turn}", turn=f"t{turn}")])
        await memory.append(SESSION, hot, [said(f"a{turn}", BOB, f"t{turn}")])
        if turn == 2:  # a summary folds the first four messages
            state = hot.state
            state.summary, state.summary_upto_seq = "earlier", 4
            assert await store.put_state(SESSION, state)
        upto = 4 if turn >= 3 else 0
        stored = await store.recent(SESSION, limit=100)
        expected = [m.model_dump(mode="json") for m in stored if m.seq > upto]
        assert await cache.get_json(hot_key(SESSION.id)) == expected, turn
    assert [m.content for m in (await memory.load(SESSION)).tail] == [
        m.content for m in await store.recent(SESSION, limit=100) if m.seq > 4
    ]
