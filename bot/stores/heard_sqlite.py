"""The heard-messages record in its own SQLite file (`heard.db` next to `bot.db`).

Its own writer thread: the flushes of what the bot hears in busy channels never queue behind
a turn's writes. `secure_delete` (the worker's pragma) and `compact()` (WAL truncated) make an
erased record unreadable from the files, as in the main store.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bot.messages import HeardMessage
from bot.stores.heard import MAX_AGE, MAX_TOTAL, PER_PLACE, Mark, page_key
from bot.stores.sqlite_worker import SqliteWorker, transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS heard (
    n INTEGER PRIMARY KEY,
    team TEXT NOT NULL,
    channel TEXT NOT NULL,
    thread TEXT NOT NULL,
    message_id TEXT NOT NULL,
    author TEXT NOT NULL,
    bot INTEGER NOT NULL,
    audience TEXT NOT NULL,
    at REAL NOT NULL,
    pkey TEXT NOT NULL,
    stored REAL NOT NULL,
    doc TEXT NOT NULL,
    UNIQUE (team, channel, message_id)
);
CREATE INDEX IF NOT EXISTS heard_place ON heard (team, channel, thread, at);
CREATE INDEX IF NOT EXISTS heard_author ON heard (team, author);
CREATE INDEX IF NOT EXISTS heard_team_id ON heard (team, message_id);
CREATE INDEX IF NOT EXISTS heard_stored ON heard (stored);
CREATE TABLE IF NOT EXISTS heard_marks (
    team TEXT NOT NULL,
    channel TEXT NOT NULL,
    thread TEXT NOT NULL,
    since REAL NOT NULL,
    PRIMARY KEY (team, channel, thread)
) WITHOUT ROWID;
"""
_COLUMNS = "team, channel, thread, message_id, author, bot, audience, at, doc"


def _team(platform: str, team: str) -> str:
    return f"{platform}:{team}"


def _row(m: HeardMessage, stored: float = 0.0) -> tuple[Any, ...]:
    doc = json.dumps(
        {"text": m.text, "name": m.name, "files": list(m.files)},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return (
        _team(m.platform, m.team),
        m.channel,
        m.thread,
        m.message_id,
        m.author,
        int(m.bot),
        m.audience,
        float(m.at),
        page_key(m),
        stored,
        doc,
    )


def _record(row: Sequence[Any]) -> HeardMessage:
    team, channel, thread, message_id, author, bot, audience, at, doc = row
    platform, _, team_id = str(team).partition(":")
    body = json.loads(doc)
    return HeardMessage(
        platform=platform,
        team=team_id,
        channel=channel,
        thread=thread,
        message_id=message_id,
        author=author,
        text=str(body.get("text") or ""),
        at=float(at),
        audience=audience,
        name=body.get("name"),
        bot=bool(bot),
        files=tuple(str(f) for f in body.get("files") or ()),
    )


def _in(ids: Sequence[str]) -> str:
    return ",".join("?" * len(ids))


class SqliteHeardStore:
    """`HeardStore` over one SQLite file; open with `await SqliteHeardStore.open(path)`."""

    def __init__(self, worker: SqliteWorker) -> None:
        self._db = worker

    @classmethod
    async def open(cls, path: Path) -> SqliteHeardStore:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        made = cls(SqliteWorker(path))
        try:
            await made._db.call(lambda conn: conn.executescript(_SCHEMA))
        except BaseException:
            await made.close()
            raise
        return made

    @property
    def path(self) -> Path:
        return self._db.path

    async def add(self, records: Sequence[HeardMessage]) -> int:
        stored = time.time()
        rows = [_row(m, stored) for m in records]
        if not rows:
            return 0
        places = sorted({(r[0], r[1], r[2]) for r in rows})

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                conn.executemany(
                    "INSERT INTO heard (team, channel, thread, message_id, author, bot, audience, "
                    "at, pkey, stored, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (team, channel, message_id) DO UPDATE SET "
                    "thread = excluded.thread, author = excluded.author, bot = excluded.bot, "
                    "audience = excluded.audience, at = excluded.at, pkey = excluded.pkey, "
                    "stored = excluded.stored, doc = excluded.doc",
                    rows,
                )
                for team, channel, thread in places:
                    # One index seek: the newest record past the place's bound, if any.
                    edge = conn.execute(
                        "SELECT at, message_id FROM heard WHERE team = ? AND channel = ? "
                        "AND thread = ? ORDER BY at DESC, message_id DESC LIMIT 1 OFFSET ?",
                        (team, channel, thread, PER_PLACE),
                    ).fetchone()
                    if edge is not None:
                        conn.execute(
                            "DELETE FROM heard WHERE team = ? AND channel = ? AND thread = ? "
                            "AND (at < ? OR (at = ? AND message_id <= ?))",
                            (team, channel, thread, edge[0], edge[0], edge[1]),
                        )
            return len(rows)

        return await self._db.call(run)

    async def mark(self, marks: Sequence[Mark]) -> None:
        rows = [(_team(m.platform, m.team), m.channel, m.thread, m.since) for m in marks]
        if not rows:
            return

        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.executemany(
                    "INSERT INTO heard_marks (team, channel, thread, since) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (team, channel, thread) DO UPDATE SET "
                    "since = min(since, excluded.since)",
                    rows,
                )

        await self._db.call(run)

    async def since(self, platform: str, team: str, channel: str, thread: str) -> float | None:
        row = await self._db.call(
            lambda conn: conn.execute(
                "SELECT since FROM heard_marks WHERE team = ? AND channel = ? AND thread = ?",
                (_team(platform, team), channel, thread),
            ).fetchone()
        )
        return None if row is None else float(row[0])

    async def clear_marks(self) -> None:
        await self._db.call(lambda conn: conn.execute("DELETE FROM heard_marks"))

    async def recent(
        self,
        platform: str,
        team: str,
        channel: str,
        thread: str,
        *,
        audiences: Sequence[str],
        before: float,
        after: float,
        limit: int,
    ) -> list[HeardMessage]:
        if not audiences or limit <= 0:
            return []
        args = (_team(platform, team), channel, thread, after, before, *audiences, limit)
        rows = await self._db.call(
            lambda conn: conn.execute(
                f"SELECT {_COLUMNS} FROM heard WHERE team = ? AND channel = ? AND thread = ? "
                f"AND at > ? AND at <= ? AND audience IN ({_in(audiences)}) "
                "ORDER BY at DESC, message_id DESC LIMIT ?",
                args,
            ).fetchall()
        )
        return [_record(r) for r in reversed(rows)]

    def _where_ids(
        self, platform: str, team: str, channel: str | None, ids: Sequence[str]
    ) -> tuple[str, tuple[Any, ...]]:
        if channel is None:
            return f"team = ? AND message_id IN ({_in(ids)})", (_team(platform, team), *ids)
        return (
            f"team = ? AND channel = ? AND message_id IN ({_in(ids)})",
            (_team(platform, team), channel, *ids),
        )

    async def find(
        self, platform: str, team: str, channel: str | None, message_ids: Sequence[str]
    ) -> list[HeardMessage]:
        if not message_ids:
            return []
        where, args = self._where_ids(platform, team, channel, message_ids)
        rows = await self._db.call(
            lambda conn: conn.execute(
                f"SELECT {_COLUMNS} FROM heard WHERE {where} ORDER BY at, message_id", args
            ).fetchall()
        )
        return [_record(r) for r in rows]

    async def delete(
        self, platform: str, team: str, channel: str | None, message_ids: Sequence[str]
    ) -> int:
        if not message_ids:
            return 0
        where, args = self._where_ids(platform, team, channel, message_ids)
        return await self._db.call(
            lambda conn: conn.execute(f"DELETE FROM heard WHERE {where}", args).rowcount
        )

    async def rewrite(self, records: Sequence[HeardMessage]) -> int:
        rows = [(r[10], r[0], r[1], r[3]) for r in (_row(m) for m in records)]
        if not rows:
            return 0

        def run(conn: sqlite3.Connection) -> int:
            written = 0
            with transaction(conn):
                for row in rows:
                    written += conn.execute(
                        "UPDATE heard SET doc = ? WHERE team = ? AND channel = ? "
                        "AND message_id = ?",
                        row,
                    ).rowcount
            return written

        return await self._db.call(run)

    async def by_author(self, platform: str, team: str, author: str) -> list[HeardMessage]:
        rows = await self._db.call(
            lambda conn: conn.execute(
                f"SELECT {_COLUMNS} FROM heard WHERE team = ? AND author = ? "
                "ORDER BY at, message_id",
                (_team(platform, team), author),
            ).fetchall()
        )
        return [_record(r) for r in rows]

    async def delete_author(self, platform: str, team: str, author: str) -> int:
        return await self._db.call(
            lambda conn: (
                conn.execute(
                    "DELETE FROM heard WHERE team = ? AND author = ?",
                    (_team(platform, team), author),
                ).rowcount
            )
        )

    async def bot_records(
        self, platform: str, team: str, *, after: str = "", limit: int = 500
    ) -> list[HeardMessage]:
        rows = await self._db.call(
            lambda conn: conn.execute(
                f"SELECT {_COLUMNS} FROM heard WHERE team = ? AND bot = 1 AND pkey > ? "
                "ORDER BY pkey LIMIT ?",
                (_team(platform, team), after, limit),
            ).fetchall()
        )
        return [_record(r) for r in rows]

    async def prune(self, now: float) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                gone = conn.execute("DELETE FROM heard WHERE stored < ?", (now - MAX_AGE,)).rowcount
                edge = conn.execute(
                    "SELECT stored FROM heard ORDER BY stored DESC LIMIT 1 OFFSET ?", (MAX_TOTAL,)
                ).fetchone()
                if edge is not None:
                    gone += conn.execute("DELETE FROM heard WHERE stored <= ?", (edge[0],)).rowcount
            return int(gone)

        return await self._db.call(run)

    async def count(self) -> int:
        row = await self._db.call(
            lambda conn: conn.execute("SELECT count(*) FROM heard").fetchone()
        )
        return int(row[0])

    async def compact(self) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA incremental_vacuum").fetchall()
            row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if row is not None and row[0] != 0:
                raise sqlite3.OperationalError(f"WAL checkpoint blocked by a reader: {row}")

        await self._db.call(run)

    async def close(self) -> None:
        await self._db.close()
