"""The inbox worker in the windows a review found (shutdown's drain, ...). Real Redis and the
real SQLite store; the oracles are what each handler saw."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as sync_redis

from bot.inbox import Delivery, InboxWorker
from bot.stores.inbox import Inbox, InboxItem
from bot.stores.inbox_redis import RedisInbox
from bot.stores.inbox_sqlite import SqliteInbox
from bot.stores.sqlite import SqliteStore
from tests.helpers import until
from tests.support.ci import missing

KIND = "test.message"
CLAIM = 0.6


def item(session: str, n: int) -> InboxItem:
    return InboxItem(kind=KIND, session=session, body={"s": session, "n": n})


async def never_seen(key: str) -> bool:
    return True


class Seen:
    """A handler that records (session, n) and can be held until released."""

    def __init__(self, *, held: bool = False) -> None:
        self.runs: list[tuple[str, int]] = []
        self.started: list[tuple[str, int]] = []
        self.release = asyncio.Event()
        if not held:
            self.release.set()

    async def __call__(self, delivery: Delivery) -> None:
        key = (delivery.body["s"], delivery.body["n"])
        self.started.append(key)
        await self.release.wait()
        self.runs.append(key)


@pytest.fixture(params=["redis", "sqlite"])
async def boxes(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[list[Inbox]]:
    """Two handles on one inbox, as two processes would have."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        made: list[Any] = [RedisInbox.from_url(url, prefix=prefix, claim_after=CLAIM) for _ in "ab"]
        yield made
        for box in made:
            await box.close()
    else:
        stores = [await SqliteStore.open(tmp_path / "bot.db") for _ in "ab"]
        yield [await SqliteInbox.open(s.worker, claim_after=CLAIM) for s in stores]
        for store in stores:
            await store.close()


@pytest.fixture
async def workers() -> AsyncIterator[list[InboxWorker]]:
    started: list[InboxWorker] = []
    yield started
    for worker in started:
        await worker.stop(0.5)


async def test_an_entry_finishing_during_the_stop_grace_is_not_taken_over_meanwhile(
    boxes: list[Inbox], workers: list[InboxWorker]
) -> None:
    """SIGTERM lets a running turn finish within the grace period: its entry must stay this
    worker's all that time (renewed), or another replica runs the same turn a second time."""
    slow = Seen(held=True)
    first = InboxWorker(boxes[0], first_delivery=never_seen, claim_after=CLAIM)
    workers.append(first)
    first.serve(KIND, slow)
    await first.put(item("s1", 1))
    await until(lambda: slow.started == [("s1", 1)], what="the first worker runs it")
    other = Seen()
    second = InboxWorker(boxes[1], first_delivery=never_seen, claim_after=CLAIM)
    workers.append(second)
    second.serve(KIND, other)
    stopping = asyncio.create_task(first.stop(grace=30.0))
    await asyncio.sleep(CLAIM * 5)  # the turn goes on well past the claim time
    slow.release.set()
    assert await stopping == 0  # it finished within the grace period: nothing handed back
    # A positive signal that the second worker was reading and claiming all along.
    await second.put(item("s2", 1))
    await until(lambda: ("s2", 1) in other.runs, what="the second worker is live")
    await until(lambda: second.in_flight == 0, what="the second worker is idle")
    assert slow.runs == [("s1", 1)]
    assert ("s1", 1) not in other.started  # never run twice


@pytest.mark.parametrize("slots", [2, 64])
async def test_a_worker_takes_over_the_entry_its_own_are_waiting_for_and_runs_it_first(
    redis_url: str, redis_prefix: str, workers: list[InboxWorker], slots: int
) -> None:
    """A worker holds follow-ups of a session whose first message belongs to a replica that
    died. It must claim that one (also when every slot is taken by the waiting follow-ups) and
    run it first (a taken-over entry must not queue behind its successors in this process),
    not wait out `order_wait` and then answer the follow-ups before the first message."""
    box = RedisInbox.from_url(redis_url, prefix=redis_prefix, claim_after=CLAIM)
    try:
        await box.put(item("s1", 1))
        (held,) = await box.take(KIND, "elsewhere:1:gone", count=1, wait=2.0)  # then it died
        for n in (2, 3):
            await box.put(item("s1", n))
        seen = Seen()
        worker = InboxWorker(
            box, first_delivery=never_seen, claim_after=CLAIM, max_in_flight=slots, order_wait=60
        )
        workers.append(worker)
        worker.serve(KIND, seen)
        await until(lambda: len(seen.runs) == 3, timeout=15, what="all three answered")
        assert seen.runs == [("s1", 1), ("s1", 2), ("s1", 3)]
        assert held.item.body["n"] == 1
    finally:
        for worker in workers:
            await worker.stop(0.5)
        workers.clear()
        await box.close()


@pytest.fixture
def full_redis() -> Iterator[str]:
    """A Redis of this test's own (a unix socket, no port) at its memory limit: every write is
    refused with OOM, as a production Redis with `maxmemory` and `noeviction` does when full."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing("redis-server is not installed")
    directory = tempfile.mkdtemp(prefix="rv-redis-")
    sock = f"{directory}/redis.sock"
    args = ["--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no"]
    args += ["--maxmemory", "1", "--maxmemory-policy", "noeviction", "--dir", directory]
    proc = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL)
    try:
        client = sync_redis.Redis(unix_socket_path=sock)
        for _ in range(500):  # until it answers (it starts in a few milliseconds)
            try:
                client.ping()
                break
            except sync_redis.ConnectionError:
                time.sleep(0.01)
        client.close()
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        proc.wait(5)
        shutil.rmtree(directory, ignore_errors=True)


async def test_an_inbox_redis_that_refuses_writes_still_gets_the_event_answered(
    full_redis: str,
) -> None:
    """The inbox cannot take the event (Redis answers OOM, MISCONF...): the adapter must still
    get an answer from `put` and the event run here, as when Redis is down, or Slack is acked
    with an error, re-sends it to the same refusal and the message is never answered."""
    box = RedisInbox.from_url(full_redis, prefix="t:", claim_after=CLAIM)
    try:
        seen = Seen()
        worker = InboxWorker(box, first_delivery=never_seen, claim_after=CLAIM)
        worker._handlers[KIND] = seen  # serve() would start readers on the refusing inbox
        assert await worker.put(item("s1", 1)) is True
        await until(lambda: seen.runs == [("s1", 1)], what="run in this process")
        assert await worker.stop(1.0) == 0
    finally:
        await box.close()


async def test_consumers_of_workers_gone_are_removed_from_the_redis_group(
    redis_url: str, redis_prefix: str, workers: list[InboxWorker]
) -> None:
    """Every process start adds a consumer to the stream's group; one that stopped (or was
    killed, once its entries were taken over) must not stay there forever, or the group grows
    by one per deploy and per crash."""
    claim = 0.3
    boxes = [RedisInbox.from_url(redis_url, prefix=redis_prefix, claim_after=claim) for _ in "ab"]
    client = sync_redis.Redis.from_url(redis_url)

    def consumers() -> set[str]:
        rows = client.xinfo_consumers(f"{redis_prefix}inbox:{KIND}", "workers")
        return {
            str(r["name"], "utf-8") if isinstance(r["name"], bytes) else r["name"] for r in rows
        }

    try:
        seen = Seen()
        gone = InboxWorker(boxes[0], first_delivery=never_seen, claim_after=claim)
        gone.serve(KIND, seen)
        await gone.put(item("s1", 1))
        await until(lambda: seen.runs == [("s1", 1)], what="handled by the first worker")
        await until(lambda: gone.in_flight == 0, what="done")
        assert await gone.stop(1.0) == 0
        assert gone.consumer in consumers()
        live = InboxWorker(boxes[1], first_delivery=never_seen, claim_after=claim)
        workers.append(live)
        live.serve(KIND, seen)
        await until(lambda: gone.consumer not in consumers(), timeout=20, what="pruned")
        await live.put(item("s2", 1))
        await until(lambda: ("s2", 1) in seen.runs, what="the live worker still reads")
        assert live.consumer in consumers()
    finally:
        for worker in workers:
            await worker.stop(0.5)
        workers.clear()
        client.close()
        for box in boxes:
            await box.close()
