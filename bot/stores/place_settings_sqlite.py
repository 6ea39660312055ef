"""`PlaceSettingsStore` on SQLite, in the main store's file and writer thread."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping

from bot.keys import PersonKey, TeamKey
from bot.stores.place_settings import (
    FORGOTTEN,
    HISTORY_KEPT,
    TEAM_WIDE,
    SettingChange,
    check_change,
)
from bot.stores.sqlite_worker import SqliteWorker, transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS place_settings (
    team TEXT NOT NULL,
    channel TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (team, channel)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS place_settings_history (
    n INTEGER PRIMARY KEY,
    team TEXT NOT NULL,
    channel TEXT NOT NULL,
    key TEXT NOT NULL,
    old TEXT,
    new TEXT,
    by TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS place_settings_history_team ON place_settings_history (team, n);
CREATE INDEX IF NOT EXISTS place_settings_history_by ON place_settings_history (by);
"""


def _values(conn: sqlite3.Connection, team: str, channel: str) -> dict[str, str]:
    row = conn.execute(
        "SELECT doc FROM place_settings WHERE team = ? AND channel = ?", (team, channel)
    ).fetchone()
    return dict(json.loads(row[0])) if row else {}


class SqlitePlaceSettings:
    def __init__(self, worker: SqliteWorker) -> None:
        self._db = worker
        self._ready = False

    async def _schema(self) -> None:
        if not self._ready:
            await self._db.call(lambda conn: conn.executescript(_SCHEMA))
            self._ready = True

    async def place_values(
        self, team: TeamKey, channel: str
    ) -> tuple[dict[str, str], dict[str, str]]:
        await self._schema()
        tid = team.id

        def run(conn: sqlite3.Connection) -> tuple[dict[str, str], dict[str, str]]:
            here = _values(conn, tid, channel) if channel != TEAM_WIDE else {}
            return _values(conn, tid, TEAM_WIDE), here

        return await self._db.call(run)

    async def overrides(self, team: TeamKey) -> dict[str, dict[str, str]]:
        await self._schema()
        tid = team.id

        def run(conn: sqlite3.Connection) -> dict[str, dict[str, str]]:
            rows = conn.execute(
                "SELECT channel, doc FROM place_settings WHERE team = ? AND channel != ? "
                "ORDER BY channel",
                (tid, TEAM_WIDE),
            ).fetchall()
            return {str(c): dict(json.loads(d)) for c, d in rows if json.loads(d)}

        return await self._db.call(run)

    async def change(
        self, team: TeamKey, channel: str, changes: Mapping[str, str | None], *, by: str, at: float
    ) -> list[SettingChange]:
        check_change(changes)
        await self._schema()
        tid, wanted = team.id, dict(changes)

        def run(conn: sqlite3.Connection) -> list[SettingChange]:
            with transaction(conn):
                values = _values(conn, tid, channel)
                done: list[SettingChange] = []
                for key, new in wanted.items():
                    old = values.get(key)
                    if old == new:
                        continue
                    if new is None:
                        values.pop(key, None)
                    else:
                        values[key] = new
                    done.append(SettingChange(tid, channel, key, old, new, by, at))
                conn.execute(
                    "INSERT INTO place_settings (team, channel, doc) VALUES (?, ?, ?) "
                    "ON CONFLICT (team, channel) DO UPDATE SET doc = excluded.doc",
                    (tid, channel, json.dumps(values, ensure_ascii=False)),
                )
                conn.executemany(
                    "INSERT INTO place_settings_history (team, channel, key, old, new, by, at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(c.team, c.channel, c.key, c.old, c.new, c.by, c.at) for c in done],
                )
                conn.execute(
                    "DELETE FROM place_settings_history WHERE team = ? AND n <= ("
                    "SELECT n FROM place_settings_history WHERE team = ? "
                    "ORDER BY n DESC LIMIT 1 OFFSET ?)",
                    (tid, tid, HISTORY_KEPT),
                )
                return done

        return await self._db.call(run)

    async def history(self, team: TeamKey, channel: str, *, limit: int) -> list[SettingChange]:
        await self._schema()
        tid = team.id

        def run(conn: sqlite3.Connection) -> list[SettingChange]:
            rows = conn.execute(
                "SELECT team, channel, key, old, new, by, at FROM place_settings_history "
                "WHERE team = ? AND channel IN (?, ?) ORDER BY n DESC LIMIT ?",
                (tid, TEAM_WIDE, channel, limit),
            ).fetchall()
            return [SettingChange(*r) for r in rows]

        return await self._db.call(run)

    async def forget_author(self, person: PersonKey) -> int:
        await self._schema()
        pid = person.id

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                cur = conn.execute(
                    "UPDATE place_settings_history SET by = ? WHERE by = ?", (FORGOTTEN, pid)
                )
                return cur.rowcount

        return await self._db.call(run)
