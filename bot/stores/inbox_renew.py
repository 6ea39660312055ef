"""Lease renewal that does not wait for the event loop: blocking renewers for a thread.

A worker renews the entries it runs every `claim_after / 3` seconds. From the event loop, a loop
held by CPU work (a burst of turns, a large prompt built, a slow phase of the machine) renews too
late, the lease runs out and another replica takes the entry while its first run goes on: a
duplicate waiting to happen where the platform has no nonces. So the worker renews from a thread
of its own (`bot.inbox.LeaseKeeper`) through these renewers, which hold their own connection (a
SQLite connection to the inbox file; a synchronous Redis client): Python switches to that thread
every few milliseconds whatever the loop is doing.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any, Protocol

from bot.stores.inbox import InboxEntry


class BlockingRenewer(Protocol):
    def renew(self, kind: str, consumer: str, entries: list[InboxEntry]) -> list[str]:
        """As `Inbox.renew`, blocking: the ids no longer held by `consumer`."""

    def close(self) -> None: ...


class SqliteRenewer:
    """Renews rows of the inbox table on a connection of its own (opened in the thread)."""

    def __init__(self, path: Path, claim_after: float) -> None:
        self.path = path
        self.claim_after = claim_after
        self._conn: sqlite3.Connection | None = None

    def renew(self, kind: str, consumer: str, entries: list[InboxEntry]) -> list[str]:
        if self._conn is None:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA busy_timeout=5000")
        until = time.time() + self.claim_after
        lost: list[str] = []
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for entry in entries:
                cur = conn.execute(
                    "UPDATE inbox SET lease_until = ? WHERE n = ? AND owner = ?",
                    (until, int(entry.id), consumer),
                )
                if cur.rowcount == 0:
                    lost.append(entry.id)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return lost

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class RedisRenewer:
    """Runs the inbox's renew script with a synchronous client of its own."""

    def __init__(self, url: str, script: str, stream: Any, group: str) -> None:
        import redis

        self._client = redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=1.0)
        self._script = self._client.register_script(script)
        self._stream = stream
        self._group = group

    def renew(self, kind: str, consumer: str, entries: list[InboxEntry]) -> list[str]:
        lost = self._script(
            keys=[self._stream(kind)], args=[self._group, consumer, *(e.id for e in entries)]
        )
        return [i.decode() if isinstance(i, bytes) else str(i) for i in lost or []]

    def close(self) -> None:
        self._client.close()
