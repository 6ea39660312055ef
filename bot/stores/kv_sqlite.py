"""Small JSON values with a TTL in a SQLite file: where write tools' idempotency marks live when
there is no Redis, so they survive the process.

Without Redis the durable inbox re-runs a turn cut short by a crash in the restarted process;
the executor's "started" mark and recorded results (`tools.idempotency`) must outlive the first
process for that re-run to replay a write instead of acting again. It is a `JsonKV` (which the
executor's `IdempotencyCache` protocol matches); expired rows are purged as others are written.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from bot.stores.sqlite_worker import SqliteWorker

KV_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS kv_expires ON kv (expires_at);
"""
PURGE_EVERY = 60.0


class SqliteKV:
    def __init__(self, worker: SqliteWorker) -> None:
        self._db = worker
        self._next_purge = 0.0

    @classmethod
    async def open(cls, worker: SqliteWorker) -> SqliteKV:
        await worker.call(lambda conn: conn.executescript(KV_SCHEMA))
        return cls(worker)

    async def get_json(self, key: str) -> Any | None:
        now = time.time()
        row = await self._db.call(
            lambda conn: conn.execute(
                "SELECT value FROM kv WHERE key = ? AND expires_at > ?", (key, now)
            ).fetchone()
        )
        return None if row is None else json.loads(row[0])

    async def set_json(self, key: str, value: Any, *, ttl: float) -> None:
        now = time.time()
        payload = json.dumps(value, separators=(",", ":"))
        purge = now >= self._next_purge
        if purge:
            self._next_purge = now + PURGE_EVERY

        def run(conn: sqlite3.Connection) -> None:
            if purge:
                conn.execute("DELETE FROM kv WHERE expires_at <= ?", (now,))
            conn.execute(
                "INSERT OR REPLACE INTO kv (key, value, expires_at) VALUES (?, ?, ?)",
                (key, payload, now + ttl),
            )

        await self._db.call(run)

    async def delete(self, key: str) -> None:
        await self._db.call(lambda conn: conn.execute("DELETE FROM kv WHERE key = ?", (key,)))
