"""Named leases in the durable store, so exactly one process runs a job (the nightly
consolidation) across every process that shares the store, Redis or not.

A lease has a holder ("host:pid:nonce") and an expiry. It is taken when free, expired, already
ours, or held by a process on this host that is no longer alive (taken over at once rather than
after the expiry); the holder renews it while it runs and releases it at the end.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from typing import TYPE_CHECKING, Any

from pymongo.errors import DuplicateKeyError

from bot.stores.protocols import Lease
from bot.stores.sqlite_worker import transaction

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from pymongo.asynchronous.collection import AsyncCollection

    from bot.stores.sqlite_worker import SqliteWorker

LEASES_SCHEMA = """
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""


def new_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


def holder_is_dead(holder: str) -> bool:
    """True only when the holder ran on this host and its process is gone."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _free(holder: str, expires_at: float, me: str, now: float) -> bool:
    return holder == me or expires_at <= now or holder_is_dead(holder)


class SqliteLeases:
    _db: SqliteWorker

    async def take_lease(self, name: str, holder: str, ttl: float) -> Lease:
        def run(conn: sqlite3.Connection) -> Lease:
            now = time.time()
            with transaction(conn):
                row = conn.execute(
                    "SELECT holder, expires_at FROM leases WHERE name = ?", (name,)
                ).fetchone()
                if row is not None and not _free(str(row[0]), float(row[1]), holder, now):
                    return Lease(name, str(row[0]), float(row[1]), False)
                conn.execute(
                    "INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                    "expires_at = excluded.expires_at",
                    (name, holder, now + ttl),
                )
                return Lease(name, holder, now + ttl, True)

        return await self._db.call(run)

    async def renew_lease(self, name: str, holder: str, ttl: float) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            with transaction(conn):
                cur = conn.execute(
                    "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ?",
                    (time.time() + ttl, name, holder),
                )
                return cur.rowcount == 1

        return await self._db.call(run)

    async def release_lease(self, name: str, holder: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, holder))

        await self._db.call(run)


class MongoLeases:
    _leases: AsyncCollection[dict[str, Any]]
    _guard: Callable[[str], AbstractContextManager[None]]

    async def take_lease(self, name: str, holder: str, ttl: float) -> Lease:
        with self._guard("take_lease"):
            for _ in range(3):
                now = time.time()
                current = await self._leases.find_one({"_id": name})
                if current is not None and not _free(
                    str(current["holder"]), float(current["expires_at"]), holder, now
                ):
                    return Lease(name, str(current["holder"]), float(current["expires_at"]), False)
                query: dict[str, Any] = {"_id": name}
                if current is not None:  # replace exactly what we judged free
                    query.update(holder=current["holder"], expires_at=current["expires_at"])
                try:
                    result = await self._leases.replace_one(
                        query, {"holder": holder, "expires_at": now + ttl}, upsert=True
                    )
                except DuplicateKeyError:
                    continue  # another process took it first: look again
                if result.matched_count or result.upserted_id is not None:
                    return Lease(name, holder, now + ttl, True)
        current = await self._leases.find_one({"_id": name}) or {}
        return Lease(
            name, str(current.get("holder", "?")), float(current.get("expires_at", 0)), False
        )

    async def renew_lease(self, name: str, holder: str, ttl: float) -> bool:
        with self._guard("renew_lease"):
            result = await self._leases.update_one(
                {"_id": name, "holder": holder}, {"$set": {"expires_at": time.time() + ttl}}
            )
        return result.matched_count == 1

    async def release_lease(self, name: str, holder: str) -> None:
        with self._guard("release_lease"):
            await self._leases.delete_one({"_id": name, "holder": holder})
