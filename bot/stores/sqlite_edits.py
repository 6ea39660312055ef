"""`MessageEditStore` in the embedded SQLite store, mixed into `SqliteStore`: the rewrites and
deletions erasure makes (`bot.memory.erasure`, `bot.memory.deletion`).

A platform message is found through an index on `meta.message_id` of each row's JSON document
(an expression index: the query uses the very same expression).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bot.keys import PersonKey, SessionKey, TeamKey
from bot.stores import codec
from bot.stores.records import FactTombstone, StoredMessage, ToolCallLog
from bot.stores.sqlite_worker import transaction

if TYPE_CHECKING:
    from bot.stores.sqlite_worker import SqliteWorker

_PLATFORM_ID = "json_extract(doc, '$.meta.message_id')"
EDITS_SCHEMA = f"""
CREATE INDEX IF NOT EXISTS messages_platform_id ON messages ({_PLATFORM_ID});
CREATE TABLE IF NOT EXISTS fact_tombstones (
    n INTEGER PRIMARY KEY,
    person TEXT NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS fact_tombstones_person ON fact_tombstones (person);
"""


def _prefix_bounds(prefix: str) -> tuple[str, str]:
    """[low, high) of the ids that start with `prefix` (ids never hold U+10FFFF)."""
    return prefix, prefix + "\U0010ffff"


class SqliteEdits:
    _db: SqliteWorker

    async def team_messages(
        self, team: TeamKey, *, after: tuple[str, int] = ("", 0), limit: int = 500
    ) -> list[StoredMessage]:
        low, high = _prefix_bounds(team.id + ":")
        after_session, after_seq = after

        def run(conn: sqlite3.Connection) -> list[StoredMessage]:
            rows = conn.execute(
                "SELECT doc FROM messages WHERE session >= ? AND session < ? "
                "AND (session > ? OR (session = ? AND seq > ?)) "
                "ORDER BY session, seq LIMIT ?",
                (low, high, after_session, after_session, after_seq, limit),
            ).fetchall()
            return [codec.load_json(StoredMessage, r[0]) for r in rows]

        return await self._db.call(run)

    async def rewrite_messages(self, messages: Sequence[StoredMessage]) -> int:
        rows = [(m.session, m.seq) for m in messages]
        if not rows:
            return 0
        new = {(m.session, m.seq): m for m in messages}

        def run(conn: sqlite3.Connection) -> int:
            written = 0
            with transaction(conn):
                for sid, seq in rows:
                    row = conn.execute(
                        "SELECT doc FROM messages WHERE session = ? AND seq = ?", (sid, seq)
                    ).fetchone()
                    if row is None:
                        continue
                    stored = codec.load_json(StoredMessage, row[0])
                    edit = new[(sid, seq)]
                    updated = stored.model_copy(
                        update={
                            "content": edit.content,
                            "name": edit.name,
                            "tool_calls": edit.tool_calls,
                            "meta": edit.meta,
                            "tokens": edit.tokens,
                        }
                    )
                    conn.execute(
                        "UPDATE messages SET doc = ? WHERE session = ? AND seq = ?",
                        (codec.dump_json(updated), sid, seq),
                    )
                    written += 1
            return written

        return await self._db.call(run)

    async def delete_messages(self, session: SessionKey, seqs: Sequence[int]) -> int:
        sid, wanted = session.id, [(session.id, int(s)) for s in seqs]
        if not wanted:
            return 0

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                return sum(
                    conn.execute(
                        "DELETE FROM messages WHERE session = ? AND seq = ?", (sid, seq)
                    ).rowcount
                    for _, seq in wanted
                )

        return await self._db.call(run)

    async def find_platform_message(
        self, team: TeamKey, message_id: str, *, channel: str | None = None
    ) -> list[StoredMessage]:
        prefix = team.id + ":" + (channel + ":" if channel is not None else "")
        low, high = _prefix_bounds(prefix)

        def run(conn: sqlite3.Connection) -> list[StoredMessage]:
            rows = conn.execute(
                f"SELECT doc FROM messages WHERE {_PLATFORM_ID} = ? "
                "AND session >= ? AND session < ? ORDER BY session, seq",
                (message_id, low, high),
            ).fetchall()
            return [codec.load_json(StoredMessage, r[0]) for r in rows]

        return await self._db.call(run)

    async def team_tool_calls(self, team: TeamKey) -> list[ToolCallLog]:
        low, high = _prefix_bounds(team.id + ":")

        def run(conn: sqlite3.Connection) -> list[ToolCallLog]:
            rows = conn.execute(
                "SELECT doc FROM tool_calls WHERE session >= ? AND session < ? ORDER BY n",
                (low, high),
            ).fetchall()
            return [codec.load_json(ToolCallLog, r[0]) for r in rows]

        return await self._db.call(run)

    async def rewrite_tool_call(self, record: ToolCallLog) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            with transaction(conn):
                rows = conn.execute(
                    "SELECT n, doc FROM tool_calls WHERE session = ?", (record.session,)
                ).fetchall()
                done = False
                for n, doc in rows:
                    stored = codec.load_json(ToolCallLog, doc)
                    if stored.call_id != record.call_id:
                        continue
                    updated = stored.model_copy(update={"arguments": record.arguments})
                    conn.execute(
                        "UPDATE tool_calls SET doc = ? WHERE n = ?", (codec.dump_json(updated), n)
                    )
                    done = True
                return done

        return await self._db.call(run)

    async def delete_tool_calls(self, session: SessionKey, call_ids: Sequence[str]) -> int:
        wanted, sid = set(call_ids), session.id
        if not wanted:
            return 0

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                rows = conn.execute(
                    "SELECT n, doc FROM tool_calls WHERE session = ?", (sid,)
                ).fetchall()
                gone = [n for n, doc in rows if codec.load_json(ToolCallLog, doc).call_id in wanted]
                for n in gone:
                    conn.execute("DELETE FROM tool_calls WHERE n = ?", (n,))
                return len(gone)

        return await self._db.call(run)

    # --- tombstones of forgotten facts ------------------------------------------------------

    async def add_tombstones(self, tombstones: Sequence[FactTombstone]) -> None:
        rows = [(t.person, codec.dump_json(t)) for t in tombstones]

        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.executemany("INSERT INTO fact_tombstones (person, doc) VALUES (?, ?)", rows)

        if rows:
            await self._db.call(run)

    async def tombstones(self, person: PersonKey) -> list[FactTombstone]:
        pid = person.id

        def run(conn: sqlite3.Connection) -> list[FactTombstone]:
            rows = conn.execute(
                "SELECT doc FROM fact_tombstones WHERE person = ? ORDER BY n", (pid,)
            ).fetchall()
            return [codec.load_json(FactTombstone, r[0]) for r in rows]

        return await self._db.call(run)

    async def delete_tombstones(self, person: PersonKey) -> int:
        pid = person.id

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                return conn.execute("DELETE FROM fact_tombstones WHERE person = ?", (pid,)).rowcount

        return await self._db.call(run)
