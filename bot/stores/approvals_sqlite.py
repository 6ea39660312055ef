"""`ApprovalStore` on SQLite, in the main store's file and writer thread."""

from __future__ import annotations

import sqlite3
from dataclasses import astuple, fields

from bot.keys import PersonKey, TeamKey
from bot.stores.approvals import KEPT, Approval, Grant, Status, check_approval, check_grant
from bot.stores.sqlite_worker import SqliteWorker, transaction

_COLUMNS = ", ".join(f.name for f in fields(Approval))
_GRANT_COLUMNS = ", ".join(f.name for f in fields(Grant))
_SCHEMA = """
CREATE TABLE IF NOT EXISTS approvals (
    n INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE, team TEXT NOT NULL, place TEXT NOT NULL, session TEXT NOT NULL,
    person TEXT NOT NULL, audience TEXT NOT NULL, turn_id TEXT NOT NULL, call_id TEXT NOT NULL,
    tool TEXT NOT NULL, arguments TEXT NOT NULL, message TEXT NOT NULL,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, status TEXT NOT NULL,
    decided_by TEXT NOT NULL, decided_at REAL NOT NULL, outcome TEXT NOT NULL,
    latency_ms REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_turn ON approvals (session, turn_id, status);
CREATE INDEX IF NOT EXISTS approvals_due ON approvals (status, expires_at);
CREATE INDEX IF NOT EXISTS approvals_team ON approvals (team, created_at);
CREATE INDEX IF NOT EXISTS approvals_person ON approvals (person);
CREATE TABLE IF NOT EXISTS approval_grants (
    team TEXT NOT NULL, place TEXT NOT NULL, person TEXT NOT NULL, tool TEXT NOT NULL,
    by TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (team, place, tool, person)
);
CREATE INDEX IF NOT EXISTS approval_grants_person ON approval_grants (person);
"""


def _approval(row: tuple[object, ...]) -> Approval:
    return Approval(*row)  # type: ignore[arg-type]


class SqliteApprovals:
    def __init__(self, worker: SqliteWorker, *, keep: int = KEPT) -> None:
        self._db = worker
        self._keep = keep
        self._ready = False

    async def _schema(self) -> None:
        if not self._ready:
            await self._db.call(lambda conn: conn.executescript(_SCHEMA))
            self._ready = True

    async def add(self, approval: Approval) -> None:
        check_approval(approval)
        await self._schema()
        keep = self._keep

        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                try:
                    conn.execute(
                        f"INSERT INTO approvals ({_COLUMNS}) VALUES "
                        f"({', '.join('?' * len(fields(Approval)))})",
                        astuple(approval),
                    )
                except sqlite3.IntegrityError:
                    raise ValueError("an approval with this id exists") from None
                conn.execute(
                    "DELETE FROM approvals WHERE n IN (SELECT n FROM approvals WHERE team = ? "
                    "AND status != 'pending' ORDER BY created_at DESC, n DESC "
                    "LIMIT -1 OFFSET ?)",
                    (approval.team, keep),
                )

        await self._db.call(run)

    async def _select(self, where: str, args: tuple[object, ...]) -> list[Approval]:
        await self._schema()

        def run(conn: sqlite3.Connection) -> list[Approval]:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM approvals WHERE {where}", args)
            return [_approval(r) for r in rows.fetchall()]

        return await self._db.call(run)

    async def get(self, approval_id: str) -> Approval | None:
        found = await self._select("id = ?", (approval_id,))
        return found[0] if found else None

    async def decide(
        self, approval_id: str, status: Status, *, by: str, at: float
    ) -> Approval | None:
        if status == "pending":
            raise ValueError("a decision is approved, denied or expired")
        await self._schema()

        def run(conn: sqlite3.Connection) -> bool:
            with transaction(conn):
                return (
                    conn.execute(
                        "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ? "
                        "WHERE id = ? AND status = 'pending'",
                        (status, by, at, approval_id),
                    ).rowcount
                    == 1
                )

        if not await self._db.call(run):
            return None
        return await self.get(approval_id)

    async def finish(self, approval_id: str, outcome: str, latency_ms: float) -> None:
        await self._schema()

        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(
                    "UPDATE approvals SET outcome = ?, latency_ms = ? WHERE id = ?",
                    (outcome[:100], latency_ms, approval_id),
                )

        await self._db.call(run)

    async def of_turn(self, session: str, turn_id: str) -> list[Approval]:
        return await self._select(
            "session = ? AND turn_id = ? ORDER BY created_at, n",
            (session, turn_id),
        )

    async def latest_pending(self, session: str, person: str) -> Approval | None:
        found = await self._select(
            "session = ? AND person = ? AND status = 'pending' "
            "ORDER BY created_at DESC, n DESC LIMIT 1",
            (session, person),
        )
        return found[0] if found else None

    async def due(self, now: float, limit: int = 100) -> list[Approval]:
        return await self._select(
            "status = 'pending' AND expires_at <= ? ORDER BY expires_at, n LIMIT ?", (now, limit)
        )

    async def unsettled(self, before: float, limit: int = 100) -> list[Approval]:
        return await self._select(
            "status != 'pending' AND outcome = '' AND decided_at <= ? "
            "ORDER BY decided_at, n LIMIT ?",
            (before, limit),
        )

    async def recent(self, team: TeamKey, limit: int = 20) -> list[Approval]:
        return await self._select(
            "team = ? ORDER BY created_at DESC, n DESC LIMIT ?", (team.id, limit)
        )

    async def grant(self, grant: Grant) -> None:
        check_grant(grant)
        await self._schema()

        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(
                    f"INSERT OR REPLACE INTO approval_grants ({_GRANT_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    astuple(grant),
                )

        await self._db.call(run)

    async def granted(self, team: str, place: str, person: str, tool: str) -> bool:
        await self._schema()

        def run(conn: sqlite3.Connection) -> bool:
            return (
                conn.execute(
                    "SELECT 1 FROM approval_grants WHERE team = ? AND place = ? AND tool = ? "
                    "AND person = ?",
                    (team, place, tool, person),
                ).fetchone()
                is not None
            )

        return await self._db.call(run)

    async def grants(self, team: TeamKey, place: str) -> list[Grant]:
        await self._schema()
        tid = team.id

        def run(conn: sqlite3.Connection) -> list[Grant]:
            rows = conn.execute(
                f"SELECT {_GRANT_COLUMNS} FROM approval_grants WHERE team = ? AND place = ? "
                "ORDER BY tool, person",
                (tid, place),
            ).fetchall()
            return [Grant(*r) for r in rows]

        return await self._db.call(run)

    async def revoke(self, team: TeamKey, place: str, tool: str, person: str | None = None) -> int:
        await self._schema()
        tid = team.id

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                if person is None:
                    return conn.execute(
                        "DELETE FROM approval_grants WHERE team = ? AND place = ? AND tool = ?",
                        (tid, place, tool),
                    ).rowcount
                return conn.execute(
                    "DELETE FROM approval_grants WHERE team = ? AND place = ? AND tool = ? "
                    "AND person = ?",
                    (tid, place, tool, person),
                ).rowcount

        return await self._db.call(run)

    async def forget_person(self, person: PersonKey) -> int:
        await self._schema()
        pid = person.id

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                conn.execute("DELETE FROM approval_grants WHERE person = ? OR by = ?", (pid, pid))
                # Decisions by others on this person's requests go with the requests; their
                # own decisions on others' requests keep the record, without their name.
                conn.execute("UPDATE approvals SET decided_by = '' WHERE decided_by = ?", (pid,))
                return conn.execute("DELETE FROM approvals WHERE person = ?", (pid,)).rowcount

        return await self._db.call(run)
