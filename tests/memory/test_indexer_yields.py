"""Episodic indexing yields to the turns this process runs (bot.activity, the indexer's
`yield_to`): a session waits for a moment without turns, or its `max_lag`, whichever comes
first; `idle()` skips the wait. Real SQLite store and index; the app-level case runs real turns
on FakeOpenAI.

"Not indexed while the turn ran" is checked by a poller that notes when the checkpoint first
moved, compared with when the turn ended: an indexer that did not wait moves it within
milliseconds, long before."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import numpy as np
import pytest

from bot.activity import TurnActivity
from bot.embeddings.base import Vectors, normalise
from bot.keys import SessionKey
from bot.memory.episodic.indexer import Indexer
from bot.memory.episodic.service import EpisodicMemory
from bot.memory.erasure import Eraser
from bot.memory.index_tiers import IndexMemories
from bot.stores.memory_index import MemoryIndex
from bot.tokens import TokenCounter
from testkit.fakes.openai_server import FakeOpenAI, Hang
from tests.conftest import MakeApp
from tests.helpers import CollectingSink, until
from tests.memory import test_episodic
from tests.memory.test_episodic import ALICE, CHANNEL, SCOPE, Parts, said
from tests.memory.test_recall_in_turns import msg

POLL = 0.01
parts = test_episodic.parts  # real SQLite store and index in tmp_path


async def first_past(
    index: MemoryIndex, session: str, seq: int = 0, timeout: float = 20.0
) -> float:
    """time.monotonic() when the session's checkpoint first passed `seq` (polled every POLL s)."""
    deadline = time.monotonic() + timeout
    while await index.get_checkpoint(session) <= seq:
        if time.monotonic() > deadline:
            raise AssertionError(f"{session} was never indexed past {seq}")
        await asyncio.sleep(POLL)
    return time.monotonic()


def waiting() -> bool:
    """The indexer's worker waits: besides this test's task, the worker and its two waits
    (a quiet moment, a hurry) are running."""
    return len(asyncio.all_tasks()) >= 4


async def yielding(parts: Parts, *, max_lag: float) -> tuple[TurnActivity, Indexer]:
    """An indexer yielding to a fresh activity, and one message of Alice's to index."""
    activity = TurnActivity()
    indexer = Indexer(parts.store, parts.index, None)
    indexer.yield_to(activity, max_lag=max_lag)
    await parts.store.append(CHANNEL, [said("We ship the Lisbon order on Friday", ALICE, "t1")])
    return activity, indexer


async def test_turn_activity_counts_turns_and_waits_for_a_quiet_moment() -> None:
    activity = TurnActivity()
    assert activity.running == 0 and await activity.quiet(0)
    with activity.turn():
        with activity.turn():
            assert activity.running == 2
        assert activity.running == 1
        assert not await activity.quiet(0.05)  # a turn still runs: the time runs out
        quiet_wait = asyncio.create_task(activity.quiet(10))
        await asyncio.sleep(0)
        assert not quiet_wait.done()
    assert await asyncio.wait_for(quiet_wait, 5)
    assert activity.running == 0


async def test_a_turn_that_fails_still_ends() -> None:
    activity = TurnActivity()
    with pytest.raises(RuntimeError), activity.turn():
        raise RuntimeError("the turn failed")
    assert activity.running == 0 and await activity.quiet(0)


async def test_indexing_waits_until_the_running_turn_ends(parts: Parts) -> None:
    activity, indexer = await yielding(parts, max_lag=60)
    with activity.turn():
        indexer.enqueue(CHANNEL)
        seen = asyncio.create_task(first_past(parts.index, CHANNEL.id))
        await asyncio.sleep(0.5)  # the turn runs on
        ended = time.monotonic()
    assert await seen >= ended
    assert await indexer.idle(5)
    await indexer.close()


async def test_indexing_waits_no_longer_than_its_max_lag(parts: Parts) -> None:
    activity, indexer = await yielding(parts, max_lag=0.4)
    with activity.turn():  # turns never stop
        queued = time.monotonic()
        indexer.enqueue(CHANNEL)
        indexed = await first_past(parts.index, CHANNEL.id)
        assert indexed - queued >= 0.4
        assert activity.running == 1
    await indexer.close()


async def test_idle_indexes_now_even_while_turns_run(parts: Parts) -> None:
    """Erasure and shutdown wait in `idle()`: they must not wait out the lag."""
    activity, indexer = await yielding(parts, max_lag=600)
    with activity.turn():
        indexer.enqueue(CHANNEL)
        await until(waiting, what="the indexer waiting for a quiet moment")
        assert await indexer.idle(5)
        assert await parts.index.get_checkpoint(CHANNEL.id) == 1
        # The next session queued while turns run waits again.
        await parts.store.append(CHANNEL, [said("Pallets confirmed", ALICE, "t2")])
        indexer.enqueue(CHANNEL)
        seen = asyncio.create_task(first_past(parts.index, CHANNEL.id, 1))
        await asyncio.sleep(0.3)
        ended = time.monotonic()
    assert await seen >= ended
    await indexer.close()


async def test_the_app_indexes_a_finished_turn_once_its_other_turns_end(
    make_app: MakeApp, fake_openai: FakeOpenAI
) -> None:
    app = await make_app(episodic=True)
    assert app.episodic is not None
    fake_openai.push(Hang(1.5))  # the first turn's model answers slowly
    slow_sink = CollectingSink()
    slow = asyncio.create_task(
        app.handle_message(msg("Plan the Lisbon shipment", user="UA", channel="CSLOW"), slow_sink)
    )
    await until(lambda: fake_openai.requests, what="the slow turn at its model call")
    quick = msg("We ship the Lisbon order on Friday", user="UB", channel="CQUICK")
    quick_sink = CollectingSink()
    await app.handle_message(quick, quick_sink)
    assert quick_sink.final and not quick_sink.error
    seen = asyncio.create_task(first_past(app.episodic.index, quick.session.id))
    await slow
    ended = time.monotonic()
    assert slow_sink.final and not slow_sink.error
    assert await seen >= ended
    assert app.activity.running == 0


class SlowEmbedder:
    """An embedder that takes `delay` seconds a call (as a remote one may): it holds an
    indexing pass between its read of the messages and its write of the entries."""

    name = "slow-test"

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        await asyncio.sleep(self.delay)
        return normalise(np.ones((len(texts), 4)))

    async def close(self) -> None:
        pass


def place(n: int) -> SessionKey:
    return SessionKey("slack", "T1", f"C{n}", "1700.1")


async def test_the_catch_up_at_start_yields_to_turns_too(parts: Parts) -> None:
    """Sessions a crash left unindexed are indexed at quiet moments, not all at once while
    the events missed meanwhile are being answered."""
    backlog = [place(n) for n in range(4)]
    for n, key in enumerate(backlog):
        await parts.store.append(key, [said(f"Backlog message {n}", ALICE, f"t{n}")])
    embedder = SlowEmbedder(0.2)
    memory = EpisodicMemory(parts.store, parts.index, embedder, TokenCounter("gpt-4o-mini"))
    activity = TurnActivity()
    memory.indexer.yield_to(activity, max_lag=60)
    with activity.turn():
        await memory.start()
        await until(lambda: memory.indexer._queued, what="the backlog queued")
        await asyncio.sleep(0.8)  # the turn runs on
        indexed = [k for k in backlog if await parts.index.get_checkpoint(k.id) > 0]
        assert indexed == [] and embedder.calls == 0
    assert await memory.idle(10)
    assert [await parts.index.get_checkpoint(k.id) for k in backlog] == [1, 1, 1, 1]
    await memory.close(drain=10)


async def test_close_while_waiting_stops_the_wait_and_leaves_no_task_behind(
    parts: Parts,
) -> None:
    activity, indexer = await yielding(parts, max_lag=600)
    with activity.turn():
        indexer.enqueue(CHANNEL)
        await until(waiting, what="the indexer waiting for a quiet moment")
        await asyncio.wait_for(indexer.close(), 5)
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert left == []
    assert await parts.index.get_checkpoint(CHANNEL.id) == 0  # left for recover() at start


async def test_erasure_waits_for_the_indexing_that_read_the_persons_words(parts: Parts) -> None:
    """An indexing pass that read Alice's message before `/memory forget all` deleted it must
    not write her entry back after the erasure (the tier settles the indexer first)."""
    await parts.store.append(CHANNEL, [said("My flat is at Rua Augusta 12", ALICE, "t1")])
    embedder = SlowEmbedder(0.5)
    indexer = Indexer(parts.store, parts.index, embedder)
    indexer.enqueue(CHANNEL)
    await until(lambda: embedder.calls == 1, what="the indexer embedding her entry")
    eraser = Eraser(parts.store, tiers=[IndexMemories(parts.index, settle=indexer.idle)])
    await eraser.forget_all(ALICE)
    assert await indexer.idle(5)
    entries = (await parts.index.changes(SCOPE)).entries
    await indexer.close()
    assert [e.text for e in entries if ALICE.id in e.people] == []


async def test_the_apps_erasure_settles_its_indexer_first(make_app: MakeApp) -> None:
    app = await make_app(episodic=True)
    assert app.episodic is not None
    tiers = [t for t in app.commands.eraser.tiers if isinstance(t, IndexMemories)]
    assert [t.settle for t in tiers] == [app.episodic.indexer.idle]
