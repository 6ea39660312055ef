"""`ConnectionStore` on SQLite, in the main store's file and writer thread."""

from __future__ import annotations

import sqlite3

from bot.stores.connections import Connection, PendingSignIn
from bot.stores.sqlite_worker import SqliteWorker, transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tool_connections (
    team TEXT NOT NULL,
    person TEXT NOT NULL,
    server TEXT NOT NULL,
    issuer TEXT NOT NULL,
    tokens TEXT NOT NULL,
    connected_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (team, person, server)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tool_connections_person ON tool_connections (person);
CREATE INDEX IF NOT EXISTS tool_connections_server ON tool_connections (team, server);
CREATE TABLE IF NOT EXISTS tool_oauth_clients (
    team TEXT NOT NULL,
    server TEXT NOT NULL,
    issuer TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (team, server, issuer)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tool_signins (
    state_hash TEXT PRIMARY KEY,
    team TEXT NOT NULL,
    person TEXT NOT NULL,
    server TEXT NOT NULL,
    expires_at REAL NOT NULL,
    doc TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tool_signins_person ON tool_signins (person);
"""

_COLUMNS = "team, person, server, issuer, tokens, connected_at, updated_at"


class SqliteConnections:
    def __init__(self, worker: SqliteWorker) -> None:
        self._db = worker
        self._ready = False

    async def _schema(self) -> None:
        if not self._ready:
            await self._db.call(lambda conn: conn.executescript(_SCHEMA))
            self._ready = True

    async def put(self, conn: Connection) -> None:
        await self._schema()
        row = (
            conn.team,
            conn.person,
            conn.server,
            conn.issuer,
            conn.tokens,
            conn.connected_at,
            conn.updated_at,
        )
        await self._db.call(
            lambda db: db.execute(
                f"INSERT OR REPLACE INTO tool_connections ({_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        )

    async def get(self, team: str, person: str, server: str) -> Connection | None:
        await self._schema()

        def run(db: sqlite3.Connection) -> Connection | None:
            row = db.execute(
                f"SELECT {_COLUMNS} FROM tool_connections "
                "WHERE team = ? AND person = ? AND server = ?",
                (team, person, server),
            ).fetchone()
            return Connection(*row) if row else None

        return await self._db.call(run)

    async def of_person(self, team: str, person: str) -> list[Connection]:
        await self._schema()

        def run(db: sqlite3.Connection) -> list[Connection]:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM tool_connections WHERE team = ? AND person = ? "
                "ORDER BY server",
                (team, person),
            ).fetchall()
            return [Connection(*r) for r in rows]

        return await self._db.call(run)

    async def remove(self, team: str, person: str, server: str) -> bool:
        await self._schema()

        def run(db: sqlite3.Connection) -> bool:
            with transaction(db):
                db.execute(
                    "DELETE FROM tool_signins WHERE team = ? AND person = ? AND server = ?",
                    (team, person, server),
                )
                cur = db.execute(
                    "DELETE FROM tool_connections WHERE team = ? AND person = ? AND server = ?",
                    (team, person, server),
                )
                return cur.rowcount > 0

        return await self._db.call(run)

    async def remove_server(self, team: str, server: str) -> int:
        await self._schema()

        def run(db: sqlite3.Connection) -> int:
            with transaction(db):
                db.execute("DELETE FROM tool_signins WHERE team = ? AND server = ?", (team, server))
                db.execute(
                    "DELETE FROM tool_oauth_clients WHERE team = ? AND server = ?", (team, server)
                )
                cur = db.execute(
                    "DELETE FROM tool_connections WHERE team = ? AND server = ?", (team, server)
                )
                return int(cur.rowcount)

        return await self._db.call(run)

    async def forget_person(self, person: str) -> int:
        await self._schema()

        def run(db: sqlite3.Connection) -> int:
            with transaction(db):
                db.execute("DELETE FROM tool_signins WHERE person = ?", (person,))
                cur = db.execute("DELETE FROM tool_connections WHERE person = ?", (person,))
                return int(cur.rowcount)

        return await self._db.call(run)

    async def put_client(self, team: str, server: str, issuer: str, sealed: str) -> None:
        await self._schema()
        await self._db.call(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO tool_oauth_clients (team, server, issuer, doc) "
                "VALUES (?, ?, ?, ?)",
                (team, server, issuer, sealed),
            )
        )

    async def get_client(self, team: str, server: str, issuer: str) -> str | None:
        await self._schema()

        def run(db: sqlite3.Connection) -> str | None:
            row = db.execute(
                "SELECT doc FROM tool_oauth_clients WHERE team = ? AND server = ? AND issuer = ?",
                (team, server, issuer),
            ).fetchone()
            return str(row[0]) if row else None

        return await self._db.call(run)

    async def add_pending(self, pending: PendingSignIn) -> None:
        await self._schema()
        row = (
            pending.state_hash,
            pending.team,
            pending.person,
            pending.server,
            pending.expires_at,
            pending.doc,
        )

        def run(db: sqlite3.Connection) -> None:
            with transaction(db):
                # expired sign-ins are swept as new ones arrive, so the table stays small
                db.execute(
                    "DELETE FROM tool_signins WHERE expires_at < ?", (pending.expires_at - 86400,)
                )
                db.execute(
                    "INSERT INTO tool_signins (state_hash, team, person, server, expires_at, doc) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    row,
                )

        await self._db.call(run)

    async def peek_pending(self, state_hash: str, now: float) -> PendingSignIn | None:
        await self._schema()

        def run(db: sqlite3.Connection) -> PendingSignIn | None:
            row = db.execute(
                "SELECT state_hash, team, person, server, expires_at, doc FROM tool_signins "
                "WHERE state_hash = ? AND expires_at >= ?",
                (state_hash, now),
            ).fetchone()
            return PendingSignIn(*row) if row else None

        return await self._db.call(run)

    async def take_pending(self, state_hash: str, now: float) -> PendingSignIn | None:
        await self._schema()

        def run(db: sqlite3.Connection) -> PendingSignIn | None:
            with transaction(db):
                row = db.execute(
                    "DELETE FROM tool_signins WHERE state_hash = ? "
                    "RETURNING state_hash, team, person, server, expires_at, doc",
                    (state_hash,),
                ).fetchone()
            if row is None or float(row[4]) < now:
                return None
            return PendingSignIn(*row)

        return await self._db.call(run)
