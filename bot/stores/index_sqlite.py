"""The memory index in its own SQLite file (`memory.db` next to `bot.db`), for the embedded setup.

A separate file with its own writer thread: indexing in the background never queues behind the
reply path's writes. Vectors are float32 blobs. `secure_delete` and `compact()` (WAL truncate)
make deleted entries unreadable from the files, as in the main store.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bot.audience import PUBLIC
from bot.keys import PersonKey, TeamKey
from bot.stores import codec
from bot.stores.memory_index import (
    IndexChanges,
    MemoryEntry,
    MemoryScope,
    check_entry,
)
from bot.stores.sqlite_worker import SqliteWorker, transaction

INDEX_FILENAME = "memory.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_entries (
    n INTEGER PRIMARY KEY,
    team TEXT NOT NULL,
    id TEXT NOT NULL,
    place TEXT NOT NULL,
    session TEXT NOT NULL,
    private INTEGER NOT NULL,
    stamp INTEGER NOT NULL,
    embedder TEXT,
    vector BLOB,
    doc TEXT NOT NULL,
    UNIQUE (team, id)
);
CREATE INDEX IF NOT EXISTS memory_entries_place ON memory_entries (team, place, stamp);
CREATE INDEX IF NOT EXISTS memory_entries_stamp ON memory_entries (stamp);
CREATE INDEX IF NOT EXISTS memory_entries_embedder ON memory_entries (embedder);
CREATE TABLE IF NOT EXISTS memory_people (
    person TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (person, n)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS memory_entries_session ON memory_entries (team, session);
CREATE TABLE IF NOT EXISTS memory_participants (
    person TEXT NOT NULL,
    session TEXT NOT NULL,
    PRIMARY KEY (person, session)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memory_counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS memory_checkpoints (
    session TEXT PRIMARY KEY,
    seq INTEGER NOT NULL
);
"""

_DOC_EXCLUDE = {"vector", "stamp"}


def _bump(conn: sqlite3.Connection, name: str, by: int = 1) -> int:
    row = conn.execute(
        "INSERT INTO memory_counters (name, value) VALUES (?, ?) "
        "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value RETURNING value",
        (name, by),
    ).fetchone()
    return int(row[0])


def _counter(conn: sqlite3.Connection, name: str) -> int:
    row = conn.execute("SELECT value FROM memory_counters WHERE name = ?", (name,)).fetchone()
    return int(row[0]) if row else 0


def _blob(vector: list[float] | None) -> bytes | None:
    return None if vector is None else np.asarray(vector, dtype=np.float32).tobytes()


def _entry(doc: str, stamp: int, embedder: str | None, vector: bytes | None) -> MemoryEntry:
    entry = codec.load_json(MemoryEntry, doc)
    entry.stamp = stamp
    entry.embedder = embedder
    entry.vector = None if vector is None else np.frombuffer(vector, dtype=np.float32).tolist()
    return entry


_COLUMNS = "doc, stamp, embedder, vector"
_NO_AUDIENCE = " AND coalesce(json_extract(doc, '$.audience'), '') = ''"


class SqliteMemoryIndex:
    """`MemoryIndex` over one SQLite file; open with `await SqliteMemoryIndex.open(path)`."""

    def __init__(self, worker: SqliteWorker) -> None:
        self._db = worker

    @classmethod
    async def open(cls, path: Path) -> SqliteMemoryIndex:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        index = cls(SqliteWorker(path))
        try:
            await index._db.call(lambda conn: conn.executescript(_SCHEMA))
        except BaseException:
            await index.close()
            raise
        return index

    @property
    def path(self) -> Path:
        return self._db.path

    async def add(self, entries: Sequence[MemoryEntry]) -> int:
        for entry in entries:
            check_entry(entry)
        if not entries:
            return 0
        rows = [
            (
                e.team,
                e.id,
                e.place,
                e.session,
                int(e.private),
                e.embedder,
                _blob(e.vector),
                json.dumps(e.model_dump(mode="json", exclude=_DOC_EXCLUDE)),
                e.people,
            )
            for e in entries
        ]

        def run(conn: sqlite3.Connection) -> int:
            added = 0
            with transaction(conn):
                for team, eid, place, session, private, embedder, vector, doc, people in rows:
                    stamp = _bump(conn, "stamp")
                    cur = conn.execute(
                        "INSERT INTO memory_entries "
                        "(team, id, place, session, private, stamp, embedder, vector, doc) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (team, id) DO NOTHING",
                        (team, eid, place, session, private, stamp, embedder, vector, doc),
                    )
                    if cur.rowcount != 1:
                        continue
                    added += 1
                    n = cur.lastrowid
                    conn.executemany(
                        "INSERT OR IGNORE INTO memory_people (person, n) VALUES (?, ?)",
                        [(p, n) for p in people],
                    )
            return added

        return await self._db.call(run)

    async def changes(self, scope: MemoryScope, *, after: int = 0) -> IndexChanges:
        team = scope.team.id
        places = list(scope.places)
        person = scope.person.id if scope.person is not None else None
        since = after  # one writer thread: stamps land in order, no overlap needed
        where = []
        params: list[object] = [team, since]
        if places:
            where.append(f"place IN ({','.join('?' * len(places))})")
            params.extend(places)
        if person is not None:
            where.append(
                "(private = 0 AND (n IN (SELECT n FROM memory_people WHERE person = ?) "
                "OR session IN (SELECT session FROM memory_participants WHERE person = ?)))"
            )
            params.extend([person, person])
        sql = (
            f"SELECT {_COLUMNS} FROM memory_entries WHERE team = ? AND stamp > ? "
            f"AND ({' OR '.join(where)}) ORDER BY stamp"
        )

        def run(conn: sqlite3.Connection) -> IndexChanges:
            rows = conn.execute(sql, params).fetchall()
            entries = [_entry(*row) for row in rows]
            cursor = max([after, *(e.stamp for e in entries)])
            return IndexChanges(entries, cursor, _counter(conn, f"gen:{team}"))

        return await self._db.call(run)

    async def add_participants(self, team: TeamKey, session_id: str, people: Sequence[str]) -> None:
        prefix = team.id + ":"
        if not session_id.startswith(prefix) or any(not p.startswith(prefix) for p in people):
            raise ValueError(f"session and people must be in team {team.id}")
        rows = [(p, session_id) for p in dict.fromkeys(people)]

        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.executemany(
                    "INSERT OR IGNORE INTO memory_participants (person, session) VALUES (?, ?)",
                    rows,
                )

        await self._db.call(run)

    async def get(self, team: TeamKey, ids: Sequence[str]) -> list[MemoryEntry]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []

        def run(conn: sqlite3.Connection) -> list[MemoryEntry]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM memory_entries WHERE team = ? "
                f"AND id IN ({','.join('?' * len(wanted))}) ORDER BY stamp",
                [team.id, *wanted],
            ).fetchall()
            return [_entry(*row) for row in rows]

        return await self._db.call(run)

    async def set_vectors(
        self, team: TeamKey, embedder: str, vectors: dict[str, list[float]]
    ) -> int:
        if not embedder:
            raise ValueError("an embedder name is required")
        items = [(eid, _blob(v)) for eid, v in vectors.items()]

        def run(conn: sqlite3.Connection) -> int:
            updated = 0
            with transaction(conn):
                for eid, blob in items:
                    stamp = _bump(conn, "stamp")
                    cur = conn.execute(
                        "UPDATE memory_entries SET embedder = ?, vector = ?, stamp = ? "
                        "WHERE team = ? AND id = ?",
                        (embedder, blob, stamp, team.id, eid),
                    )
                    updated += cur.rowcount
            return updated

        return await self._db.call(run)

    async def missing_vectors(self, embedder: str, *, limit: int) -> list[MemoryEntry]:
        def run(conn: sqlite3.Connection) -> list[MemoryEntry]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM memory_entries "
                "WHERE embedder IS NULL OR embedder != ? ORDER BY stamp LIMIT ?",
                (embedder, max(limit, 0)),
            ).fetchall()
            return [_entry(*row) for row in rows]

        return await self._db.call(run)

    async def delete_entries(self, team: TeamKey, ids: Sequence[str]) -> int:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        marks = ",".join("?" * len(wanted))

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                conn.execute(
                    "DELETE FROM memory_people WHERE n IN "
                    f"(SELECT n FROM memory_entries WHERE team = ? AND id IN ({marks}))",
                    [team.id, *wanted],
                )
                cur = conn.execute(
                    f"DELETE FROM memory_entries WHERE team = ? AND id IN ({marks})",
                    [team.id, *wanted],
                )
                if cur.rowcount:
                    _bump(conn, f"gen:{team.id}")
                return int(cur.rowcount)

        return await self._db.call(run)

    async def entries_of_person(self, person: PersonKey) -> list[MemoryEntry]:
        def run(conn: sqlite3.Connection) -> list[MemoryEntry]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM memory_entries WHERE team = ? AND n IN "
                "(SELECT n FROM memory_people WHERE person = ?) ORDER BY stamp",
                (person.team_key.id, person.id),
            ).fetchall()
            return [_entry(*row) for row in rows]

        return await self._db.call(run)

    async def delete_person(self, person: PersonKey) -> int:
        team = person.team_key.id

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                conn.execute("DELETE FROM memory_participants WHERE person = ?", (person.id,))
                ns = [
                    row[0]
                    for row in conn.execute(
                        "SELECT n FROM memory_people WHERE person = ?", (person.id,)
                    ).fetchall()
                ]
                deleted = 0
                for start in range(0, len(ns), 500):
                    chunk = ns[start : start + 500]
                    marks = ",".join("?" * len(chunk))
                    conn.execute(f"DELETE FROM memory_people WHERE n IN ({marks})", chunk)
                    cur = conn.execute(
                        f"DELETE FROM memory_entries WHERE team = ? AND n IN ({marks})",
                        [team, *chunk],
                    )
                    deleted += cur.rowcount
                if deleted:
                    _bump(conn, f"gen:{team}")
                return deleted

        return await self._db.call(run)

    async def get_checkpoint(self, session_id: str) -> int:
        def run(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "SELECT seq FROM memory_checkpoints WHERE session = ?", (session_id,)
            ).fetchone()
            return int(row[0]) if row else 0

        return await self._db.call(run)

    async def set_checkpoint(self, session_id: str, seq: int) -> None:
        if not session_id:
            raise ValueError("a session id is required")

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO memory_checkpoints (session, seq) VALUES (?, ?) "
                "ON CONFLICT (session) DO UPDATE SET seq = MAX(seq, excluded.seq)",
                (session_id, seq),
            )

        await self._db.call(run)

    async def checkpoints(self) -> dict[str, int]:
        def run(conn: sqlite3.Connection) -> dict[str, int]:
            rows = conn.execute("SELECT session, seq FROM memory_checkpoints").fetchall()
            return {str(s): int(q) for s, q in rows}

        return await self._db.call(run)

    async def ping(self) -> bool:
        return bool(await self._db.call(lambda conn: conn.execute("SELECT 1").fetchone()))

    async def compact(self) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA incremental_vacuum").fetchall()  # each row frees a page
            row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if row is not None and row[0] != 0:
                raise sqlite3.OperationalError(f"WAL checkpoint blocked by a reader: {row}")

        await self._db.call(run)

    async def close(self) -> None:
        await self._db.close()

    async def entries_of_team(
        self, team: TeamKey, *, without_audience: bool = False
    ) -> list[MemoryEntry]:
        legacy = (
            " AND coalesce(json_extract(doc, '$.audience'), '') = ''" if without_audience else ""
        )

        def run(conn: sqlite3.Connection) -> list[MemoryEntry]:
            rows = conn.execute(
                f"SELECT doc, stamp FROM memory_entries WHERE team = ?{legacy} ORDER BY stamp",
                (team.id,),
            ).fetchall()
            return [_entry(doc, stamp, None, None) for doc, stamp in rows]

        return await self._db.call(run)

    async def reset_session(self, team: TeamKey, session_id: str) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                ns = [
                    n
                    for n, doc in conn.execute(
                        "SELECT n, doc FROM memory_entries WHERE team = ? AND session = ?",
                        (team.id, session_id),
                    ).fetchall()
                    if json.loads(doc).get("kind", "excerpt") == "excerpt"
                ]
                for n in ns:
                    conn.execute("DELETE FROM memory_people WHERE n = ?", (n,))
                    conn.execute("DELETE FROM memory_entries WHERE n = ?", (n,))
                conn.execute("DELETE FROM memory_checkpoints WHERE session = ?", (session_id,))
                if ns:
                    _bump(conn, f"gen:{team.id}")
                return len(ns)

        return await self._db.call(run)

    async def set_audiences(self, team: TeamKey, audiences: dict[str, str]) -> int:
        items = list(audiences.items())
        if not items:
            return 0

        def run(conn: sqlite3.Connection) -> int:
            updated = 0
            with transaction(conn):
                for eid, audience in items:
                    row = conn.execute(
                        "SELECT n, doc FROM memory_entries WHERE team = ? AND id = ?",
                        (team.id, eid),
                    ).fetchone()
                    if row is None:
                        continue
                    doc = json.loads(row[1])
                    private = bool(doc.get("private")) or audience != PUBLIC
                    doc.update(audience=audience, private=private)
                    conn.execute(
                        "UPDATE memory_entries SET doc = ?, private = ? WHERE n = ?",
                        (json.dumps(doc), int(private), row[0]),
                    )
                    updated += 1
                if updated:
                    _bump(conn, f"gen:{team.id}")
            return updated

        return await self._db.call(run)

    async def entries_from_sources(
        self, team: TeamKey, source_ids: Sequence[str]
    ) -> list[MemoryEntry]:
        wanted = list(dict.fromkeys(source_ids))
        if not wanted:
            return []
        # Entries list the messages of their own session (excerpts, consolidated memories);
        # the (team, session) index narrows the scan to those sessions, and to entries that
        # span sessions (session "").
        sessions = sorted({s.rpartition("#")[0] for s in wanted} | {""})
        marks, smarks = ",".join("?" * len(wanted)), ",".join("?" * len(sessions))

        def run(conn: sqlite3.Connection) -> list[MemoryEntry]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM memory_entries WHERE team = ? "
                f"AND session IN ({smarks}) AND EXISTS (SELECT 1 FROM "
                f"json_each(memory_entries.doc, '$.source_ids') WHERE value IN ({marks})) "
                "ORDER BY stamp",
                [team.id, *sessions, *wanted],
            ).fetchall()
            return [_entry(*row) for row in rows]

        return await self._db.call(run)
