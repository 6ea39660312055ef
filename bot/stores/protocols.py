"""Store protocols. Small, async and scoped: every query takes a SessionKey, PersonKey or TeamKey.

Two backends implement the durable ones (SQLite: `bot.stores.sqlite`, MongoDB:
`bot.stores.mongo`) and pass one contract suite (`tests/stores/test_store_contract.py`); two
implement the cache (Redis: `bot.stores.redis_cache`, in-process: `bot.stores.memory_cache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from bot.keys import PersonKey, SessionKey, TeamKey
from bot.stores.records import (
    Fact,
    FactSource,
    NewMessage,
    SessionState,
    StoredMessage,
    ToolCallLog,
    ToolInstall,
)


class StoreUnavailable(Exception):
    """The backing server cannot be reached; callers degrade instead of crashing."""


class ConversationStore(Protocol):
    async def append(
        self, session: SessionKey, messages: Sequence[NewMessage]
    ) -> list[StoredMessage]:
        """Append in order, assigning consecutive seq numbers atomically. Safe under concurrency."""

    async def recent(self, session: SessionKey, *, limit: int) -> list[StoredMessage]:
        """The last `limit` messages, oldest first. Cost must not grow with history length."""

    async def between(
        self, session: SessionKey, *, after_seq: int, upto_seq: int
    ) -> list[StoredMessage]:
        """Messages with after_seq < seq <= upto_seq, oldest first (for summarising)."""

    async def count(self, session: SessionKey) -> int: ...

    async def delete_speaker(self, person: PersonKey) -> int:
        """Erase every message whose `speaker` is this person, in all sessions; returns count."""

    async def sessions_of_speaker(self, person: PersonKey) -> list[str]:
        """Session ids (sorted) where this person has messages, to clean summaries drawn from
        them."""

    async def session_heads(self) -> dict[str, int]:
        """Every session's highest seq ever assigned (so work left behind by a crash, such as
        indexing, can be found at start)."""


class SessionStateStore(Protocol):
    async def get_state(self, session: SessionKey) -> SessionState | None: ...

    async def put_state(self, session: SessionKey, state: SessionState) -> bool:
        """Write if `state.version` equals the stored version (or none is stored and it is 0).

        On success the stored version becomes state.version + 1 (and state.version is updated in
        place); on conflict nothing is written and False is returned. ValueError if
        `state.session` is not `session.id`.
        """


class FactStore(Protocol):
    async def add_fact(
        self,
        person: PersonKey,
        text: str,
        *,
        source: FactSource = "user",
        session: SessionKey | None = None,
        source_ref: str | None = None,
    ) -> Fact:
        """Store a fact; the same text (ignoring case, spacing, a final full stop) for the same
        person is not stored twice: the first is returned. ValueError for empty text."""

    async def list_facts(self, person: PersonKey) -> list[Fact]:
        """Oldest first."""

    async def delete_fact(self, person: PersonKey, fact_id: str) -> bool:
        """Ids are matched case-insensitively, surrounding spaces ignored (as users type them)."""

    async def delete_all_facts(self, person: PersonKey) -> int: ...


class ToolInstallStore(Protocol):
    async def install(
        self, team: TeamKey, pack: str, config: dict[str, str], *, by: str
    ) -> ToolInstall:
        """Install or replace the config of a pack in this team."""

    async def remove(self, team: TeamKey, pack: str) -> bool: ...

    async def installed(self, team: TeamKey) -> list[ToolInstall]: ...


class ToolCallLogStore(Protocol):
    async def log_call(self, session: SessionKey, record: ToolCallLog) -> None:
        """Kept 7 days (a TTL index in MongoDB, a purge on write in SQLite). ValueError if
        `record.session` is not `session.id`."""

    async def calls(self, session: SessionKey, *, limit: int = 100) -> list[ToolCallLog]:
        """The latest `limit` calls of the last 7 days, oldest first."""

    async def delete_speaker_calls(self, person: PersonKey) -> int: ...


class Store(
    ConversationStore,
    SessionStateStore,
    FactStore,
    ToolInstallStore,
    ToolCallLogStore,
    Protocol,
):
    """One durable backend implements all of the above. (Slack's installation documents are
    not part of it: see `bot.stores.installations`.)"""

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...

    async def compact(self) -> None:
        """Make erased data unrecoverable from files (SQLite: WAL checkpoint; no-op elsewhere)."""


class Cache(Protocol):
    """Hot state with TTLs, de-duplication and short locks. Losing it loses no durable data."""

    async def get_json(self, key: str) -> Any | None: ...

    async def set_json(self, key: str, value: Any, *, ttl: float) -> None: ...

    async def delete(self, key: str) -> None: ...

    async def set_nx(self, key: str, *, ttl: float) -> bool:
        """True if this call created the key (first delivery), False if it already existed."""

    async def incr(self, keys: Sequence[str], *, ttl: float) -> list[int]:
        """Add one to each counter (created at 0 with `ttl` when missing) in one round trip;
        returns the new values in order. Rate limits count with it."""

    def lock(self, key: str, *, ttl: float, wait: float) -> AbstractAsyncContextManager[None]:
        """An expiring lock; raises `LockTimeout` if not acquired within `wait` seconds.

        In-process waiters are served in arrival order (MemoryCache, and ResilientCache which
        takes the in-process lock first); across processes (Redis) the order is not guaranteed.
        """

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...


class LockTimeout(Exception):
    """A lock could not be acquired in time."""
