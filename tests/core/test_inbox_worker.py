"""The inbox worker on real backends (Redis Streams, the SQLite table): several workers in one
test play several replicas. Oracles: what each handler saw and when (its own records)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot import metrics
from bot.inbox import Delivery, InboxWorker, RetryLater
from bot.stores.inbox import Inbox, InboxItem
from bot.stores.inbox_redis import RedisInbox
from bot.stores.inbox_sqlite import SqliteInbox
from bot.stores.protocols import StoreUnavailable
from bot.stores.sqlite import SqliteStore
from tests.helpers import until

KIND = "test.message"


class Recorder:
    def __init__(self, pause: float = 0.0) -> None:
        self.pause = pause
        self.runs: list[tuple[str, int, float, float, int]] = []  # session, n, start, end, tries
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, delivery: Delivery) -> None:
        started = time.monotonic()
        await self.release.wait()
        await asyncio.sleep(self.pause)
        body = delivery.body
        self.runs.append((body["s"], body["n"], started, time.monotonic(), delivery.entry.tries))


def item(session: str, n: int) -> InboxItem:
    return InboxItem(kind=KIND, session=session, body={"s": session, "n": n})


async def never_seen(key: str) -> bool:
    return True


@pytest.fixture
async def workers(boxes: list[Inbox]) -> AsyncIterator[list[InboxWorker]]:
    """Workers a test starts (append them); all are stopped before the inboxes close."""
    started: list[InboxWorker] = []
    yield started
    for worker in started:
        await worker.stop(0.5)


@pytest.fixture(params=["redis", "sqlite"])
async def boxes(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[list[Inbox]]:
    """Three handles on one inbox (as three processes would have)."""
    claim = 0.6
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        made: list[Any] = [
            RedisInbox.from_url(url, prefix=prefix, claim_after=claim) for _ in "abc"
        ]
        yield made
        for box in made:
            await box.close()
    else:
        stores = [await SqliteStore.open(tmp_path / "bot.db") for _ in "abc"]
        yield [await SqliteInbox.open(s.worker, claim_after=claim) for s in stores]
        for store in stores:
            await store.close()


async def test_workers_keep_each_sessions_order_and_run_sessions_side_by_side(
    boxes: list[Inbox], workers: list[InboxWorker]
) -> None:
    record = Recorder(pause=0.05)
    started = [InboxWorker(b, first_delivery=never_seen, claim_after=0.6) for b in boxes]
    workers += started
    for w in started:
        w.serve(KIND, record)
    for n in range(4):
        for s in ("s1", "s2", "s3"):
            assert await started[n % 3].put(item(s, n))
    await until(lambda: len(record.runs) == 12, timeout=20, what="all twelve handled")
    for s in ("s1", "s2", "s3"):
        runs = [r for r in record.runs if r[0] == s]
        assert [r[1] for r in sorted(runs, key=lambda r: r[2])] == [0, 1, 2, 3]
        for earlier, later in itertools.pairwise(runs):
            assert later[2] >= earlier[3]  # never two of one session at once
    starts = sorted(r[2] for r in record.runs)
    ends = sorted(r[3] for r in record.runs)
    assert any(b < e for b, e in zip(starts[1:], ends, strict=False))  # sessions overlapped


async def test_an_entry_of_a_worker_that_stopped_renewing_is_run_by_another(
    boxes: list[Inbox], workers: list[InboxWorker]
) -> None:
    dead, alive = boxes[0], boxes[1]
    await dead.put(item("s1", 1))
    (held,) = await dead.take(KIND, "elsewhere:1:gone", count=1, wait=2.0)  # then it "died"
    await dead.note(held, {"reply_ts": ["1.1"]})
    seen: list[Delivery] = []

    async def handler(delivery: Delivery) -> None:
        seen.append(delivery)

    worker = InboxWorker(alive, first_delivery=never_seen, claim_after=0.6)
    workers.append(worker)
    worker.serve(KIND, handler)
    await until(lambda: bool(seen), timeout=10, what="the taken-over entry ran")
    assert seen[0].entry.id == held.id and seen[0].retried
    assert seen[0].entry.notes == {"reply_ts": ["1.1"]}
    await until(lambda: worker.in_flight == 0, what="done")
    assert (await alive.stats(KIND)).depth == 0


async def test_stop_hands_unfinished_entries_back_to_another_worker(
    boxes: list[Inbox], workers: list[InboxWorker]
) -> None:
    stuck = Recorder()
    stuck.release.clear()  # never finishes
    first = InboxWorker(boxes[0], first_delivery=never_seen, claim_after=30)
    workers.append(first)
    first.serve(KIND, stuck)
    await first.put(item("s1", 1))
    await until(lambda: first.in_flight == 1, what="taken")
    assert await first.stop(0.1) == 1
    done = Recorder()
    second = InboxWorker(boxes[1], first_delivery=never_seen, claim_after=30)
    workers.append(second)
    second.serve(KIND, done)  # a claim time of 30 s: only a hand-back makes this quick
    await until(lambda: len(done.runs) == 1, timeout=10, what="taken at once by the other")
    assert done.runs[0][4] == 2  # the second delivery


async def test_a_poison_entry_is_dead_lettered(
    boxes: list[Inbox], workers: list[InboxWorker]
) -> None:
    box = boxes[0]
    await box.put(item("s1", 1))
    tries = 0
    for i in range(200):  # five workers took it and gave it back (or died on it)
        got = await box.take(KIND, f"elsewhere:{i}:x", count=1, wait=0.2)
        if got:
            tries = got[0].tries
            await box.hand_back(KIND, got)
        if tries == 5:
            break
    assert tries == 5
    ran = Recorder()
    before = metrics.INBOX_DEAD_LETTER.labels(KIND)._value.get()
    worker = InboxWorker(box, first_delivery=never_seen, claim_after=0.6, max_tries=5)
    workers.append(worker)
    worker.serve(KIND, ran)
    await until(
        lambda: metrics.INBOX_DEAD_LETTER.labels(KIND)._value.get() == before + 1,
        timeout=10,
        what="dead-lettered",
    )
    await until(lambda: worker.in_flight == 0, what="done")
    assert ran.runs == [] and (await box.stats(KIND)).depth == 0


class DownInbox:
    async def put(self, item: InboxItem) -> str | None:
        raise StoreUnavailable("down")

    async def put_and_take(self, item: InboxItem, consumer: str) -> tuple[str | None, None]:
        raise StoreUnavailable("down")


async def test_an_unwritable_inbox_runs_items_here_once() -> None:
    seen_keys: set[str] = set()

    async def first(key: str) -> bool:
        if key in seen_keys:
            return False
        seen_keys.add(key)
        return True

    ran = Recorder()
    worker = InboxWorker(DownInbox(), first_delivery=first)  # type: ignore[arg-type]
    worker._handlers[KIND] = ran  # serve() would start readers on the broken inbox
    one = InboxItem(kind=KIND, session="s1", body={"s": "s1", "n": 1}, dedup=("ev:1",))
    assert await worker.put(one) is True
    assert await worker.put(one) is False  # a re-delivery, caught by the cache's SET NX
    await until(lambda: len(ran.runs) == 1, what="run in process")
    assert worker.in_flight == 0 or await worker.stop(1.0) == 0


async def test_a_handler_that_asks_to_retry_later_gets_the_entry_again(
    boxes: list[Inbox], workers: list[InboxWorker]
) -> None:
    tries: list[int] = []

    async def flaky(delivery: Delivery) -> None:
        tries.append(delivery.entry.tries)
        if len(tries) == 1:
            raise RetryLater("the installation store is down")

    worker = InboxWorker(boxes[0], first_delivery=never_seen, claim_after=0.6)  # as the inbox's
    workers.append(worker)
    worker.serve(KIND, flaky)
    await worker.put(item("s1", 1))
    await until(lambda: len(tries) == 2, timeout=15, what="run again after the pause")
    assert tries == [1, 2]
    await until(lambda: worker.in_flight == 0, what="done")
    assert (await boxes[0].stats(KIND)).depth == 0  # done after the second run, not before


async def test_a_stop_that_lands_while_an_event_is_put_hands_that_entry_back(
    tmp_path: Path,
) -> None:
    """SQLite takes the entry it puts (`put_and_take`): when the worker stops while that put is
    on its way, the entry it was handed goes back for another worker at once, never run here."""
    stores = [await SqliteStore.open(tmp_path / "bot.db") for _ in "ab"]
    # A claim time of 30 s: only a hand-back lets the other worker take the entry quickly.
    boxes = [await SqliteInbox.open(s.worker, claim_after=30) for s in stores]
    here, other = Recorder(), Recorder()
    first = InboxWorker(boxes[0], first_delivery=never_seen, claim_after=30)
    second = InboxWorker(boxes[1], first_delivery=never_seen, claim_after=30)
    try:
        first.serve(KIND, here)
        putting = asyncio.create_task(first.put(item("s1", 1)))
        await asyncio.sleep(0)  # the put is waiting for its transaction
        assert not putting.done()
        stopping = asyncio.create_task(first.stop(0.1))
        await asyncio.sleep(0)  # `stop` has begun: the worker is stopping
        assert await putting  # stored
        await stopping
        second.serve(KIND, other)
        await until(lambda: len(other.runs) == 1, timeout=10, what="taken by the other")
        assert here.runs == [] and first.in_flight == 0
    finally:
        await second.stop(0.5)
        await first.stop(0.1)
        for store in stores:
            await store.close()
