"""The nightly consolidation: each session's new messages become durable facts (reconciled, see
`bot.memory.reconcile`) and episodic memories (written to the memory index when one is
configured), then the session's checkpoint advances.

Guarantees, and how:
- One process at a time: a lease in the store (`LeaseStore`), renewed while running, taken over
  once its holder is dead or the lease expired. A second process reports the holder and stops.
- Idempotent: a session is only read after its checkpoint (`consolidated_upto_seq`); a second run
  over the same day finds nothing new, writes nothing and asks the model nothing.
- Resumable with the same result: a step's extraction is saved in the session state before
  anything is applied, and each applied candidate is recorded, so a run killed halfway resumes
  the same candidates in the same order (no second extraction whose answer could differ).
- Erasure wins: each candidate is applied under the session lock after checking the session's
  `erasures` counter; `/memory forget all` bumps it and drops pending work that holds the
  person's words, so nothing erased comes back.
- Facts keep where and when they were said: each candidate carries the audience of the message
  it came from and that message's time (`bot.memory.extraction`), so a fact drawn from a
  private channel or a DM is never used in a public channel, and an older statement never
  replaces a newer one whatever order the sessions are met in (`bot.memory.reconcile`).
- Bounded: sessions run `concurrency` at a time; a per-run token cap stops taking new steps
  once reached (reported, the rest waits for the next run).
- Retention only after consolidation: messages older than BOT_RETENTION_DAYS are pruned up to
  the session's checkpoint, never beyond; tool-call logs older than 7 days are pruned.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from bot.keys import PersonKey, SessionKey
from bot.memory.extraction import extract
from bot.memory.off_record import remembered
from bot.memory.reconcile import OUTCOMES, Candidate, Reconciler
from bot.memory.structured import JsonAsker
from bot.memory.tombstones import buried
from bot.model import ModelError
from bot.stores.protocols import ConsolidationStore
from bot.stores.records import PendingConsolidation, PendingMemory, SessionState, utcnow
from bot.usage.bill import billed_to, team_bill

log = logging.getLogger(__name__)

LEASE_NAME = "consolidation"
LEASE_TTL = 60.0  # seconds; renewed every third of it
CHUNK_MESSAGES = 80  # messages read per extraction step
TOOL_LOG_RETENTION = timedelta(days=7)


class MemorySink(Protocol):
    """Where consolidated episodic memories go (the memory index, via an adapter)."""

    async def write_memories(
        self, session: SessionKey, pending: PendingConsolidation, ids: list[str]
    ) -> int: ...


@dataclass
class ConsolidationReport:
    ran: bool = True
    holder: str = ""  # who holds the lease when `ran` is False
    sessions: int = 0  # sessions with new messages that were worked on
    steps: int = 0  # extraction steps (model calls)
    outcomes: Counter[str] = field(default_factory=Counter)  # ADD/UPDATE/DELETE/NOOP/REJECT
    memories: int = 0
    tokens: int = 0
    capped: bool = False  # the token cap stopped the run early
    lost_lease: bool = False
    pruned_messages: int = 0
    pruned_tool_calls: int = 0
    failures: int = 0  # sessions left for the next run after an error
    duration_s: float = 0.0
    # A session's report: the run's, whose tokens count towards the cap with this one's.
    run_tokens: ConsolidationReport | None = field(default=None, repr=False)

    def total_tokens(self) -> int:
        return self.tokens + (self.run_tokens.tokens if self.run_tokens is not None else 0)

    def merge(self, other: ConsolidationReport) -> None:
        """Add a session's counts to the run's."""
        self.sessions += other.sessions
        self.steps += other.steps
        self.outcomes.update(other.outcomes)
        self.memories += other.memories
        self.tokens += other.tokens
        self.capped = self.capped or other.capped
        self.failures += other.failures

    def as_fields(self) -> dict[str, Any]:
        return {
            "ran": self.ran,
            "sessions": self.sessions,
            "steps": self.steps,
            **{o.lower(): self.outcomes.get(o, 0) for o in OUTCOMES},
            "memories": self.memories,
            "tokens": self.tokens,
            "capped": self.capped,
            "pruned_messages": self.pruned_messages,
            "pruned_tool_calls": self.pruned_tool_calls,
            "failures": self.failures,
            "duration_s": round(self.duration_s, 3),
        }


class Progress(Protocol):
    def start(self, sessions: int) -> None: ...

    def step(self, session_id: str, report: ConsolidationReport) -> None: ...


LockSession = Callable[[SessionKey], AbstractAsyncContextManager[None]]


class _Erased(Exception):
    """The session was erased from while this step ran: start the step again."""


class Consolidator:
    def __init__(
        self,
        store: ConsolidationStore,
        reconciler: Reconciler,
        asker: JsonAsker,
        *,
        holder: str,
        lock_session: LockSession | None = None,
        memories: MemorySink | None = None,
        concurrency: int = 4,
        max_tokens: int = 2_000_000,
        retention_days: int | None = None,
    ) -> None:
        self.store = store
        self.reconciler = reconciler
        self.asker = asker
        self.holder = holder
        self.lock_session = lock_session
        self.memories = memories
        self.concurrency = concurrency
        self.max_tokens = max_tokens
        self.retention_days = retention_days

    # --- the run -----------------------------------------------------------------------------

    async def run(self, *, progress: Progress | None = None) -> ConsolidationReport:
        started = time.perf_counter()
        lease = await self.store.take_lease(LEASE_NAME, self.holder, LEASE_TTL)
        if not lease.ours:
            log.info("consolidation_busy", extra={"fields": {"holder": lease.holder}})
            return ConsolidationReport(ran=False, holder=lease.holder)
        report = ConsolidationReport()
        stop = asyncio.Event()
        renewer = asyncio.create_task(self._renew(stop, report), name="consolidation-lease")
        try:
            heads = await self.store.session_heads()
            todo = await self._pending_sessions(heads)
            if progress is not None:
                progress.start(len(todo))
            await self._work(todo, heads, report, stop, progress)
            if not stop.is_set():
                await self._retention(heads, report)
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            with contextlib.suppress(Exception):
                await self.store.release_lease(LEASE_NAME, self.holder)
        report.duration_s = time.perf_counter() - started
        record_metrics(report)
        log.info("consolidation_done", extra={"fields": report.as_fields()})
        return report

    async def _renew(self, stop: asyncio.Event, report: ConsolidationReport) -> None:
        while True:
            await asyncio.sleep(LEASE_TTL / 3)
            try:
                ours = await self.store.renew_lease(LEASE_NAME, self.holder, LEASE_TTL)
            except Exception:
                log.warning("consolidation_lease_renew_failed")
                continue
            if not ours:
                log.warning("consolidation_lease_lost")
                report.lost_lease = True
                stop.set()
                return

    async def _pending_sessions(self, heads: dict[str, int]) -> list[str]:
        todo: list[str] = []
        for sid in sorted(heads):
            try:
                key = SessionKey.parse(sid)
            except ValueError:
                continue
            state = await self.store.get_state(key)
            done = state.consolidated_upto_seq if state else 0
            if heads[sid] > done or (state is not None and state.consolidation is not None):
                todo.append(sid)
        return todo

    async def _work(
        self,
        todo: list[str],
        heads: dict[str, int],
        report: ConsolidationReport,
        stop: asyncio.Event,
        progress: Progress | None,
    ) -> None:
        queue: asyncio.Queue[str] = asyncio.Queue()
        for sid in todo:
            queue.put_nowait(sid)

        async def worker() -> None:
            while not stop.is_set():
                try:
                    sid = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                # Each session counts into its own report, merged when it ends: with sessions
                # running concurrently, a shared running total credited one session's counts
                # to whichever finished next.
                mine = ConsolidationReport(run_tokens=report)
                try:
                    key = SessionKey.parse(sid)
                    with billed_to(team_bill(key.team_key.id)):  # the team's, nobody's turn
                        await self._session(key, heads[sid], mine, stop)
                    mine.sessions += 1
                except ModelError as err:
                    mine.failures += 1
                    log.warning(
                        "consolidation_model_error",
                        extra={"fields": {"session": sid, "kind": err.kind}},
                    )
                except Exception:
                    mine.failures += 1
                    log.exception(
                        "consolidation_session_failed", extra={"fields": {"session": sid}}
                    )
                report.merge(mine)
                if progress is not None:
                    progress.step(sid, mine)

        await asyncio.gather(*(worker() for _ in range(min(self.concurrency, len(todo)) or 1)))

    # --- one session -------------------------------------------------------------------------

    async def _session(
        self, key: SessionKey, head: int, report: ConsolidationReport, stop: asyncio.Event
    ) -> None:
        for _ in range(10_000):  # steps; bounded so a bug cannot spin forever
            if stop.is_set():
                return
            state = await self.store.get_state(key) or SessionState(session=key.id)
            pending = state.consolidation
            if pending is not None and pending.erasures != state.erasures:
                # Someone asked to be forgotten after this step read the session: what it
                # extracted may hold their words. Extract again from what is left.
                await self._update(key, _drop_pending)
                continue
            if pending is None:
                if state.consolidated_upto_seq >= head:
                    return
                if report.total_tokens() >= self.max_tokens:
                    report.capped = True
                    stop.set()
                    return
                pending = await self._extract_step(key, state, head, report)
                if pending is None:
                    continue
            try:
                await self._apply(key, pending, report)
            except _Erased:
                continue
        raise RuntimeError(f"consolidation of {key.id} did not finish")

    async def _extract_step(
        self, key: SessionKey, state: SessionState, head: int, report: ConsolidationReport
    ) -> PendingConsolidation | None:
        start = state.consolidated_upto_seq
        upto = min(head, start + CHUNK_MESSAGES)
        messages = await self.store.between(key, after_seq=start, upto_seq=upto)
        if messages and upto < head:  # end the step at a turn boundary when one is in range
            last_turn = messages[-1].turn_id
            whole = [m for m in messages if m.turn_id != last_turn]
            if whole:
                messages, upto = whole, whole[-1].seq
        extracted = await extract(
            self.asker, remembered(messages), upto_seq=upto, erasures=state.erasures
        )
        report.steps += 1 if messages else 0
        report.tokens += extracted.pending.tokens
        report.outcomes["REJECT"] += extracted.dropped
        pending = extracted.pending

        def save(current: SessionState) -> bool:
            if current.erasures != pending.erasures or current.consolidation is not None:
                return False
            if current.consolidated_upto_seq != start:
                return False
            current.consolidation = pending
            return True

        if not await self._update(key, save):
            return None  # erased or taken meanwhile: read again
        return pending

    async def _apply(
        self, key: SessionKey, pending: PendingConsolidation, report: ConsolidationReport
    ) -> None:
        for i in range(pending.applied, len(pending.facts)):
            fact = pending.facts[i]
            async with self._locked(key):
                await self._check_pending(key, pending)
                try:
                    person = _person(fact.person)
                except ValueError:
                    report.outcomes["REJECT"] += 1
                    person = None
                if person is not None and buried(
                    fact.text, fact.message, await self.store.tombstones(person)
                ):
                    report.outcomes["REJECT"] += 1  # the person asked to forget it
                elif person is not None:
                    decision = await self.reconciler.reconcile(
                        person,
                        Candidate(
                            text=fact.text,
                            key=fact.key,
                            source=fact.source,
                            session=key,
                            source_ref=f"consolidation:{fact.message}",
                            source_messages=(fact.message,) if fact.message else (),
                            said_at=fact.said_at,
                            audience=fact.audience,
                        ),
                    )
                    report.outcomes[decision.outcome] += 1
                    report.tokens += decision.tokens
                await self._mark(key, pending, applied=i + 1)
        if not pending.memories_written:
            async with self._locked(key):
                await self._check_pending(key, pending)
                if self.memories is not None and pending.memories:
                    ids = [memory_id(key, pending.upto_seq, m) for m in pending.memories]
                    report.memories += await self.memories.write_memories(key, pending, ids)
                await self._mark(key, pending, memories_written=True)

        def finish(current: SessionState) -> bool:
            if current.consolidation is None or current.erasures != pending.erasures:
                return False
            current.consolidated_upto_seq = max(current.consolidated_upto_seq, pending.upto_seq)
            current.consolidation = None
            return True

        if not await self._update(key, finish):
            raise _Erased

    async def _check_pending(self, key: SessionKey, pending: PendingConsolidation) -> None:
        current = await self.store.get_state(key)
        if (
            current is None
            or current.consolidation is None
            or current.erasures != pending.erasures
            or current.consolidation.upto_seq != pending.upto_seq
        ):
            raise _Erased

    async def _mark(
        self,
        key: SessionKey,
        pending: PendingConsolidation,
        *,
        applied: int | None = None,
        memories_written: bool | None = None,
    ) -> None:
        def mark(current: SessionState) -> bool:
            if current.consolidation is None or current.erasures != pending.erasures:
                return False
            if applied is not None:
                current.consolidation.applied = pending.applied = applied
            if memories_written is not None:
                current.consolidation.memories_written = memories_written
                pending.memories_written = memories_written
            return True

        if not await self._update(key, mark):
            raise _Erased

    async def _update(self, key: SessionKey, change: Callable[[SessionState], bool]) -> bool:
        """Read-modify-write of the session state under optimistic concurrency (summaries write
        it too). False when `change` declines."""
        for _ in range(20):
            current = await self.store.get_state(key) or SessionState(session=key.id)
            if not change(current):
                return False
            if await self.store.put_state(key, current):
                return True
        raise RuntimeError(f"session state of {key.id} kept changing")

    def _locked(self, key: SessionKey) -> AbstractAsyncContextManager[None]:
        return self.lock_session(key) if self.lock_session else _nothing()

    # --- retention ---------------------------------------------------------------------------

    async def _retention(self, heads: dict[str, int], report: ConsolidationReport) -> None:
        now = utcnow()
        report.pruned_tool_calls = await self.store.prune_tool_calls(now - TOOL_LOG_RETENTION)
        if self.retention_days is None:
            return
        cutoff = now - timedelta(days=self.retention_days)
        for sid in sorted(heads):
            try:
                key = SessionKey.parse(sid)
            except ValueError:
                continue
            state = await self.store.get_state(key)
            if state is None or state.consolidated_upto_seq <= 0:
                continue
            upto = state.consolidated_upto_seq
            if state.consolidation is not None:
                upto = min(upto, state.consolidation.upto_seq)
            report.pruned_messages += await self.store.prune_messages(
                key, upto_seq=upto, before=cutoff
            )
        if report.pruned_messages or report.pruned_tool_calls:
            await self.store.compact()


def _drop_pending(current: SessionState) -> bool:
    current.consolidation = None
    return True


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


def _person(person_id: str) -> PersonKey:
    parts = person_id.split(":")
    if len(parts) != 3:
        raise ValueError(f"not a person id: {person_id!r}")
    return PersonKey(*parts)


def memory_id(key: SessionKey, upto_seq: int, memory: PendingMemory) -> str:
    """Deterministic, so writing the same step's memories twice stores them once."""
    digest = hashlib.sha256(
        "|".join([key.id, str(upto_seq), memory.text, *memory.messages]).encode()
    ).hexdigest()[:20]
    return f"mem:{digest}"


def record_metrics(report: ConsolidationReport) -> None:
    from bot.metrics import (
        CONSOLIDATION_CANDIDATES,
        CONSOLIDATION_RUNS,
        CONSOLIDATION_SECONDS,
        CONSOLIDATION_SESSIONS,
        CONSOLIDATION_TOKENS,
    )

    CONSOLIDATION_RUNS.labels("capped" if report.capped else "ok" if report.ran else "busy").inc()
    CONSOLIDATION_SESSIONS.inc(report.sessions)
    CONSOLIDATION_TOKENS.inc(report.tokens)
    CONSOLIDATION_SECONDS.observe(report.duration_s)
    for outcome in OUTCOMES:
        CONSOLIDATION_CANDIDATES.labels(outcome).inc(report.outcomes.get(outcome, 0))
