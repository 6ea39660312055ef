"""Jobs that run once for all the workers of a host (`bot slack --workers N`), through a lease in
the store they share: the nightly consolidation fires in every worker at the same minute and runs
in the first only; the episodic start-up catch-up runs in one worker at a time.

Real parts: the SQLite store (its leases table) shared by two handles, as two processes share it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bot.config import Settings
from bot.memory.episodic.service import CATCH_UP_LEASE, EpisodicMemory
from bot.memory.nightly import NightlySchedule
from bot.stores.sqlite import SqliteStore
from bot.tokens import TokenCounter


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[list[SqliteStore]]:
    made = [await SqliteStore.open(tmp_path / "bot.db") for _ in range(2)]
    yield made
    for store in made:
        await store.close()


class CountingSchedule(NightlySchedule):
    runs: list[str]

    async def consolidate(self) -> None:
        self.runs.append(self.holder)


async def test_the_nightly_fire_runs_in_one_worker_only(stores: list[SqliteStore]) -> None:
    runs: list[str] = []
    settings = Settings(bot_consolidate_cron="0 3 * * *")
    schedules = []
    for store in stores:
        schedule = CountingSchedule(SimpleNamespace(settings=settings, store=store))  # type: ignore[arg-type]
        schedule.runs = runs
        schedules.append(schedule)
    await asyncio.gather(*(s._fire() for s in schedules))
    assert len(runs) == 1
    # The other worker's scheduler fires again a moment later (a late start): still no run.
    [other] = [s for s in schedules if s.holder != runs[0]]
    await other._fire()
    assert len(runs) == 1


async def test_the_episodic_catch_up_runs_in_one_worker_at_a_time(
    stores: list[SqliteStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[int] = []
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def catch_up_here(self: Any) -> None:
        ran.append(id(self))
        inside.set()
        await leave.wait()

    monkeypatch.setattr(EpisodicMemory, "_catch_up_here", catch_up_here)
    memories = [
        EpisodicMemory(store, None, None, TokenCounter("gpt-4o-mini"), leases=store)  # type: ignore[arg-type]
        for store in stores
    ]
    first = asyncio.create_task(memories[0]._catch_up())
    await inside.wait()
    await memories[1]._catch_up()  # the first still runs: this one skips
    assert ran == [id(memories[0])]
    leave.set()
    await first
    lease = await stores[0].take_lease(CATCH_UP_LEASE, "someone-else", 10)
    assert lease.ours  # released at the end
