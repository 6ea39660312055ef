"""One thread owns the SQLite connection; coroutines hand it work and await the result.

sqlite3 calls block, so they never run on the event loop. A single worker also serialises every
transaction, which is what makes seq allocation and optimistic checks atomic without retries.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from bot.stores.protocols import StoreUnavailable

T = TypeVar("T")

# auto_vacuum must be chosen before the first table exists; the others apply per connection.
_PRAGMAS = (
    "PRAGMA auto_vacuum=INCREMENTAL",
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA secure_delete=ON",
    "PRAGMA busy_timeout=5000",
)


class SqliteWorker:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreUnavailable(f"SQLite store {self.path} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._run, fn)

    def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            if self._conn is None:
                self._conn = self._connect()
            return fn(self._conn)
        except sqlite3.OperationalError as exc:
            if _unavailable(exc):
                raise StoreUnavailable(f"SQLite store {self.path}: {exc}") from exc
            raise

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN IMMEDIATE ourselves (see `transaction`).
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        for pragma in _PRAGMAS:
            conn.execute(pragma)
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreUnavailable(f"SQLite at {self.path} refused WAL mode (got {mode})")
        return conn

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._close_connection)
        finally:
            self._executor.shutdown(wait=False)

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()  # the last connection checkpoints and removes the WAL file
            self._conn = None


def _unavailable(exc: sqlite3.OperationalError) -> bool:
    """Locked by another process, disk full or unreadable: the store, not the query, is at fault."""
    name = getattr(exc, "sqlite_errorname", "")
    return name in _UNAVAILABLE or name.startswith("SQLITE_IOERR")


_UNAVAILABLE = {"SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_FULL", "SQLITE_CANTOPEN", "SQLITE_READONLY"}


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
