"""The durable inbox: one contract, both backends (Redis Streams on a real Redis, a table in
the real SQLite store)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.stores.inbox import Inbox, InboxItem
from bot.stores.inbox_redis import RedisInbox
from bot.stores.inbox_sqlite import SqliteInbox
from bot.stores.sqlite import SqliteStore

KIND = "slack.message"
CLAIM = 0.4  # seconds of idleness after which an entry is taken over


def item(session: str, n: int, *dedup: str) -> InboxItem:
    return InboxItem(kind=KIND, session=session, body={"n": n}, dedup=dedup)


@pytest.fixture(params=["sqlite", "redis"])
async def inbox(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Inbox]:
    if request.param == "sqlite":
        store = await SqliteStore.open(tmp_path / "bot.db")
        box: Any = await SqliteInbox.open(store._db, claim_after=CLAIM)
        try:
            yield box
        finally:
            await store.close()
    else:
        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        box = RedisInbox.from_url(url, prefix=prefix, claim_after=CLAIM)
        try:
            yield box
        finally:
            await box.close()


async def take_all(box: Inbox, consumer: str, want: int, wait: float = 3.0) -> list[Any]:
    got: list[Any] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while len(got) < want and loop.time() < deadline:
        got += await box.take(KIND, consumer, count=want - len(got), wait=0.2)
    return got


async def test_put_then_take_returns_the_item_once(inbox: Inbox) -> None:
    assert await inbox.put(item("s1", 1)) is not None
    (entry,) = await take_all(inbox, "host:1:a", 1)
    assert entry.item.body == {"n": 1} and entry.item.session == "s1" and entry.tries == 1
    assert await inbox.take(KIND, "host:2:b", count=5, wait=0.1) == []  # held by a live one
    await inbox.done(entry)
    assert (await inbox.stats(KIND)).depth == 0


async def test_put_and_take_leases_a_sessions_only_entry_to_the_putter(inbox: Inbox) -> None:
    """Where the backend takes at put (SQLite), the entry is held as `take` would hold it: not
    handed to anyone else, not to the putter again, done once; an entry behind an open one of
    its session, and a duplicate, are not taken. Where it does not (Redis), `take` hands the
    entry over as after `put`."""
    put_id, taken = await inbox.put_and_take(item("s1", 1, "ev:1"), "host:1:a")
    assert put_id is not None
    if taken is None:  # the backend never takes at put
        (taken,) = await take_all(inbox, "host:1:a", 1)
    assert taken.item.body == {"n": 1} and taken.item.session == "s1" and taken.tries == 1
    assert taken.id == put_id
    assert await inbox.take(KIND, "host:2:b", count=5, wait=0.1) == []  # held by a live one
    assert await inbox.take(KIND, "host:1:a", count=5, wait=0.1) == []  # and ours already
    later_id, later = await inbox.put_and_take(item("s1", 2), "host:1:a")
    assert later_id is not None and later is None  # s1's first entry is still open
    assert await inbox.put_and_take(item("s1", 3, "ev:1"), "host:1:a") == (None, None)
    await inbox.done(taken)
    (second,) = await take_all(inbox, "host:2:b", 1)
    assert second.item.body == {"n": 2} and second.id == later_id
    await inbox.done(second)
    assert (await inbox.stats(KIND)).depth == 0


async def test_an_entry_taken_at_put_is_taken_over_when_its_holder_stops_renewing(
    inbox: Inbox,
) -> None:
    _, taken = await inbox.put_and_take(item("s9", 1), "host:1:a")
    if taken is None:
        (taken,) = await take_all(inbox, "host:1:a", 1)
    await asyncio.sleep(CLAIM + 0.2)  # never renewed: the lease runs out
    (over,) = await take_all(inbox, "host:2:b", 1)
    assert over.id == taken.id and over.tries == 2
    await inbox.done(over)


async def test_a_dedup_key_refuses_a_second_put(inbox: Inbox) -> None:
    assert await inbox.put(item("s1", 1, "ev:1", "msg:1")) is not None
    assert await inbox.put(item("s1", 2, "ev:2", "msg:1")) is None  # same message, new event id
    assert await inbox.put(item("s1", 3, "ev:1")) is None
    (entry,) = await take_all(inbox, "host:1:a", 1)
    await inbox.done(entry)
    assert await inbox.put(item("s1", 4, "ev:1")) is None  # still seen after it was done
    assert await inbox.put(item("s1", 5, "ev:9")) is not None


async def test_entries_of_a_session_are_ready_in_order_across_consumers(inbox: Inbox) -> None:
    for n in range(3):
        await inbox.put(item("s1", n))
    await inbox.put(item("s2", 9))
    held: dict[str, Any] = {}

    async def take(consumer: str) -> list[int]:
        for e in await inbox.take(KIND, consumer, count=4, wait=0.1):
            held[e.id] = e  # a take-over returns the same entry
        return sorted([e.item.body["n"] for e in held.values() if await inbox.ready(e)])

    # Whoever holds them (Redis hands out all four, SQLite only each session's oldest), only
    # the oldest of s1 and s2's only one may run.
    await take("host:1:a")
    assert await take("host:2:b") == [0, 9]
    for expected in (1, 2):
        (prev,) = [k for k, e in held.items() if e.item.body["n"] == expected - 1]
        await inbox.done(held.pop(prev))
        assert await take("host:3:c") == [expected, 9]


async def test_an_entry_not_renewed_is_taken_over_with_its_notes(inbox: Inbox) -> None:
    await inbox.put(item("s1", 1))
    (entry,) = await take_all(inbox, "far:1:a", 1)
    await inbox.note(entry, {"reply": ["123.4"]})
    await asyncio.sleep(CLAIM + 0.3)
    (again,) = await take_all(inbox, "far:2:b", 1)
    assert again.id == entry.id and again.tries == 2
    assert again.notes == {"reply": ["123.4"]}
    assert "far:1:a" not in str(await inbox.renew(KIND, "far:2:b", [again]))
    assert await inbox.renew(KIND, "far:1:a", [entry]) == [entry.id]  # the old holder learns it


async def test_renewing_keeps_a_long_turn_from_being_taken_over(inbox: Inbox) -> None:
    await inbox.put(item("s1", 1))
    (entry,) = await take_all(inbox, "far:1:a", 1)
    for _ in range(4):
        await asyncio.sleep(CLAIM / 2)
        assert await inbox.renew(KIND, "far:1:a", [entry]) == []
        assert await inbox.take(KIND, "far:2:b", count=1, wait=0.0) == []


async def test_handed_back_entries_are_taken_at_once(inbox: Inbox) -> None:
    await inbox.put(item("s1", 1))
    (entry,) = await take_all(inbox, "far:1:a", 1)
    await inbox.hand_back(KIND, [entry])
    (again,) = await take_all(inbox, "far:2:b", 1, wait=CLAIM / 2 + 0.5)
    assert again.id == entry.id


async def test_stats_count_open_entries_and_their_age(inbox: Inbox) -> None:
    assert (await inbox.stats(KIND)).depth == 0
    await inbox.put(item("s1", 1))
    await inbox.put(item("s2", 2))
    await asyncio.sleep(0.2)
    stats = await inbox.stats(KIND)
    assert stats.depth == 2 and stats.oldest_age >= 0.1


async def test_an_oversized_body_is_refused(inbox: Inbox) -> None:
    with pytest.raises(ValueError):
        await inbox.put(InboxItem(kind=KIND, session="s", body={"x": "a" * 300_000}))
    assert (await inbox.stats(KIND)).depth == 0


async def test_kinds_are_kept_apart(inbox: Inbox) -> None:
    await inbox.put(InboxItem(kind="discord.message", session="d1", body={}))
    assert await inbox.take(KIND, "far:1:a", count=5, wait=0.1) == []
    assert len(await inbox.take("discord.message", "far:1:a", count=5, wait=1.0)) == 1


async def test_sqlite_entries_of_a_dead_process_are_taken_over_at_once(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "bot.db")
    try:
        box = await SqliteInbox.open(store._db, claim_after=300)
        await box.put(item("s1", 1))
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        await proc.wait()
        dead = f"{socket.gethostname()}:{proc.pid}:x"
        (entry,) = await box.take(KIND, dead, count=1, wait=0.5)
        me = f"{socket.gethostname()}:{os.getpid()}:y"
        (again,) = await box.take(KIND, me, count=1, wait=0.5)
        assert again.id == entry.id and again.tries == 2
    finally:
        await store.close()


async def test_redis_keeps_no_copy_of_a_handled_items_words(
    redis_url: str, redis_prefix: str
) -> None:
    """XDEL only marks a stream entry deleted (its bytes stay in memory and in snapshots): the
    body lives in a key of its own, deleted when the entry is done. Oracle: DUMP of every key
    under the prefix, the bytes Redis would write to a snapshot."""
    import redis.asyncio as aioredis

    box = RedisInbox.from_url(redis_url, prefix=redis_prefix, claim_after=CLAIM)
    raw = aioredis.Redis.from_url(redis_url)
    try:
        phrase = "my passport number is X1234567"
        await box.put(InboxItem(kind=KIND, session="s1", body={"text": phrase}))
        await box.put(InboxItem(kind=KIND, session="s2", body={"text": "keep the stream alive"}))
        dumps = [await raw.dump(k) or b"" for k in await raw.keys(redis_prefix + "*")]
        assert any(phrase.encode() in d for d in dumps)  # while waiting it is there (the oracle)
        entries = await take_all(box, "host:1:a", 2)
        (mine,) = [e for e in entries if e.item.session == "s1"]
        assert mine.item.body == {"text": phrase}
        await box.done(mine)
        dumps = [await raw.dump(k) or b"" for k in await raw.keys(redis_prefix + "*")]
        assert not any(phrase.encode() in d for d in dumps)
    finally:
        await box.close()
        await raw.aclose()
