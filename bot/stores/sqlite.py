"""The embedded store: one SQLite file in WAL mode, so the bot runs with no servers at all.

Records are stored as JSON documents (with `schema_version`) next to the few columns the
queries filter and sort on. `secure_delete` zeroes erased rows in place, and `compact()`
truncates the WAL, so `/memory forget all` leaves no readable copy in the files.

The data directory is created 0700. Other parts keep tables of their own in this file on the
store's connection (`worker`): the inbox, a platform's installations (Slack's, in its adapter).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.keys import PersonKey, SessionKey, TeamKey
from bot.stores import codec
from bot.stores.leases import LEASES_SCHEMA, SqliteLeases
from bot.stores.records import (
    NewMessage,
    SessionState,
    StoredMessage,
    ToolCallLog,
    ToolInstall,
    utcnow,
)
from bot.stores.retention import SqliteRetention
from bot.stores.sqlite_edits import EDITS_SCHEMA, SqliteEdits
from bot.stores.sqlite_facts import SqliteFacts, migrate_facts
from bot.stores.sqlite_worker import SqliteWorker, transaction

DB_FILENAME = "bot.db"
TOOL_CALL_RETENTION = timedelta(days=7)

# `sessions.last_seq` is the seq counter: it survives erasures, so a seq is never reused and a
# summary's `summary_upto_seq` keeps meaning the same messages.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    speaker TEXT NOT NULL,
    doc TEXT NOT NULL,
    UNIQUE (session, seq)
);
CREATE INDEX IF NOT EXISTS messages_speaker ON messages (speaker, session);
CREATE TABLE IF NOT EXISTS session_state (
    session TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tool_installs (
    team TEXT NOT NULL,
    pack TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (team, pack)
);
CREATE TABLE IF NOT EXISTS tool_calls (
    n INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    speaker TEXT NOT NULL,
    created_at REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tool_calls_session ON tool_calls (session, created_at);
CREATE INDEX IF NOT EXISTS tool_calls_speaker ON tool_calls (speaker);
CREATE INDEX IF NOT EXISTS tool_calls_created ON tool_calls (created_at);
"""


def _epoch(moment: datetime) -> float:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _messages(rows: list[tuple[str]]) -> list[StoredMessage]:
    return [codec.load_json(StoredMessage, row[0]) for row in rows]


class SqliteStore(SqliteFacts, SqliteLeases, SqliteRetention, SqliteEdits):
    """`Store` over one SQLite file; open with `await SqliteStore.open(path)`. Facts: see
    `bot.stores.sqlite_facts`."""

    def __init__(self, worker: SqliteWorker) -> None:
        self._db = worker

    @classmethod
    async def open(cls, path: Path) -> SqliteStore:
        """Open (creating if needed) the database file at `path`, e.g. `data_dir / "bot.db"`."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        store = cls(SqliteWorker(path))
        try:
            await store._db.call(lambda conn: conn.executescript(_SCHEMA))
            await store._db.call(migrate_facts)
            await store._db.call(lambda conn: conn.executescript(LEASES_SCHEMA))
            await store._db.call(lambda conn: conn.executescript(EDITS_SCHEMA))
        except BaseException:
            await store.close()
            raise
        return store

    @property
    def path(self) -> Path:
        return self._db.path

    @property
    def worker(self) -> SqliteWorker:
        """The connection thread, shared with tables of other parts kept in this file (the
        inbox), so each of their transactions is as atomic as the store's own."""
        return self._db

    # --- conversation ------------------------------------------------------------------------

    async def append(
        self, session: SessionKey, messages: Sequence[NewMessage]
    ) -> list[StoredMessage]:
        if not messages:
            return []
        sid, now = session.id, codec.now_ms()

        def run(conn: sqlite3.Connection) -> list[StoredMessage]:
            with transaction(conn):
                row = conn.execute(
                    "INSERT INTO sessions (session, last_seq) VALUES (?, ?) "
                    "ON CONFLICT (session) DO UPDATE SET last_seq = last_seq + excluded.last_seq "
                    "RETURNING last_seq",
                    (sid, len(messages)),
                ).fetchone()
                first = int(row[0]) - len(messages) + 1
                stored = [
                    StoredMessage(**m.model_dump(), session=sid, seq=first + i, created_at=now)
                    for i, m in enumerate(messages)
                ]
                conn.executemany(
                    "INSERT INTO messages (session, seq, speaker, doc) VALUES (?, ?, ?, ?)",
                    [(sid, m.seq, m.speaker, codec.dump_json(m)) for m in stored],
                )
            return stored

        return await self._db.call(run)

    async def recent(self, session: SessionKey, *, limit: int) -> list[StoredMessage]:
        if limit <= 0:
            return []
        sid = session.id

        def run(conn: sqlite3.Connection) -> list[StoredMessage]:
            rows = conn.execute(
                "SELECT doc FROM messages WHERE session = ? ORDER BY seq DESC LIMIT ?",
                (sid, limit),
            ).fetchall()
            return _messages(rows[::-1])

        return await self._db.call(run)

    async def between(
        self, session: SessionKey, *, after_seq: int, upto_seq: int
    ) -> list[StoredMessage]:
        sid = session.id

        def run(conn: sqlite3.Connection) -> list[StoredMessage]:
            rows = conn.execute(
                "SELECT doc FROM messages WHERE session = ? AND seq > ? AND seq <= ? ORDER BY seq",
                (sid, after_seq, upto_seq),
            ).fetchall()
            return _messages(rows)

        return await self._db.call(run)

    async def count(self, session: SessionKey) -> int:
        sid = session.id

        def run(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT COUNT(*) FROM messages WHERE session = ?", (sid,))
            return int(row.fetchone()[0])

        return await self._db.call(run)

    async def delete_speaker(self, person: PersonKey) -> int:
        pid = person.id

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                return conn.execute("DELETE FROM messages WHERE speaker = ?", (pid,)).rowcount

        return await self._db.call(run)

    async def sessions_of_speaker(self, person: PersonKey) -> list[str]:
        pid = person.id

        def run(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT DISTINCT session FROM messages WHERE speaker = ? ORDER BY session",
                (pid,),
            ).fetchall()
            return [str(r[0]) for r in rows]

        return await self._db.call(run)

    async def session_heads(self) -> dict[str, int]:
        def run(conn: sqlite3.Connection) -> dict[str, int]:
            rows = conn.execute("SELECT session, last_seq FROM sessions").fetchall()
            return {str(sid): int(seq) for sid, seq in rows}

        return await self._db.call(run)

    # --- session state -----------------------------------------------------------------------

    async def get_state(self, session: SessionKey) -> SessionState | None:
        sid = session.id

        def run(conn: sqlite3.Connection) -> SessionState | None:
            row = conn.execute("SELECT doc FROM session_state WHERE session = ?", (sid,))
            found = row.fetchone()
            return None if found is None else codec.load_json(SessionState, found[0])

        return await self._db.call(run)

    async def head(self, session: SessionKey) -> tuple[int, SessionState | None]:
        sid = session.id

        def run(conn: sqlite3.Connection) -> tuple[int, SessionState | None]:
            last_seq, doc = conn.execute(
                "SELECT (SELECT last_seq FROM sessions WHERE session = ?), "
                "(SELECT doc FROM session_state WHERE session = ?)",
                (sid, sid),
            ).fetchone()
            state = None if doc is None else codec.load_json(SessionState, doc)
            return int(last_seq or 0), state

        return await self._db.call(run)

    async def put_state(self, session: SessionKey, state: SessionState) -> bool:
        if state.session != session.id:
            raise ValueError(f"state of {state.session!r} put under session {session.id!r}")
        expected = state.version
        new = state.model_copy(update={"version": expected + 1, "updated_at": codec.now_ms()})
        doc = codec.dump_json(new)

        def run(conn: sqlite3.Connection) -> bool:
            with transaction(conn):
                if expected == 0:
                    cur = conn.execute(
                        "INSERT INTO session_state (session, version, doc) VALUES (?, ?, ?) "
                        "ON CONFLICT (session) DO NOTHING",
                        (new.session, new.version, doc),
                    )
                else:
                    cur = conn.execute(
                        "UPDATE session_state SET version = ?, doc = ? "
                        "WHERE session = ? AND version = ?",
                        (new.version, doc, new.session, expected),
                    )
                return cur.rowcount == 1

        written = await self._db.call(run)
        if written:
            state.version, state.updated_at = new.version, new.updated_at
        return written

    # --- tool installs -----------------------------------------------------------------------

    async def install(
        self, team: TeamKey, pack: str, config: dict[str, str], *, by: str
    ) -> ToolInstall:
        record = ToolInstall(
            team=team.id, pack=pack, config=dict(config), installed_by=by, created_at=codec.now_ms()
        )
        doc = codec.dump_json(record)

        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(
                    "INSERT INTO tool_installs (team, pack, doc) VALUES (?, ?, ?) "
                    "ON CONFLICT (team, pack) DO UPDATE SET doc = excluded.doc",
                    (record.team, pack, doc),
                )

        await self._db.call(run)
        return record

    async def remove(self, team: TeamKey, pack: str) -> bool:
        tid = team.id

        def run(conn: sqlite3.Connection) -> bool:
            with transaction(conn):
                cur = conn.execute(
                    "DELETE FROM tool_installs WHERE team = ? AND pack = ?", (tid, pack)
                )
                return cur.rowcount > 0

        return await self._db.call(run)

    async def installed(self, team: TeamKey) -> list[ToolInstall]:
        tid = team.id

        def run(conn: sqlite3.Connection) -> list[ToolInstall]:
            rows = conn.execute(
                "SELECT doc FROM tool_installs WHERE team = ? ORDER BY pack", (tid,)
            ).fetchall()
            return [codec.load_json(ToolInstall, r[0]) for r in rows]

        return await self._db.call(run)

    # --- tool call logs ----------------------------------------------------------------------

    async def log_call(self, session: SessionKey, record: ToolCallLog) -> None:
        if record.session != session.id:
            raise ValueError(f"tool call of {record.session!r} logged under {session.id!r}")
        row = (record.session, record.speaker, _epoch(record.created_at), codec.dump_json(record))
        cutoff = _epoch(utcnow() - TOOL_CALL_RETENTION)

        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute("DELETE FROM tool_calls WHERE created_at < ?", (cutoff,))
                conn.execute(
                    "INSERT INTO tool_calls (session, speaker, created_at, doc) "
                    "VALUES (?, ?, ?, ?)",
                    row,
                )

        await self._db.call(run)

    async def calls(self, session: SessionKey, *, limit: int = 100) -> list[ToolCallLog]:
        if limit <= 0:
            return []
        sid, cutoff = session.id, _epoch(utcnow() - TOOL_CALL_RETENTION)

        def run(conn: sqlite3.Connection) -> list[ToolCallLog]:
            rows = conn.execute(
                "SELECT doc FROM tool_calls WHERE session = ? AND created_at >= ? "
                "ORDER BY created_at DESC, n DESC LIMIT ?",
                (sid, cutoff, limit),
            ).fetchall()
            return [codec.load_json(ToolCallLog, r[0]) for r in reversed(rows)]

        return await self._db.call(run)

    async def delete_speaker_calls(self, person: PersonKey) -> int:
        pid = person.id

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                return conn.execute("DELETE FROM tool_calls WHERE speaker = ?", (pid,)).rowcount

        return await self._db.call(run)

    # --- lifecycle ---------------------------------------------------------------------------

    async def ping(self) -> bool:
        try:
            return await self._db.call(lambda c: c.execute("SELECT 1").fetchone() == (1,))
        except Exception:
            return False

    async def close(self) -> None:
        await self._db.close()

    async def compact(self) -> None:
        """Return freed pages and empty the WAL, so erased rows survive in neither file."""

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA incremental_vacuum").fetchall()  # each row frees a page
            row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if row is not None and row[0] != 0:
                raise sqlite3.OperationalError(f"WAL checkpoint blocked by a reader: {row}")

        await self._db.call(run)
