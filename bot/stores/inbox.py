"""The durable inbox: accepted platform events wait here between the ack and the turn.

An adapter acks an event only after it is written here, and a worker (`bot.inbox.InboxWorker`)
takes it from here, so a process that dies after the ack loses nothing: its entries are taken
over by another worker. Two backends pass one contract suite
(`tests/stores/test_inbox_contract.py`):

- Redis Streams (`bot.stores.inbox_redis`), shared by every replica: one stream per kind and a
  consumer group; a dead consumer's entries are claimed with XAUTOCLAIM after an idle time.
- A table in the embedded SQLite store (`bot.stores.inbox_sqlite`), claimed with a lease.

Entries of one session run one at a time in the order they were put (`ready`), whichever worker
holds them; an item whose de-duplication key was put in the last 24 hours is refused (`put`
returns None), which is how a platform's re-delivery of an event is dropped at the ack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

SEEN_TTL = 24 * 3600.0  # how long a de-duplication key is remembered
MAX_BODY_CHARS = 256 * 1024  # an item's JSON body; adapters bound what they put in


@dataclass(frozen=True, slots=True)
class InboxItem:
    """What an adapter puts in: `kind` names the handler (and the stream), `session` the
    conversation whose order it keeps; `body` is JSON for the handler (never a token)."""

    kind: str
    session: str
    body: dict[str, Any]
    dedup: tuple[str, ...] = ()


@dataclass(slots=True)
class InboxEntry:
    """One stored item as a worker holds it. `tries` counts deliveries, this one included;
    `notes` is what earlier attempts recorded (`Inbox.note`), e.g. the reply already posted."""

    id: str
    item: InboxItem
    enqueued_at: float  # Unix seconds
    tries: int = 1
    seq: int = 0  # the item's place in its session (Redis); 0 where the backend orders by id
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InboxStats:
    depth: int  # entries not done (waiting or held)
    oldest_age: float  # seconds since the oldest of them was put (0 when empty)


class Inbox(Protocol):
    async def put(self, item: InboxItem) -> str | None:
        """Store the item durably; its entry id, or None when one of its `dedup` keys was put in
        the last 24 hours (the item is then not stored). ValueError for an oversized body."""

    async def put_and_take(
        self, item: InboxItem, consumer: str
    ) -> tuple[str | None, InboxEntry | None]:
        """`put`, and where the backend can do it in the same step, the new entry taken for
        `consumer` when nothing of its session is open before it: the worker that accepted an
        event runs it without another round trip. Returns (`put`'s answer, the entry taken or
        None: then it waits for `take` like any other)."""

    async def take(
        self, kind: str, consumer: str, *, count: int, wait: float, fresh: bool = True
    ) -> list[InboxEntry]:
        """Up to `count` entries of `kind` for `consumer`, waiting up to `wait` seconds for one:
        new entries, and entries whose holder stopped renewing them for `claim_after` seconds
        (or is known dead), which are taken over with `tries` incremented. `fresh=False`: only
        such take-overs (a worker whose slots are full may still need its entries'
        predecessors, held by a replica that died)."""

    async def ready(self, entry: InboxEntry) -> bool:
        """True when every entry put before this one in its session is done."""

    async def renew(self, kind: str, consumer: str, entries: list[InboxEntry]) -> list[str]:
        """Tell the inbox these entries are still being worked on (a long turn); returns the ids
        that are no longer this consumer's (taken over meanwhile)."""

    async def note(self, entry: InboxEntry, values: dict[str, Any]) -> None:
        """Merge `values` into the entry's notes (kept with it until it is done)."""

    async def done(self, entry: InboxEntry) -> None:
        """The entry is handled: remove it (its de-duplication keys stay for 24 hours)."""

    async def hand_back(self, kind: str, entries: list[InboxEntry]) -> None:
        """Give entries back unfinished (shutdown): any worker may take them at once."""

    async def stats(self, kind: str) -> InboxStats: ...

    async def close(self) -> None: ...
