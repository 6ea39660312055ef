"""`UsageStore` on SQLite, in the main store's file and writer thread."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from bot.stores.sqlite_worker import SqliteWorker, transaction
from bot.stores.usage import FORGOTTEN, KEPT_DAYS, UsageRow, bounded

_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage_days (
    day TEXT NOT NULL,
    team TEXT NOT NULL,
    place TEXT NOT NULL,
    person TEXT NOT NULL,
    model TEXT NOT NULL,
    kind TEXT NOT NULL,
    audience TEXT NOT NULL,
    requests INTEGER NOT NULL,
    prompt INTEGER NOT NULL,
    cached INTEGER NOT NULL,
    completion INTEGER NOT NULL,
    cost_micros INTEGER NOT NULL,
    unpriced INTEGER NOT NULL,
    estimated INTEGER NOT NULL,
    PRIMARY KEY (team, day, place, person, model, kind)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS usage_days_person ON usage_days (person, day);
CREATE INDEX IF NOT EXISTS usage_days_day ON usage_days (day);
"""
_COLUMNS = (
    "day, team, place, person, model, kind, audience, requests, prompt, cached, completion, "
    "cost_micros, unpriced, estimated"
)
_UPSERT = (
    f"INSERT INTO usage_days ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (team, day, place, person, model, kind) DO UPDATE SET "
    "audience = excluded.audience, requests = requests + excluded.requests, "
    "prompt = prompt + excluded.prompt, cached = cached + excluded.cached, "
    "completion = completion + excluded.completion, "
    "cost_micros = cost_micros + excluded.cost_micros, unpriced = unpriced + excluded.unpriced, "
    "estimated = estimated + excluded.estimated"
)


def _params(row: UsageRow) -> tuple[object, ...]:
    r = bounded(row)
    return (
        r.day, r.team, r.place, r.person, r.model, r.kind, r.audience, r.requests, r.prompt,
        r.cached, r.completion, r.cost_micros, r.unpriced, r.estimated,
    )  # fmt: skip


def _row(values: Sequence[object]) -> UsageRow:
    day, team, place, person, model, kind, audience, *counts = values
    return UsageRow(
        str(day), str(team), str(place), str(person), str(model), str(kind), str(audience),
        *(int(str(c)) for c in counts),
    )  # fmt: skip


class SqliteUsage:
    def __init__(self, worker: SqliteWorker) -> None:
        self._db = worker
        self._ready = False
        self._pruned = ""  # the day the old rows were last dropped

    async def _schema(self) -> None:
        if not self._ready:
            await self._db.call(lambda conn: conn.executescript(_SCHEMA))
            self._ready = True

    async def add_usage(self, rows: Sequence[UsageRow]) -> None:
        if not rows:
            return
        await self._schema()
        today = datetime.now(UTC).date()
        prune = self._pruned != today.isoformat()
        oldest = (today - timedelta(days=KEPT_DAYS)).isoformat()
        params = [_params(r) for r in rows]

        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.executemany(_UPSERT, params)
                if prune:
                    conn.execute("DELETE FROM usage_days WHERE day < ?", (oldest,))

        await self._db.call(run)
        self._pruned = today.isoformat()

    async def usage(
        self, *, since: str, team: str | None = None, person: str | None = None
    ) -> list[UsageRow]:
        await self._schema()
        where, args = ["day >= ?"], [since]
        if team is not None:
            where.append("team = ?")
            args.append(team)
        if person is not None:
            where.append("person = ?")
            args.append(person)
        sql = f"SELECT {_COLUMNS} FROM usage_days WHERE {' AND '.join(where)} ORDER BY day, team"

        def run(conn: sqlite3.Connection) -> list[UsageRow]:
            return [_row(v) for v in conn.execute(sql, args).fetchall()]

        return await self._db.call(run)

    async def forget_person(self, person: str) -> int:
        await self._schema()

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                rows = [
                    _row(v)
                    for v in conn.execute(
                        f"SELECT {_COLUMNS} FROM usage_days WHERE person = ?", (person,)
                    ).fetchall()
                ]
                conn.execute("DELETE FROM usage_days WHERE person = ?", (person,))
                conn.executemany(_UPSERT, [_params(_moved(r)) for r in rows])
                return len(rows)

        return await self._db.call(run)


def _moved(row: UsageRow) -> UsageRow:
    from dataclasses import replace

    return replace(row, person=FORGOTTEN)
