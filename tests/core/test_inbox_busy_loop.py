"""Leases survive a busy event loop (issue 26, found on the way): a worker whose loop is held by
CPU work longer than the claim time still renews the entries it runs, so no other replica takes
one over while its first run goes on (a duplicate on a platform without nonces).

Real parts: two handles on one inbox (SQLite file, or the Redis on 127.0.0.1:6379), as two
processes would have; the other replica runs on an event loop of its own in another thread and
keeps trying to take the entry while this worker's loop is busy.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot import metrics
from bot.inbox import Delivery, InboxWorker
from bot.stores.inbox import Inbox, InboxItem
from bot.stores.inbox_redis import RedisInbox
from bot.stores.inbox_sqlite import SqliteInbox
from bot.stores.sqlite import SqliteStore
from tests.helpers import until

KIND = "test.busy"
CLAIM = 0.6
BUSY = 2.5  # seconds the loop is held: four claim times


async def never_seen(key: str) -> bool:
    return True


@pytest.fixture(params=["sqlite", "redis"])
async def boxes(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Inbox, Any]]:
    """This worker's inbox, and a factory (called in the other thread) for the other's."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        mine = RedisInbox.from_url(url, prefix=prefix, claim_after=CLAIM)

        async def other_redis() -> tuple[Inbox, Any]:
            box = RedisInbox.from_url(url, prefix=prefix, claim_after=CLAIM)
            return box, box

        yield mine, other_redis
        await mine.close()
    else:
        store = await SqliteStore.open(tmp_path / "bot.db")

        async def other_sqlite() -> tuple[Inbox, Any]:
            other = await SqliteStore.open(tmp_path / "bot.db")
            return await SqliteInbox.open(other.worker, claim_after=CLAIM), other

        yield await SqliteInbox.open(store.worker, claim_after=CLAIM), other_sqlite
        await store.close()


def _other_replica(make: Any, running: threading.Event, stop: threading.Event) -> list[int]:
    """Another process's worker: takes what it can while `stop` is not set; the tries of
    every entry it took."""
    taken: list[int] = []

    async def main() -> None:
        box, closer = await make()
        try:
            running.set()
            while not stop.is_set():
                # Take-overs only: the entry is this worker's from the start.
                fresh = not isinstance(box, RedisInbox)
                found = await box.take(KIND, "other-replica", count=10, wait=0.05, fresh=fresh)
                for entry in found:
                    taken.append(entry.tries)
                    await box.hand_back(KIND, [entry])
                await asyncio.sleep(0.02)
        finally:
            await closer.close()

    asyncio.run(main())
    return taken


async def test_a_busy_loop_keeps_the_leases_of_its_running_turns(
    boxes: tuple[Inbox, Any],
) -> None:
    mine, make_other = boxes
    lost_before = metrics.INBOX_ENTRY_LOST.labels(KIND)._value.get()
    started, finished = asyncio.Event(), asyncio.Event()
    runs: list[int] = []

    async def handler(delivery: Delivery) -> None:
        runs.append(delivery.entry.tries)
        started.set()
        end = time.monotonic() + BUSY
        while time.monotonic() < end:  # CPU work on the loop (no await): nothing else runs
            sum(range(1000))
        finished.set()

    worker = InboxWorker(mine, first_delivery=never_seen, claim_after=CLAIM)
    worker.serve(KIND, handler)
    running, stop = threading.Event(), threading.Event()
    result: list[list[int]] = []
    thread = threading.Thread(
        target=lambda: result.append(_other_replica(make_other, running, stop)), daemon=True
    )
    thread.start()
    try:
        assert await asyncio.to_thread(running.wait, 10)
        assert await worker.put(InboxItem(KIND, "s1", {"n": 1}))
        await asyncio.wait_for(finished.wait(), 30)
        # Positive signal that the entry is finished here: the inbox is empty again.
        await until(lambda: worker.in_flight == 0, timeout=10)
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 10)
        await worker.stop(1.0)
    assert runs == [1]
    assert result == [[]], f"the other replica took the running entry (tries {result})"
    assert metrics.INBOX_ENTRY_LOST.labels(KIND)._value.get() == lost_before


async def test_an_entry_taken_over_while_it_runs_is_counted_in_metrics(tmp_path: Path) -> None:
    """The other side: when an entry is taken over anyway (here: its row handed to another
    consumer behind this worker's back), the renewal says so and /metrics counts it."""
    store = await SqliteStore.open(tmp_path / "bot.db")
    inbox = await SqliteInbox.open(store.worker, claim_after=CLAIM)
    running, release = asyncio.Event(), asyncio.Event()

    async def handler(delivery: Delivery) -> None:
        running.set()
        await release.wait()

    worker = InboxWorker(inbox, first_delivery=never_seen, claim_after=CLAIM)
    worker.serve(KIND, handler)
    series = f'bot_inbox_entry_lost_total{{kind="{KIND}"}}'

    def lost() -> float:
        for line in metrics.render()[0].decode().splitlines():
            if line.startswith(series):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    before = lost()
    try:
        assert await worker.put(InboxItem(KIND, "s1", {"n": 1}))
        await asyncio.wait_for(running.wait(), 10)
        await store.worker.call(lambda conn: conn.execute("UPDATE inbox SET owner = 'thief'"))
        await until(lambda: lost() == before + 1, timeout=10, what="the loss on /metrics")
    finally:
        release.set()
        await worker.stop(1.0)
        await store.close()
