"""Leases and retention: the contract both stores keep (SQLite, mongoeco, real MongoDB)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from datetime import timedelta

from bot.keys import PersonKey, SessionKey
from bot.stores.protocols import Store
from bot.stores.records import NewMessage, utcnow

CHANNEL = SessionKey("slack", "T1", "C1")
ALICE = PersonKey("slack", "T1", "U1")


async def test_a_lease_has_one_holder_until_released_or_expired(store: Store) -> None:
    first = await store.take_lease("job", "far:1:a", 30)
    assert first.ours and first.holder == "far:1:a"
    second = await store.take_lease("job", "far:2:b", 30)
    assert not second.ours and second.holder == "far:1:a"
    assert (await store.take_lease("job", "far:1:a", 30)).ours  # ours again: renewed
    assert await store.renew_lease("job", "far:1:a", 30)
    assert not await store.renew_lease("job", "far:2:b", 30)
    await store.release_lease("job", "far:2:b")  # not theirs: nothing happens
    assert not (await store.take_lease("job", "far:2:b", 30)).ours
    await store.release_lease("job", "far:1:a")
    assert (await store.take_lease("job", "far:2:b", 30)).ours
    assert (await store.take_lease("other", "far:1:a", 30)).ours  # leases are by name


async def test_an_expired_lease_is_taken_over(store: Store) -> None:
    assert (await store.take_lease("job", "far:1:a", 0.05)).ours
    await asyncio.sleep(0.1)
    taken = await store.take_lease("job", "far:2:b", 30)
    assert taken.ours
    assert not await store.renew_lease("job", "far:1:a", 30)  # the old holder learns it


async def test_a_dead_holder_on_this_host_is_taken_over_at_once(store: Store) -> None:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await proc.wait()  # a process that existed and is gone
    dead = f"{socket.gethostname()}:{proc.pid}:x"
    assert (await store.take_lease("job", dead, 300)).ours
    assert (await store.take_lease("job", f"{socket.gethostname()}:{os.getpid()}:y", 30)).ours


async def test_concurrent_takers_get_one_lease(store: Store) -> None:
    results = await asyncio.gather(*(store.take_lease("job", f"far:{i}:z", 30) for i in range(6)))
    assert sum(r.ours for r in results) == 1
    holder = next(r.holder for r in results if r.ours)
    assert all(r.holder == holder for r in results)


async def test_retention_prunes_only_up_to_the_given_seq(store: Store) -> None:
    msgs = [
        NewMessage(role="user", content=f"m{i}", speaker=ALICE.id, turn_id=f"t{i}")
        for i in range(5)
    ]
    await store.append(CHANNEL, msgs)
    assert await store.prune_messages(CHANNEL, upto_seq=3, before=utcnow() - timedelta(days=1)) == 0
    assert await store.prune_messages(CHANNEL, upto_seq=3, before=utcnow()) == 3
    assert [m.content for m in await store.recent(CHANNEL, limit=10)] == ["m3", "m4"]
    assert await store.prune_tool_calls(utcnow()) == 0
