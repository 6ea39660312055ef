"""The worker between the durable inbox and the turn: arrival order per session, nothing lost.

Adapters `put` an accepted event before they ack it; the worker takes entries from the inbox
(`bot.stores.inbox`: Redis Streams or a SQLite table) and runs the handler registered for their
kind. The guarantees, and how:

- **Order**: entries of one session run one at a time in the order they were put, across every
  replica. In this process a FIFO lock per session orders them; across processes the inbox says
  when an entry's predecessors are done (`Inbox.ready`), polled with a short backoff. An entry
  whose predecessor never finishes (lost for good) runs anyway after `order_wait` seconds.
- **Nothing lost**: an entry is removed (`done`) only after its handler returned. A worker renews
  the entries it holds every `claim_after / 3` seconds, from a thread of its own when the inbox
  offers a blocking renewer (`LeaseKeeper`: a loop busy with CPU work would renew too late and
  lose entries it still runs; `bot_inbox_entry_lost_total` counts any that are lost); a dead
  worker's entries are taken over by another after `claim_after` seconds (at once on the same
  host for SQLite), and the handler sees `tries > 1` and the notes the first attempt left
  (`Delivery.note`: e.g. the reply it posted), so the re-run completes the same reply instead of
  posting another.
- **Shutdown** (`stop`): stop taking, let running handlers finish within the grace period (their
  entries still renewed, so nobody takes them over meanwhile), then cancel the rest and hand
  their entries back so another replica takes them at once.
- **Poison**: an entry delivered `max_tries` times (it crashed its workers each time) is dropped
  with a log line and `bot_inbox_dead_letter_total`.
- **Outage**: when the inbox cannot be written (Redis down), `put` runs the item in this process
  at once (de-duplicated through the cache as before): no durability then, but no lost message;
  `bot_inbox_fallback_total` counts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from cachetools import TTLCache

from bot import metrics
from bot.stores.inbox import Inbox, InboxEntry, InboxItem
from bot.stores.inbox_renew import BlockingRenewer
from bot.stores.leases import new_holder
from bot.stores.protocols import StoreUnavailable
from tools.keylocks import KeyLocks

__all__ = [
    "Delivery",
    "Handler",
    "InboxEntry",
    "InboxItem",
    "InboxWorker",
    "RetryLater",
    "ServesInbox",
]

# The inbox item whose handler is running (a turn that must be run again later, e.g. after
# the person connected a tool server, puts the same item back: `bot.connections.chat`).
CURRENT_ITEM: contextvars.ContextVar[InboxItem | None] = contextvars.ContextVar(
    "inbox_item", default=None
)

log = logging.getLogger(__name__)

MAX_TRIES = 5
READ_BATCH = 32
READ_WAIT = 0.5  # seconds a read blocks when the inbox is empty
OUTAGE_BACKOFF = 1.0
RETRY_PAUSE = 1.0  # seconds before an entry whose handler said RetryLater is given back
STATS_INTERVAL = 5.0


@dataclass
class Delivery:
    """One entry handed to a handler. `durable` is False for an item run at once because the
    inbox was unavailable or off (then a cancelled run will not be re-run by anyone)."""

    entry: InboxEntry
    durable: bool
    _note: Callable[[InboxEntry, dict[str, Any]], Awaitable[None]] | None = field(
        default=None, repr=False
    )

    @property
    def body(self) -> dict[str, Any]:
        return self.entry.item.body

    @property
    def retried(self) -> bool:
        """True when an earlier attempt may have started (taken over or handed back)."""
        return self.entry.tries > 1

    @property
    def admission(self) -> EntryAdmission:
        """The rate-limit admission of this entry (kept in its notes across attempts)."""
        return EntryAdmission(self)

    async def note(self, **values: Any) -> None:
        """Record progress with the entry (best effort: a failure only weakens a re-run)."""
        self.entry.notes.update(values)
        if self._note is None:
            return
        try:
            await self._note(self.entry, values)
        except Exception as exc:
            log.warning("inbox_note_failed", extra={"fields": {"error": type(exc).__name__}})


ADMITTED_NOTE = "admitted"


@dataclass(frozen=True)
class EntryAdmission:
    """`bot.messages.Admission` in an entry's notes: the first attempt that is admitted notes
    it, and a re-run (taken over, handed back) finds it and is not counted again."""

    delivery: Delivery

    @property
    def admitted(self) -> bool:
        return bool(self.delivery.entry.notes.get(ADMITTED_NOTE))

    async def record(self) -> None:
        if self.delivery.durable:  # an in-process run is never re-run: nothing to remember
            await self.delivery.note(**{ADMITTED_NOTE: True})


class RetryLater(Exception):
    """Raised by a handler that cannot run the entry now for a reason that passes (a store the
    handler needs is down): the entry is handed back after a pause, not done; it counts as a
    try, so one that never succeeds ends as a dead letter."""


def entry_lost(kind: str, entry_id: str) -> None:
    """An entry this worker still runs was taken over by another (its lease ran out)."""
    metrics.INBOX_ENTRY_LOST.labels(kind).inc()
    log.warning("inbox_entry_lost", extra={"fields": {"kind": kind, "entry": entry_id}})


class LeaseKeeper:
    """Renews a worker's entries from a thread, so a busy event loop does not lose them."""

    def __init__(
        self,
        renewer: BlockingRenewer,
        consumer: str,
        held: dict[str, InboxEntry],
        interval: float,
    ) -> None:
        self._renewer = renewer
        self._consumer = consumer
        self._held = held  # the worker's own dict: copied (one atomic step) before each round
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="inbox-leases", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _keep(self) -> None:
        try:
            while not self._stop.wait(self._interval):
                by_kind: dict[str, list[InboxEntry]] = {}
                for entry in self._held.copy().values():
                    by_kind.setdefault(entry.item.kind, []).append(entry)
                for kind, entries in by_kind.items():
                    try:
                        lost = self._renewer.renew(kind, self._consumer, entries)
                    except Exception as exc:
                        log.warning(
                            "inbox_renew_failed", extra={"fields": {"error": type(exc).__name__}}
                        )
                        continue
                    for entry_id in lost:
                        if entry_id in self._held:  # not finished meanwhile (done, handed back)
                            entry_lost(kind, entry_id)
        finally:
            with contextlib.suppress(Exception):
                self._renewer.close()

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 10.0)


class Handler(Protocol):
    async def __call__(self, delivery: Delivery) -> None:
        """Handle one entry. Should not raise; an exception is logged and the entry is done."""


class InboxWorker:
    def __init__(
        self,
        inbox: Inbox | None,
        *,
        first_delivery: Callable[[str], Awaitable[bool]],
        claim_after: float = 20.0,
        max_in_flight: int = 64,
        order_wait: float = 180.0,
        max_tries: int = MAX_TRIES,
        consumer: str | None = None,
    ) -> None:
        self.inbox = inbox
        self.consumer = consumer or new_holder()
        self.claim_after = claim_after
        self.order_wait = order_wait
        self.max_tries = max_tries
        self._first_delivery = first_delivery
        self._handlers: dict[str, Handler] = {}
        self._slots = asyncio.Semaphore(max_in_flight)
        self._max_in_flight = max_in_flight
        self._order: KeyLocks[str] = KeyLocks()
        self._held: dict[str, InboxEntry] = {}  # entry id -> entry, while taken by this worker
        # session -> seq of its entry this process finished last (its successor need not ask)
        self._done_here: TTLCache[str, int] = TTLCache(maxsize=50_000, ttl=600.0)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._renewers: list[asyncio.Task[None]] = []  # stopped last: they cover the drain
        self._keeper: LeaseKeeper | None = None  # the thread that renews, when the inbox can
        self._stopping = False

    # -- intake --------------------------------------------------------------------------------

    async def put(self, item: InboxItem) -> bool:
        """Accept an item: stored durably (True), or a duplicate (False). Falls back to running
        it in this process when the inbox is off or unavailable."""
        if self.inbox is not None:
            try:
                if self._runs_here(item.kind):
                    entry_id, taken = await self.inbox.put_and_take(item, self.consumer)
                    if taken is not None and not self._stopping:
                        self._held[taken.id] = taken
                        self._spawn(taken, durable=True)
                    elif taken is not None:  # stopping meanwhile: for another worker
                        await self._hand_back(item.kind, [taken])
                else:
                    entry_id = await self.inbox.put(item)
                return entry_id is not None
            except Exception as exc:  # down, refusing writes (OOM, MISCONF...), an oversized item
                metrics.INBOX_FALLBACK.labels(item.kind).inc()
                log.warning(
                    "inbox_unavailable",
                    extra={"fields": {"kind": item.kind, "error": type(exc).__name__}},
                )
        for key in item.dedup:
            try:
                if not await self._first_delivery(key):
                    metrics.DEDUPLICATED_EVENTS.labels(item.kind.split(".", 1)[0]).inc()
                    return False
            except Exception:  # the cache is down too: answer rather than drop
                pass
        entry = InboxEntry(id=f"local-{time.monotonic_ns()}", item=item, enqueued_at=time.time())
        self._spawn(entry, durable=False)
        return True

    def _runs_here(self, kind: str) -> bool:
        """This worker would take an entry of `kind` now (it serves the kind, is not stopping,
        has a free slot): then it takes the entry it puts in the same step."""
        return (
            kind in self._handlers
            and bool(self._loops)
            and not self._stopping
            and len(self._held) < self._max_in_flight
        )

    def serve(self, kind: str, handler: Handler) -> None:
        """Run `handler` for entries of `kind` (this process's platform), from now on (also
        after a `stop`: an adapter started again on the same core)."""
        self._stopping = False
        self._handlers[kind] = handler
        if self.inbox is None:
            return
        self._loops.append(asyncio.create_task(self._read(kind), name=f"inbox-read-{kind}"))
        if self._keeper is None:
            blocking = getattr(self.inbox, "blocking_renewer", None)
            renewer: BlockingRenewer | None = blocking() if blocking is not None else None
            if renewer is not None:
                interval = max(self.claim_after / 3, 0.05)
                self._keeper = LeaseKeeper(renewer, self.consumer, self._held, interval)
                self._keeper.start()
        if self._keeper is None:
            self._renewers.append(
                asyncio.create_task(self._renew(kind), name=f"inbox-renew-{kind}")
            )
        self._loops.append(asyncio.create_task(self._stats(kind), name=f"inbox-stats-{kind}"))

    # -- the loops -----------------------------------------------------------------------------

    async def _read(self, kind: str) -> None:
        assert self.inbox is not None
        while not self._stopping:
            free = self._max_in_flight - len(self._held)
            try:
                if free > 0:
                    entries = await self.inbox.take(
                        kind, self.consumer, count=min(free, READ_BATCH), wait=READ_WAIT
                    )
                else:
                    # Full, perhaps of entries waiting for a predecessor a dead replica held:
                    # take-overs only (bounded by what dead workers held), no new entries.
                    entries = await self.inbox.take(
                        kind, self.consumer, count=READ_BATCH, wait=0.0, fresh=False
                    )
                    if not entries:
                        await asyncio.sleep(0.05)
            except StoreUnavailable:
                await asyncio.sleep(OUTAGE_BACKOFF)
                continue
            except Exception:
                log.exception("inbox_read_failed", extra={"fields": {"kind": kind}})
                await asyncio.sleep(OUTAGE_BACKOFF)
                continue
            for entry in entries:
                if self._stopping:  # read while stopping: give it straight back
                    await self._hand_back(kind, [entry])
                    continue
                if entry.id in self._held:  # our own, re-taken after a missed renewal
                    continue
                if entry.tries > 1:
                    metrics.INBOX_CLAIMED.labels(kind).inc()
                    log.info(
                        "inbox_claimed",
                        extra={"fields": {"kind": kind, "entry": entry.id, "tries": entry.tries}},
                    )
                self._held[entry.id] = entry
                self._spawn(entry, durable=True)

    async def _renew(self, kind: str) -> None:
        assert self.inbox is not None
        interval = max(self.claim_after / 3, 0.05)
        while True:  # also while `stop` drains: a finishing turn's entry stays ours
            await asyncio.sleep(interval)
            held = [e for e in self._held.values() if e.item.kind == kind]
            if not held:
                continue
            try:
                lost = await self.inbox.renew(kind, self.consumer, held)
            except Exception as exc:
                log.warning("inbox_renew_failed", extra={"fields": {"error": type(exc).__name__}})
                continue
            for entry_id in lost:  # taken over while this worker still runs it (a long stall)
                if entry_id in self._held:  # not finished meanwhile (done, handed back)
                    entry_lost(kind, entry_id)

    async def _stats(self, kind: str) -> None:
        assert self.inbox is not None
        while not self._stopping:
            try:
                stats = await self.inbox.stats(kind)
                metrics.INBOX_DEPTH.labels(kind).set(stats.depth)
                metrics.INBOX_OLDEST.labels(kind).set(stats.oldest_age)
            except Exception:
                pass  # health reports the store itself; the figures just go stale
            await asyncio.sleep(STATS_INTERVAL)

    # -- running one entry ---------------------------------------------------------------------

    def _spawn(self, entry: InboxEntry, *, durable: bool) -> None:
        task = asyncio.create_task(self._run(entry, durable), name=f"inbox-{entry.item.kind}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, entry: InboxEntry, durable: bool) -> None:
        kind = entry.item.kind
        # The per-session FIFO is entered before any other await: tasks are started in the
        # order entries were read, so they enter in that order, which is the order they were
        # put. Not so for an entry taken over from a dead worker: entries put after it may be
        # here already, waiting for it; it is ordered by the inbox's numbers alone
        # (`_wait_turn`), or it would queue behind its own successors until `order_wait`.
        taken_over = durable and entry.seq > 0 and entry.tries > 1
        order = contextlib.nullcontext() if taken_over else self._order.hold(entry.item.session)
        try:
            async with order:
                if durable and entry.tries > self.max_tries:
                    metrics.INBOX_DEAD_LETTER.labels(kind).inc()
                    log.error(
                        "inbox_dead_letter",
                        extra={"fields": {"kind": kind, "entry": entry.id, "tries": entry.tries}},
                    )
                    await self._done(entry)
                    return
                if durable:
                    await self._wait_turn(entry)
                async with self._slots:
                    retry = await self._handle(entry, durable)
                if retry and durable:
                    # Still in the session's order (its successors wait): pause, then give it
                    # back for any worker (this one too) to take again.
                    await asyncio.sleep(min(RETRY_PAUSE * 2 ** (entry.tries - 1), 30.0))
                    self._held.pop(entry.id, None)  # so a read that takes it back runs it
                    await self._hand_back(kind, [entry])
                    return
                if durable:
                    await self._done(entry)
                    if entry.seq:
                        self._done_here[entry.item.session] = entry.seq
        except asyncio.CancelledError:
            if durable:
                self._held.pop(entry.id, None)
                await self._hand_back(kind, [entry])
            raise
        finally:
            self._held.pop(entry.id, None)

    async def _wait_turn(self, entry: InboxEntry) -> None:
        """Until the entries put before this one in its session are done (other replicas)."""
        assert self.inbox is not None
        if entry.seq and self._done_here.get(entry.item.session) == entry.seq - 1:
            return  # its predecessor just finished in this process
        deadline = time.monotonic() + self.order_wait
        pause = 0.01
        while True:
            try:
                if await self.inbox.ready(entry):
                    return
            except StoreUnavailable:
                pass
            if time.monotonic() >= deadline:
                metrics.INBOX_ORDER_TIMEOUTS.labels(entry.item.kind).inc()
                log.warning(
                    "inbox_order_timeout",
                    extra={"fields": {"entry": entry.id, "session_seq": entry.seq}},
                )
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.25)

    async def _handle(self, entry: InboxEntry, durable: bool) -> bool:
        """Run the handler; True when it asked to be retried later."""
        handler = self._handlers.get(entry.item.kind)
        if handler is None:
            log.error("inbox_no_handler", extra={"fields": {"kind": entry.item.kind}})
            return False
        delivery = Delivery(entry, durable, self.inbox.note if durable and self.inbox else None)
        CURRENT_ITEM.set(entry.item)
        try:
            await handler(delivery)
        except asyncio.CancelledError:
            raise
        except RetryLater as exc:
            log.warning(
                "inbox_retry_later",
                extra={"fields": {"kind": entry.item.kind, "tries": entry.tries, "why": str(exc)}},
            )
            return True
        except Exception:
            metrics.ERRORS.labels(entry.item.kind.split(".", 1)[0], "inbox_handler_failed").inc()
            log.exception("inbox_handler_failed", extra={"fields": {"kind": entry.item.kind}})
        return False

    async def _done(self, entry: InboxEntry) -> None:
        assert self.inbox is not None
        # Out of the renewed set first: a renewal that finds the row gone is then not a loss.
        self._held.pop(entry.id, None)
        for attempt in range(5):
            try:
                await self.inbox.done(entry)
                return
            except StoreUnavailable:
                await asyncio.sleep(0.2 * 2**attempt)
        # Left pending: it is taken over later, and the re-run finds its turn complete.
        log.warning("inbox_done_failed", extra={"fields": {"entry": entry.id}})

    async def _hand_back(self, kind: str, entries: list[InboxEntry]) -> None:
        if self.inbox is None or not entries:
            return
        with contextlib.suppress(Exception):
            await asyncio.shield(self.inbox.hand_back(kind, entries))

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    @property
    def kinds(self) -> list[str]:
        """The kinds this process serves."""
        return list(self._handlers)

    async def stop(self, grace: float) -> int:
        """Stop taking entries, wait up to `grace` seconds for running ones, hand the rest back.
        Returns how many were handed back (or, without an inbox, cut short)."""
        self._stopping = True
        try:
            return await self._drain(grace)
        finally:
            # Only now: the entries of turns that ran on during the grace period were renewed
            # all along, so no other replica took them over and ran them a second time.
            for renewer in self._renewers:
                renewer.cancel()
            if self._renewers:
                await asyncio.wait(self._renewers, timeout=1.0)
            self._renewers.clear()
            keeper, self._keeper = self._keeper, None
            if keeper is not None:
                await keeper.stop()

    async def _drain(self, grace: float) -> int:
        for loop in self._loops:
            loop.cancel()
        if self._loops:
            await asyncio.wait(self._loops, timeout=READ_WAIT + 6.0)
        self._loops.clear()
        pending = set(self._tasks)
        if not pending:
            return 0
        log.info("inbox_draining", extra={"fields": {"tasks": len(pending), "grace": grace}})
        _, still = await asyncio.wait(pending, timeout=grace)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=5.0)
        return len(still)


class ServesInbox:
    """The `BotCore` inbox methods over a core's `worker` (BotApp, and the stand-in cores of
    tests and benchmarks, whose worker has no inbox: items run in process)."""

    worker: InboxWorker

    async def enqueue(self, item: InboxItem) -> bool:
        return await self.worker.put(item)

    def serve_inbox(self, kind: str, handler: Handler) -> None:
        self.worker.serve(kind, handler)

    async def stop_inbox(self, grace: float) -> int:
        return await self.worker.stop(grace)
