"""`Inbox` as a table of the embedded setup (no Redis needed), in a SQLite file of its own.

The file (`inbox.db` beside the store's `bot.db`, same pragmas: WAL, secure_delete) has its own
connection thread: with the table inside `bot.db`, every ack waited for the store's queue of turn
writes (bench_slack, 1,000 mentions 50 at a time: ack p99 377 ms, 91 events/s; inbox off 21 ms,
169 events/s).

An entry row is claimed by a consumer with a lease (`owner`, `lease_until`) that the worker
renews while it runs; a row whose lease ran out, or whose owner is a process on this host that
is gone (`bot.stores.leases.holder_is_dead`: a restarted bot takes over at once), is free again.
Only the oldest open entry of each session can be taken, so a session's entries run one at a
time in the order they were put, across every process sharing the file. `done` deletes the row
(secure_delete zeroes it); the de-duplication keys stay in `inbox_seen` for 24 hours.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from typing import Any

from bot.keys import PersonKey
from bot.stores.inbox import MAX_BODY_CHARS, SEEN_TTL, InboxEntry, InboxItem, InboxStats
from bot.stores.inbox_renew import SqliteRenewer
from bot.stores.leases import holder_is_dead
from bot.stores.sqlite_worker import SqliteWorker, transaction

INBOX_SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    session TEXT NOT NULL,
    body TEXT NOT NULL,
    enqueued_at REAL NOT NULL,
    owner TEXT,
    lease_until REAL,
    tries INTEGER NOT NULL DEFAULT 0,
    notes TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS inbox_session ON inbox (session, n);
CREATE INDEX IF NOT EXISTS inbox_kind ON inbox (kind, n);
CREATE TABLE IF NOT EXISTS inbox_seen (
    key TEXT PRIMARY KEY,
    seen_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_seen_at ON inbox_seen (seen_at);
"""

INBOX_FILENAME = "inbox.db"
POLL = 0.25  # seconds between looks at the table when nothing was put in this process
SCAN = 200  # open entries looked at per take (the heads of sessions among them are taken)


class SqliteInbox:
    def __init__(
        self, worker: SqliteWorker, *, claim_after: float = 20.0, owns_worker: bool = False
    ) -> None:
        self._db = worker
        self.claim_after = claim_after
        self._owns_worker = owns_worker
        self._wake = asyncio.Event()
        self._last_prune = 0.0

    @property
    def worker(self) -> SqliteWorker:
        """Its connection thread (durable write marks share the file: `bot.stores.kv_sqlite`)."""
        return self._db

    @classmethod
    async def open(
        cls, worker: SqliteWorker, *, claim_after: float = 20.0, owns_worker: bool = False
    ) -> SqliteInbox:
        """On a connection thread of its own (`owns_worker`: closed with the inbox), or one it
        shares (tests)."""
        await worker.call(lambda conn: conn.executescript(INBOX_SCHEMA))
        return cls(worker, claim_after=claim_after, owns_worker=owns_worker)

    async def put(self, item: InboxItem) -> str | None:
        entry_id, _ = await self._put(item, None)
        return entry_id

    async def put_and_take(
        self, item: InboxItem, consumer: str
    ) -> tuple[str | None, InboxEntry | None]:
        """In the put's own transaction, the entry is leased to `consumer` when it is its
        session's only open entry (as `take` would lease it: the same owner, lease and tries)."""
        return await self._put(item, consumer)

    async def _put(
        self, item: InboxItem, take_for: str | None
    ) -> tuple[str | None, InboxEntry | None]:
        body = json.dumps(item.body, separators=(",", ":"))
        if len(body) > MAX_BODY_CHARS:
            raise ValueError(f"inbox item body of {len(body)} characters")
        now = time.time()
        prune = now - self._last_prune > 60.0
        if prune:
            self._last_prune = now

        def run(conn: sqlite3.Connection) -> tuple[str | None, bool]:
            with transaction(conn):
                if prune:
                    conn.execute("DELETE FROM inbox_seen WHERE seen_at < ?", (now - SEEN_TTL,))
                for key in item.dedup:
                    row = conn.execute(
                        "SELECT seen_at FROM inbox_seen WHERE key = ?", (key,)
                    ).fetchone()
                    if row is not None and row[0] >= now - SEEN_TTL:
                        return None, False
                conn.executemany(
                    "INSERT OR REPLACE INTO inbox_seen (key, seen_at) VALUES (?, ?)",
                    [(key, now) for key in item.dedup],
                )
                cur = conn.execute(
                    "INSERT INTO inbox (kind, session, body, enqueued_at) VALUES (?, ?, ?, ?)",
                    (item.kind, item.session, body, now),
                )
                n = cur.lastrowid
                taken = take_for is not None and (
                    conn.execute(
                        "SELECT 1 FROM inbox WHERE session = ? AND n < ? LIMIT 1",
                        (item.session, n),
                    ).fetchone()
                    is None
                )
                if taken:
                    conn.execute(
                        "UPDATE inbox SET owner = ?, lease_until = ?, tries = 1 WHERE n = ?",
                        (take_for, now + self.claim_after, n),
                    )
                return str(n), taken

        entry_id, taken = await self._db.call(run)
        if entry_id is None:
            return None, None
        if not taken:
            self._wake.set()
            return entry_id, None
        # The body as `take` would hand it over: parsed from what was stored, not the caller's.
        entry = InboxItem(item.kind, item.session, json.loads(body), item.dedup)
        return entry_id, InboxEntry(id=entry_id, item=entry, enqueued_at=now, tries=1)

    async def take(
        self, kind: str, consumer: str, *, count: int, wait: float, fresh: bool = True
    ) -> list[InboxEntry]:
        if not fresh:
            return []  # only heads of sessions are taken: a held entry never waits for another
        deadline = time.monotonic() + wait
        while True:
            self._wake.clear()
            entries = await self._take_now(kind, consumer, count)
            remaining = deadline - time.monotonic()
            if entries or remaining <= 0:
                return entries
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=min(POLL, remaining))
            except TimeoutError:
                pass

    async def _take_now(self, kind: str, consumer: str, count: int) -> list[InboxEntry]:
        now = time.time()
        lease = now + self.claim_after

        def run(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            with transaction(conn):  # one transaction: no other process claims in between
                # The oldest open entry of each session, in order of arrival.
                heads = conn.execute(
                    "SELECT n, owner, lease_until FROM inbox AS a WHERE kind = ? AND NOT EXISTS "
                    "(SELECT 1 FROM inbox AS b WHERE b.session = a.session AND b.n < a.n) "
                    "ORDER BY n LIMIT ?",
                    (kind, SCAN),
                ).fetchall()
                dead: dict[str, bool] = {}
                taken: list[tuple[Any, ...]] = []
                for n, owner, lease_until in heads:
                    if len(taken) >= count:
                        break
                    if owner is not None and owner != consumer and (lease_until or 0) >= now:
                        if owner not in dead:
                            dead[owner] = holder_is_dead(owner)
                        if not dead[owner]:
                            continue  # a live worker holds it
                    elif owner == consumer and (lease_until or 0) >= now:
                        continue  # ours already (being handled here)
                    taken.append(
                        conn.execute(
                            "UPDATE inbox SET owner = ?, lease_until = ?, tries = tries + 1 "
                            "WHERE n = ? RETURNING n, kind, session, body, enqueued_at, tries, "
                            "notes",
                            (consumer, lease, n),
                        ).fetchone()
                    )
                return taken

        taken = await self._db.call(run)
        return [
            InboxEntry(
                id=str(n),
                item=InboxItem(kind=k, session=session, body=json.loads(body)),
                enqueued_at=float(at),
                tries=int(tries),
                notes=json.loads(notes or "{}"),
            )
            for n, k, session, body, at, tries, notes in taken
        ]

    async def ready(self, entry: InboxEntry) -> bool:
        return True  # only the oldest open entry of a session is ever taken

    async def renew(self, kind: str, consumer: str, entries: list[InboxEntry]) -> list[str]:
        if not entries:
            return []
        ids = [int(e.id) for e in entries]
        until = time.time() + self.claim_after

        def run(conn: sqlite3.Connection) -> list[str]:
            with transaction(conn):
                lost = []
                for n in ids:
                    cur = conn.execute(
                        "UPDATE inbox SET lease_until = ? WHERE n = ? AND owner = ?",
                        (until, n, consumer),
                    )
                    if cur.rowcount == 0:
                        lost.append(str(n))
                return lost

        return await self._db.call(run)

    def blocking_renewer(self) -> SqliteRenewer:
        """For a worker's lease thread (`bot.stores.inbox_renew`)."""
        return SqliteRenewer(self._db.path, self.claim_after)

    async def note(self, entry: InboxEntry, values: dict[str, Any]) -> None:
        entry.notes.update(values)
        notes = json.dumps(entry.notes, separators=(",", ":"))
        await self._db.call(
            lambda conn: conn.execute(
                "UPDATE inbox SET notes = ? WHERE n = ?", (notes, int(entry.id))
            )
        )

    async def done(self, entry: InboxEntry) -> None:
        await self._db.call(
            lambda conn: conn.execute("DELETE FROM inbox WHERE n = ?", (int(entry.id),))
        )
        self._wake.set()  # the session's next entry may be taken now

    async def hand_back(self, kind: str, entries: list[InboxEntry]) -> None:
        if not entries:
            return
        ids = [(int(e.id),) for e in entries]
        await self._db.call(
            lambda conn: conn.executemany(
                "UPDATE inbox SET owner = NULL, lease_until = NULL WHERE n = ?", ids
            )
        )

    async def stats(self, kind: str) -> InboxStats:
        row = await self._db.call(
            lambda conn: conn.execute(
                "SELECT COUNT(*), MIN(enqueued_at) FROM inbox WHERE kind = ?", (kind,)
            ).fetchone()
        )
        depth, oldest = int(row[0]), row[1]
        age = max(0.0, time.time() - float(oldest)) if oldest is not None else 0.0
        return InboxStats(depth=depth, oldest_age=age)

    async def erase_person(self, person: PersonKey) -> int:
        """Nothing here is kept per person: a handled entry's row is deleted (`done`)."""
        return 0

    async def compact(self) -> None:
        """Empty the WAL and return freed pages: a handled entry's row is zeroed by
        secure_delete, but the WAL still holds the page with the person's words until it is
        checkpointed. `/memory forget all` calls this (the inbox is one of the eraser's tiers)."""

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA incremental_vacuum").fetchall()
            row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if row is not None and row[0] != 0:
                raise sqlite3.OperationalError(f"WAL checkpoint blocked by a reader: {row}")

        await self._db.call(run)

    async def close(self) -> None:
        if self._owns_worker:
            await self._db.close()
