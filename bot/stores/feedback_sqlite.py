"""`FeedbackStore` on SQLite, in the main store's file and writer thread."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import astuple

from bot.keys import PersonKey, TeamKey
from bot.stores.feedback import TRIM_EVERY, VOTES_KEPT, FeedbackTotals, Vote, check_vote, totals_of
from bot.stores.sqlite_worker import SqliteWorker, transaction

_COLUMNS = (
    "platform, team, channel, thread, reply_id, person, vote, at, model, session, turn_id, seq, "
    "audience"
)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS feedback (
    n INTEGER PRIMARY KEY,
    platform TEXT NOT NULL, team TEXT NOT NULL, channel TEXT NOT NULL, thread TEXT NOT NULL,
    reply_id TEXT NOT NULL, person TEXT NOT NULL, vote INTEGER NOT NULL, at REAL NOT NULL,
    model TEXT NOT NULL, session TEXT NOT NULL, turn_id TEXT NOT NULL, seq INTEGER NOT NULL,
    audience TEXT NOT NULL,
    UNIQUE (team, reply_id, person)
);
CREATE INDEX IF NOT EXISTS feedback_team_at ON feedback (team, at);
CREATE INDEX IF NOT EXISTS feedback_person ON feedback (person);
"""


class SqliteFeedback:
    def __init__(
        self, worker: SqliteWorker, *, keep: int = VOTES_KEPT, trim_every: int = TRIM_EVERY
    ) -> None:
        self._db = worker
        self._keep = keep
        self._trim_every = max(1, trim_every)
        self._cast = 0
        self._ready = False

    async def _schema(self) -> None:
        if not self._ready:
            await self._db.call(lambda conn: conn.executescript(_SCHEMA))
            self._ready = True

    async def cast(self, vote: Vote) -> int | None:
        check_vote(vote)
        await self._schema()
        keep = self._keep
        trim = self._cast % self._trim_every == 0
        self._cast += 1

        def run(conn: sqlite3.Connection) -> int | None:
            with transaction(conn):
                row = conn.execute(
                    "SELECT vote FROM feedback WHERE team = ? AND reply_id = ? AND person = ?",
                    (vote.team, vote.reply_id, vote.person),
                ).fetchone()
                conn.execute(
                    f"INSERT INTO feedback ({_COLUMNS}) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (team, reply_id, person) DO UPDATE SET vote = excluded.vote, "
                    "at = excluded.at, model = excluded.model, session = excluded.session, "
                    "turn_id = excluded.turn_id, seq = excluded.seq, audience = excluded.audience",
                    astuple(vote),
                )
                # The team's oldest votes past the bound go (by time, then by row).
                if trim:
                    conn.execute(
                        "DELETE FROM feedback WHERE n IN (SELECT n FROM feedback WHERE team = ? "
                        "ORDER BY at DESC, n DESC LIMIT -1 OFFSET ?)",
                        (vote.team, keep),
                    )
                return int(row[0]) if row else None

        return await self._db.call(run)

    async def votes_on(self, team: TeamKey, reply_id: str) -> list[Vote]:
        await self._schema()
        tid = team.id

        def run(conn: sqlite3.Connection) -> list[Vote]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM feedback WHERE team = ? AND reply_id = ? ORDER BY at, n",
                (tid, reply_id),
            ).fetchall()
            return [Vote(*r) for r in rows]

        return await self._db.call(run)

    async def feedback_totals(self, team: TeamKey, since: float = 0.0) -> FeedbackTotals:
        await self._schema()
        tid = team.id

        def run(conn: sqlite3.Connection) -> list[tuple[str, str, str, int, int]]:
            return conn.execute(
                "SELECT channel, model, person, vote, COUNT(*) FROM feedback "
                "WHERE team = ? AND at >= ? GROUP BY channel, model, person, vote",
                (tid, since),
            ).fetchall()

        return totals_of(await self._db.call(run))

    async def forget_voter(self, person: PersonKey) -> int:
        await self._schema()
        pid = person.id

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                return conn.execute("DELETE FROM feedback WHERE person = ?", (pid,)).rowcount

        return await self._db.call(run)

    async def drop_replies(self, team: TeamKey, reply_ids: Sequence[str]) -> int:
        await self._schema()
        tid, ids = team.id, list(reply_ids)

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                return sum(
                    conn.execute(
                        "DELETE FROM feedback WHERE team = ? AND reply_id = ?", (tid, r)
                    ).rowcount
                    for r in ids
                )

        return await self._db.call(run)
