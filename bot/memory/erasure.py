"""`/memory forget all`: erase everything the bot holds about one person, in every tier, and keep
a receipt. In a DM scope (`bot.memory.speaker_facts`), where every fact of the person on the
platform is used and shown, it erases them in every scope of the platform (`forget_on_platform`).

Tiers: the person's facts (every version), their turns in stored conversations (their messages
and what the bot did and said in answer: tool calls, results, replies), the raw tool-call logs of
those turns, summary text and pinned facts drawn from them (dropped, not regenerated: a summary
mixes everyone's turns and cannot be edited reliably; later folds start a new one), long-term
memory index entries and their vectors (see `MemoryTiers`), and cached state (hot session
copies). SQLite files are then compacted (secure_delete + WAL truncated), so the
text is gone from the files too, which `bot memory audit` checks.

Turns, summaries and the nightly consolidation run concurrently with this, so each affected
session is scrubbed under its session lock (a turn in flight there finishes first and its hot
copy is dropped after it), its `erasures` counter is bumped (a summary or a consolidation that
read the session before refuses to write what it made from it), and a second pass erases
whatever such in-flight work stored meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Protocol

from bot.keys import PersonKey, SessionKey
from bot.stores import codec
from bot.stores.protocols import Store
from bot.stores.records import ErasureReceipt, SessionState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ErasureCounts:
    facts: int = 0  # fact versions
    messages: int = 0
    tool_calls: int = 0
    summaries: int = 0
    memories: int = 0  # long-term memory index entries (with their vectors)


@dataclass(frozen=True)
class PlatformErasure:
    """What `forget_on_platform` erased: totals, the scopes that held something, and one
    receipt per scope erased (the asking person's first)."""

    counts: ErasureCounts
    scopes: list[PersonKey]
    receipts: list[ErasureReceipt]


class MemoryTiers(Protocol):
    """Long-term memory beyond the durable store (the episodic index), erased per person."""

    async def erase_person(self, person: PersonKey) -> int:
        """Delete what this person took part in; returns how many entries went."""

    async def compact(self) -> None: ...


LockSession = Callable[[SessionKey], AbstractAsyncContextManager[None]]


class Eraser:
    def __init__(
        self,
        store: Store,
        *,
        lock_session: LockSession | None = None,
        on_erased: Callable[[list[str]], Awaitable[None]] | None = None,
        tiers: list[MemoryTiers] | None = None,
    ) -> None:
        self.store = store
        self.lock_session = lock_session  # the turns' per-session lock
        self.on_erased = on_erased  # drops hot caches of sessions whose data changed
        self.tiers = tiers or []

    async def forget_all(self, person: PersonKey, *, requested_by: str = "") -> ErasureReceipt:
        """Erase this one person key (one team/guild, or one DM scope) and keep a receipt."""
        started, at = time.perf_counter(), codec.now_ms()
        counts = await self._erase(person)
        await self._compact()
        return await self._receipt(person, counts, at, requested_by, _ms(started))

    async def forget_on_platform(
        self, person: PersonKey, *, requested_by: str = ""
    ) -> PlatformErasure:
        """Erase this person's user in every scope of the platform: the DM scope and every
        team/guild. The scopes are those where the user has facts, plus every team with a
        conversation on the platform (whatever else the bot holds about a person was said in a
        conversation, and the store keeps every session's head even after its messages are
        pruned); a scope where they hold nothing costs one pass of index lookups. One receipt per
        scope that held something, and always one for `person`."""
        at = codec.now_ms()
        erased: list[tuple[PersonKey, ErasureCounts, float]] = []
        for scope in await self._scopes(person):
            started = time.perf_counter()
            counts = await self._erase(scope, once_if_empty=scope != person)
            if scope == person or any(asdict(counts).values()):
                erased.append((scope, counts, _ms(started)))
        await self._compact()
        receipts = [
            await self._receipt(scope, counts, at, requested_by, ms) for scope, counts, ms in erased
        ]
        total = ErasureCounts(
            **{f: sum(asdict(c)[f] for _, c, _ in erased) for f in asdict(ErasureCounts())}
        )
        held = [scope for scope, counts, _ in erased if any(asdict(counts).values())]
        return PlatformErasure(counts=total, scopes=held, receipts=receipts)

    async def _scopes(self, person: PersonKey) -> list[PersonKey]:
        found: set[PersonKey] = set()
        for fact in await self.store.list_user_facts(person, history=True):
            with contextlib.suppress(ValueError):
                found.add(PersonKey.parse(fact.person))
        for session_id in await self.store.session_heads():
            with contextlib.suppress(ValueError):
                key = SessionKey.parse(session_id)
                if key.platform == person.platform:
                    found.add(PersonKey(person.platform, key.team, person.user))
        found.discard(person)
        return [person, *sorted(found, key=lambda p: p.id)]

    async def _erase(self, person: PersonKey, *, once_if_empty: bool = False) -> ErasureCounts:
        """Every tier, twice (the second pass takes what in-flight work stored meanwhile);
        `once_if_empty`: a scope where the first pass found nothing is not passed again (a turn
        of theirs starting there now is no different from one just after the erasure)."""
        facts = messages = calls = summaries = memories = 0
        scrubbed: set[str] = set()
        for _pass in range(2):
            sessions = await self.store.sessions_of_speaker(person)
            facts += await self.store.delete_all_facts(person)
            messages += await self.store.delete_speaker(person)
            calls += await self.store.delete_speaker_calls(person)
            for tier in self.tiers:
                memories += await tier.erase_person(person)
            if once_if_empty and not (sessions or facts or messages or calls or memories):
                break
            for session_id in sessions:
                if session_id in scrubbed:
                    continue
                try:
                    key = SessionKey.parse(session_id)
                except ValueError:
                    continue
                scrubbed.add(session_id)
                async with self._locked(key):
                    summaries += await self._scrub_session(key, person)
                    if self.on_erased is not None:
                        await self.on_erased([session_id])
        return ErasureCounts(facts, messages, calls, summaries, memories)

    async def _compact(self) -> None:
        await self.store.compact()
        for tier in self.tiers:
            await tier.compact()

    async def _receipt(
        self,
        person: PersonKey,
        counts: ErasureCounts,
        at: datetime,
        requested_by: str,
        duration_ms: float,
    ) -> ErasureReceipt:
        receipt = ErasureReceipt(
            id="r" + secrets.token_hex(6),
            person=person.id,
            requested_by=requested_by,
            requested_at=at,
            finished_at=codec.now_ms(),
            counts=asdict(counts),
            created_at=at,
        )
        await self.store.add_receipt(receipt)
        log.info(
            "memory_erased",
            extra={
                "fields": {
                    "person": person.id,
                    "receipt": receipt.id,
                    **receipt.counts,
                    "duration_ms": duration_ms,
                }
            },
        )
        return receipt

    def _locked(self, session: SessionKey) -> AbstractAsyncContextManager[None]:
        return self.lock_session(session) if self.lock_session else contextlib.nullcontext()

    async def _scrub_session(self, key: SessionKey, person: PersonKey) -> int:
        """Bump the erasure counter; drop the summary if it drew on this person. 1 if dropped."""
        for _ in range(5):  # optimistic concurrency: re-read on conflict
            state = await self.store.get_state(key) or SessionState(session=key.id)
            state.erasures += 1
            dropped = person.id in state.summary_speakers or any(
                p.speaker == person.id for p in state.pinned
            )
            pending = state.consolidation
            if pending is not None and (
                any(f.person == person.id for f in pending.facts)
                or any(person.id in m.people for m in pending.memories)
            ):
                state.consolidation = None  # holds their words: extracted again without them
            if dropped:
                state.summary = ""
                state.summary_speakers = []
                state.pinned = [p for p in state.pinned if p.speaker not in ("", person.id)]
            if await self.store.put_state(key, state):
                return int(dropped)
        raise RuntimeError(f"session state of {key.id} kept changing during an erasure")


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)


def counts_of(receipt: ErasureReceipt) -> ErasureCounts:
    return ErasureCounts(**{k: int(v) for k, v in receipt.counts.items()})
