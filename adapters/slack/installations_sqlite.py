"""Slack's installations and OAuth states in the embedded store's SQLite file.

Runs on the store's own connection thread (`SqliteStore.worker`), so its writes share the
store's transactions, `secure_delete` and WAL: an uninstall followed by the store's `compact()`
leaves no copy of the tokens in the files. Tables are created on first use, with the names and
columns of earlier versions, where the store itself created them.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from adapters.slack.installations import (
    DOCS,
    STATES,
    InstallationDoc,
    check_installation_key,
    check_oauth_state,
)
from bot.stores import codec
from bot.stores.sqlite_worker import SqliteWorker, transaction

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {DOCS} (
    enterprise_id TEXT NOT NULL,
    team_id TEXT NOT NULL,
    name TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (enterprise_id, team_id, name)
);
CREATE TABLE IF NOT EXISTS {STATES} (
    state TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS {STATES}_expires ON {STATES} (expires_at);
"""


class SqliteInstallations:
    """`InstallationDocStore` on an open SQLite store's worker."""

    def __init__(self, worker: SqliteWorker) -> None:
        self._db = worker
        self._ready = False

    async def ensure_schema(self) -> None:
        """Create the tables if they are missing (idempotent; also done on first use)."""
        if not self._ready:
            await self._db.call(lambda conn: conn.executescript(SCHEMA))
            self._ready = True

    async def get_doc(self, enterprise_id: str, team_id: str, name: str) -> dict[str, Any] | None:
        check_installation_key(enterprise_id, team_id, name)
        await self.ensure_schema()
        key = (enterprise_id, team_id, name)

        def run(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                f"SELECT doc FROM {DOCS} WHERE enterprise_id = ? AND team_id = ? AND name = ?",
                key,
            ).fetchone()
            return None if row is None else str(row[0])

        raw = await self._db.call(run)
        return None if raw is None else codec.load_json(InstallationDoc, raw).doc

    async def put_doc(
        self, enterprise_id: str, team_id: str, name: str, doc: dict[str, Any]
    ) -> None:
        check_installation_key(enterprise_id, team_id, name)
        record = InstallationDoc(
            enterprise_id=enterprise_id,
            team_id=team_id,
            name=name,
            doc=doc,
            updated_at=codec.now_ms(),
        )
        row = (enterprise_id, team_id, name, codec.dump_json(record))
        await self.ensure_schema()

        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(
                    f"INSERT INTO {DOCS} (enterprise_id, team_id, name, doc) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (enterprise_id, team_id, name) "
                    "DO UPDATE SET doc = excluded.doc",
                    row,
                )

        await self._db.call(run)

    async def delete_docs(self, enterprise_id: str, team_id: str, name: str | None = None) -> int:
        check_installation_key(enterprise_id, team_id, name)
        await self.ensure_schema()
        sql = f"DELETE FROM {DOCS} WHERE enterprise_id = ? AND team_id = ?"
        params: tuple[str, ...] = (enterprise_id, team_id)
        if name is not None:
            sql, params = sql + " AND name = ?", (*params, name)

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                return conn.execute(sql, params).rowcount

        return await self._db.call(run)

    async def put_oauth_state(self, state: str, expires_at: float) -> None:
        check_oauth_state(state, expires_at)
        await self.ensure_schema()
        now = time.time()

        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(f"DELETE FROM {STATES} WHERE expires_at <= ?", (now,))
                conn.execute(
                    f"INSERT INTO {STATES} (state, expires_at) VALUES (?, ?) "
                    "ON CONFLICT (state) DO UPDATE SET expires_at = excluded.expires_at",
                    (state, expires_at),
                )

        await self._db.call(run)

    async def consume_oauth_state(self, state: str) -> bool:
        if not isinstance(state, str) or not state:
            return False
        await self.ensure_schema()

        def run(conn: sqlite3.Connection) -> float | None:
            with transaction(conn):
                rows = conn.execute(
                    f"DELETE FROM {STATES} WHERE state = ? RETURNING expires_at", (state,)
                ).fetchall()
            return float(rows[0][0]) if rows else None

        expires_at = await self._db.call(run)
        return expires_at is not None and expires_at > time.time()
