"""Wiring the consolidation into a running bot: the Consolidator built from the parts of a
`ConsolidationHost` (the app, which this package does not import: `bot.app` imports memory), and
the APScheduler 3 cron job (BOT_CONSOLIDATE_CRON, UTC) that `bot slack` / `bot discord` start
through `BotApp.start()`.

APScheduler is used for what it is good at (cron parsing, next fire times, misfire handling,
one instance at a time in this process); the cross-process "exactly one" is the store lease
inside the Consolidator, so several bot processes can all schedule the job safely. Each fire
also takes a lease (`FIRE_LEASE`, never released, expiring before the next fire): the workers of
one host (`bot slack --workers N`) all fire at the same minute, and only the first runs the
job, rather than the others running it again right after it (finding little left to do, but
reading every session to find that out).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger

from bot.config import Settings
from bot.keys import SessionKey
from bot.memory.consolidation import Consolidator, MemorySink
from bot.memory.reconcile import Reconciler
from bot.memory.structured import JsonAsker
from bot.metered import MeteredModel
from bot.stores.leases import new_holder
from bot.stores.protocols import ConsolidationStore, StoreUnavailable

if TYPE_CHECKING:
    from bot.turn import Model
    from bot.usage.meter import UsageMeter

log = logging.getLogger(__name__)

FIRE_LEASE = "consolidation-fire"
FIRE_LEASE_MAX = 600.0  # seconds; never longer than half the time to the next fire


class ConsolidationHost(Protocol):
    """What the consolidation takes from the running bot (`bot.app.BotApp` has it all)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> ConsolidationStore: ...

    @property
    def reconciler(self) -> Reconciler: ...

    @property
    def summary_model(self) -> Model: ...

    @property
    def memory_sink(self) -> MemorySink | None: ...

    @property
    def meter(self) -> UsageMeter | None: ...

    def lock_session(self, session: SessionKey) -> AbstractAsyncContextManager[None]: ...


def trigger(cron: str) -> CronTrigger:
    return CronTrigger.from_crontab(cron, timezone=UTC)


def next_run(cron: str, now: datetime | None = None) -> datetime | None:
    now = now or datetime.now(UTC)
    fire: datetime | None = trigger(cron).get_next_fire_time(None, now)
    return fire


def build_consolidator(app: ConsolidationHost) -> Consolidator:
    settings = app.settings
    return Consolidator(
        app.store,
        app.reconciler,
        JsonAsker(MeteredModel(app.summary_model, "extract", app.meter), max_tokens=2000),
        holder=new_holder(),
        lock_session=app.lock_session,
        memories=app.memory_sink,
        concurrency=settings.bot_consolidate_concurrency,
        max_tokens=settings.bot_consolidate_max_tokens,
        retention_days=settings.bot_retention_days,
    )


class NightlySchedule:
    """The cron job in this process; `stop()` cancels a run in progress (its work resumes on
    the next run: see the Consolidator's checkpoints)."""

    def __init__(self, app: ConsolidationHost) -> None:
        self.app = app
        self.scheduler = AsyncIOScheduler(timezone=UTC)
        self.holder = new_holder()
        self._running: asyncio.Task[None] | None = None

    async def consolidate(self) -> None:
        await build_consolidator(self.app).run()

    def start(self) -> None:
        cron = self.app.settings.bot_consolidate_cron
        self.scheduler.add_job(
            self._fire,
            trigger(cron),
            id="consolidation",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=3600,
        )
        self.scheduler.start()
        log.info(
            "consolidation_scheduled",
            extra={"fields": {"cron": cron, "next": str(next_run(cron))}},
        )

    async def _first_to_fire(self) -> bool:
        """True when this process is the first of those sharing the store to fire now."""
        now = datetime.now(UTC)
        following = next_run(self.app.settings.bot_consolidate_cron, now + timedelta(seconds=1))
        gap = (following - now).total_seconds() if following is not None else FIRE_LEASE_MAX * 2
        ttl = max(1.0, min(FIRE_LEASE_MAX, gap / 2))
        try:
            lease = await self.app.store.take_lease(FIRE_LEASE, self.holder, ttl)
        except StoreUnavailable:
            return True  # the Consolidator's own lease still keeps runs apart
        if not lease.ours:
            log.info("consolidation_fired_elsewhere", extra={"fields": {"holder": lease.holder}})
        return lease.ours

    async def _fire(self) -> None:
        self._running = asyncio.current_task()  # type: ignore[assignment]
        try:
            if await self._first_to_fire():
                await self.consolidate()
        except Exception:
            log.exception("consolidation_failed")
        finally:
            self._running = None

    async def stop(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        task = self._running
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
