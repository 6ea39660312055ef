"""Store protocols. Small, async and scoped: every query takes a SessionKey, PersonKey or TeamKey.

Two backends implement the durable ones (SQLite: `bot.stores.sqlite`, MongoDB:
`bot.stores.mongo`) and pass one contract suite (`tests/stores/test_store_contract.py`); two
implement the cache (Redis: `bot.stores.redis_cache`, in-process: `bot.stores.memory_cache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from bot.audience import UNKNOWN_FACT
from bot.keys import PersonKey, SessionKey, TeamKey
from bot.stores.records import (
    ErasureReceipt,
    Fact,
    FactSource,
    FactTombstone,
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

    async def head(self, session: SessionKey) -> tuple[int, SessionState | None]:
        """The session's highest seq ever assigned (0: none; erasures do not lower it) and its
        state, in one round trip: what every turn reads first."""


class SessionStateStore(Protocol):
    async def get_state(self, session: SessionKey) -> SessionState | None: ...

    async def put_state(self, session: SessionKey, state: SessionState) -> bool:
        """Write if `state.version` equals the stored version (or none is stored and it is 0).

        On success the stored version becomes state.version + 1 (and state.version is updated in
        place); on conflict nothing is written and False is returned. ValueError if
        `state.session` is not `session.id`.
        """


class StaleFact(Exception):
    """The fact to close is not live any more (closed or erased meanwhile): reconcile again."""


class FactStore(Protocol):
    """Versioned per-person facts (see `Fact`). Only live versions are listed by default."""

    async def add_fact(
        self,
        person: PersonKey,
        text: str,
        *,
        key: str | None = None,
        source: FactSource = "user",
        session: SessionKey | None = None,
        source_ref: str | None = None,
        source_messages: Sequence[str] = (),
        valid_from: datetime | None = None,
        audience: str = UNKNOWN_FACT,
    ) -> Fact:
        """Store a new live fact, said at `valid_from` (now by default) where `audience` (a
        `bot.audience` id; the narrowest, the person's DMs, by default) could read it. The same
        text (ignoring case, spacing, a final full stop) as a live fact of the same person and
        audience is not stored twice: that one is returned. ValueError for empty text."""

    async def replace_fact(
        self,
        person: PersonKey,
        old_id: str,
        text: str | None,
        *,
        key: str | None = None,
        source: FactSource = "user",
        session: SessionKey | None = None,
        source_ref: str | None = None,
        source_messages: Sequence[str] = (),
        valid_from: datetime | None = None,
        audience: str = UNKNOWN_FACT,
    ) -> Fact | None:
        """Close the live fact `old_id` and, when `text` is given, write its replacement in the
        same transaction (the new version lists it in `replaces`; a reader never sees both
        live, nor neither). The replacement carries its own `audience` and `valid_from`, the
        old version is closed at that `valid_from`. Returns the new version, or None for a plain
        close (DELETE). Raises StaleFact if `old_id` is not a live fact of this person."""

    async def list_facts(
        self,
        person: PersonKey,
        *,
        history: bool = False,
        audiences: Sequence[str] | None = None,
    ) -> list[Fact]:
        """Live facts, oldest first; with `history`, every version (closed ones too). With
        `audiences`, only the facts of those audiences, filtered in the store's query (a fact
        stored without one is the narrowest, `UNKNOWN_FACT`); None: every audience."""

    async def list_user_facts(
        self,
        person: PersonKey,
        *,
        history: bool = False,
        audiences: Sequence[str] | None = None,
    ) -> list[Fact]:
        """As `list_facts`, for every scope of this person's user id on this person's platform:
        each team/guild and the DM scope (`person.team` only names one of them). Each fact's
        `person` says where it was remembered. Found by an index on (platform, user): other
        people's facts are never read. Fact ids are unique per scope, not across them."""

    async def delete_fact(self, person: PersonKey, fact_id: str) -> bool:
        """Erase a fact and the older versions it replaced. Ids are matched case-insensitively,
        surrounding spaces ignored (as users type them)."""

    async def delete_all_facts(self, person: PersonKey) -> int:
        """Erase every version of every fact of this person; returns how many versions."""


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    expires_at: float  # Unix seconds
    ours: bool  # the caller holds it


class LeaseStore(Protocol):
    async def take_lease(self, name: str, holder: str, ttl: float) -> Lease:
        """Take or renew the lease if free, expired, ours or its holder is dead; the lease as it
        now stands (`ours` False: someone else holds it)."""

    async def renew_lease(self, name: str, holder: str, ttl: float) -> bool:
        """Extend our lease; False if it is no longer ours (expired and taken)."""

    async def release_lease(self, name: str, holder: str) -> None: ...


class RetentionStore(Protocol):
    async def prune_messages(self, session: SessionKey, *, upto_seq: int, before: datetime) -> int:
        """Delete the session's messages with seq <= upto_seq created before `before` (only
        ever called with the session's consolidation checkpoint); returns the count."""

    async def prune_tool_calls(self, before: datetime) -> int:
        """Delete tool-call logs created before `before`; returns the count."""


class ReceiptStore(Protocol):
    async def add_receipt(self, receipt: ErasureReceipt) -> None:
        """Keep a deletion receipt (it holds counts, never content)."""

    async def receipts(self, person: PersonKey) -> list[ErasureReceipt]:
        """This person's receipts, oldest first."""


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


class MessageEditStore(Protocol):
    """Rewrites of stored messages and tool-call logs, for erasure (`/memory forget`, a
    platform delete or edit): find a platform message, page through a team's records, rewrite
    or delete them. Never used on the reply path."""

    async def team_messages(
        self, team: TeamKey, *, after: tuple[str, int] = ("", 0), limit: int = 500
    ) -> list[StoredMessage]:
        """A page of the team's messages (every session of `team`), ordered by (session, seq),
        strictly after the cursor (session id, seq)."""

    async def rewrite_messages(self, messages: Sequence[StoredMessage]) -> int:
        """Store these messages' `content`, `name`, `tool_calls`, `meta` and `tokens` over the
        stored ones with the same (session, seq); the speaker, role and seq never change.
        Returns how many were found and written."""

    async def delete_messages(self, session: SessionKey, seqs: Sequence[int]) -> int:
        """Erase these messages of the session; returns how many went."""

    async def find_platform_message(
        self, team: TeamKey, message_id: str, *, channel: str | None = None
    ) -> list[StoredMessage]:
        """The stored messages of `team` whose `meta.message_id` is this platform message id
        (within `channel`, in any of its threads, when given), oldest first."""

    async def team_tool_calls(self, team: TeamKey) -> list[ToolCallLog]:
        """Every tool-call log of the team still kept (7 days), oldest first."""

    async def rewrite_tool_call(self, record: ToolCallLog) -> bool:
        """Store `arguments` over the log of the same session and call id."""

    async def delete_tool_calls(self, session: SessionKey, call_ids: Sequence[str]) -> int:
        """Erase these calls' logs in the session; returns how many went."""


class TombstoneStore(Protocol):
    async def add_tombstones(self, tombstones: Sequence[FactTombstone]) -> None:
        """Keep these (a forgotten fact's digest and sources; never its text)."""

    async def tombstones(self, person: PersonKey) -> list[FactTombstone]: ...

    async def delete_tombstones(self, person: PersonKey) -> int: ...


class CompactStore(Protocol):
    async def compact(self) -> None:
        """Make erased data unrecoverable from files (SQLite: WAL checkpoint; no-op elsewhere)."""


# What each consumer takes: only the methods it calls, so a consumer's needs are read from its
# signature and a test double (or a third backend) implements only those. Only the composition
# (`bot.app.build_app`, `bot.stores.factory`) holds the whole `Store`.


class SessionStore(ConversationStore, SessionStateStore, Protocol):
    """What session memory (`bot.memory.session.SessionMemory`) needs: messages and state."""


class ToolboxStore(ToolInstallStore, ToolCallLogStore, Protocol):
    """What a team's toolbox (`bot.toolbox.ToolboxFactory`) needs: installs and the call log."""


class ConsolidationStore(
    LeaseStore,
    ConversationStore,
    SessionStateStore,
    TombstoneStore,
    RetentionStore,
    CompactStore,
    Protocol,
):
    """What the nightly consolidation (`bot.memory.consolidation.Consolidator`) needs: its
    lease, the sessions' new messages and checkpoints, tombstones (a forgotten fact is not made
    again), retention."""


class ChangeStore(
    ConversationStore,
    SessionStateStore,
    FactStore,
    MessageEditStore,
    CompactStore,
    Protocol,
):
    """What platform deletes and edits (`bot.memory.deletion.PlatformChanges`) need: find the
    message, rewrite or delete it and its turn, close facts drawn only from it."""


class ErasureStore(
    ConversationStore,
    SessionStateStore,
    FactStore,
    TombstoneStore,
    ToolCallLogStore,
    MessageEditStore,
    ReceiptStore,
    CompactStore,
    Protocol,
):
    """What `/memory forget` (`bot.memory.erasure.Eraser`) needs: every tier that can hold a
    person's words (no leases, retention or tool installs)."""


class CommandStore(ErasureStore, ToolInstallStore, Protocol):
    """What the slash commands (`bot.commands.CommandHandler`) need: `/memory` (through the
    eraser) and `/tools`."""


class Store(
    ConversationStore,
    SessionStateStore,
    FactStore,
    ReceiptStore,
    LeaseStore,
    RetentionStore,
    ToolInstallStore,
    ToolCallLogStore,
    MessageEditStore,
    TombstoneStore,
    CompactStore,
    Protocol,
):
    """One durable backend implements all of the above. (A platform's installation documents
    are not part of it: its adapter keeps them on the backend's connection.)"""

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...


class JsonKV(Protocol):
    """Small JSON values with a TTL: the primitive the cache and the durable key-value table
    (`bot.stores.kv_sqlite`) share, so the composition can hand either to the tool engine's
    idempotency marks without the stores importing the engine."""

    async def get_json(self, key: str) -> Any | None: ...

    async def set_json(self, key: str, value: Any, *, ttl: float) -> None: ...

    async def delete(self, key: str) -> None: ...


class Cache(JsonKV, Protocol):
    """Hot state with TTLs, de-duplication and short locks. Losing it loses no durable data."""

    async def set_nx(self, key: str, *, ttl: float) -> bool:
        """True if this call created the key (first delivery), False if it already existed."""

    async def incr(
        self, keys: Sequence[str], *, ttl: float, amounts: Sequence[int] | None = None
    ) -> list[int]:
        """Add one (or `amounts[i]`, which may be negative) to each counter (created at 0 with
        `ttl` when missing) in one round trip; returns the new values in order. Rate limits
        and budgets count with it."""

    def lock(
        self, key: str, *, ttl: float, wait: float, keep_alive: bool = False
    ) -> AbstractAsyncContextManager[None]:
        """An expiring lock; raises `LockTimeout` if not acquired within `wait` seconds.

        `keep_alive`: renewed every `ttl / 3` while held, so `ttl` bounds how long the lock
        outlives a holder that died (a killed process), not how long a live one may hold it.

        In-process waiters are served in arrival order (MemoryCache, and ResilientCache which
        takes the in-process lock first); across processes (Redis) the order is not guaranteed.
        """

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...


class LockTimeout(Exception):
    """A lock could not be acquired in time."""
