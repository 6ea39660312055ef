"""Retention after consolidation, mixed into both stores: raw messages already consolidated and
older than BOT_RETENTION_DAYS go, tool-call logs older than 7 days go. Never a message that
consolidation has not read (the caller passes the session's consolidation checkpoint)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bot.keys import SessionKey
from bot.stores.sqlite_worker import transaction

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from pymongo.asynchronous.collection import AsyncCollection

    from bot.stores.sqlite_worker import SqliteWorker


def _iso(moment: datetime) -> str:
    """How pydantic writes `created_at` into the SQLite JSON documents (UTC, "Z")."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class SqliteRetention:
    _db: SqliteWorker

    async def prune_messages(self, session: SessionKey, *, upto_seq: int, before: datetime) -> int:
        """Delete this session's messages with seq <= upto_seq created before `before`."""
        sid, cutoff = session.id, _iso(before)

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                return conn.execute(
                    "DELETE FROM messages WHERE session = ? AND seq <= ? "
                    "AND json_extract(doc, '$.created_at') < ?",
                    (sid, upto_seq, cutoff),
                ).rowcount

        return await self._db.call(run)

    async def prune_tool_calls(self, before: datetime) -> int:
        cutoff = before.timestamp()

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                return conn.execute(
                    "DELETE FROM tool_calls WHERE created_at < ?", (cutoff,)
                ).rowcount

        return await self._db.call(run)


class MongoRetention:
    _messages: AsyncCollection[dict[str, Any]]
    _calls: AsyncCollection[dict[str, Any]]
    _guard: Callable[[str], AbstractContextManager[None]]

    async def prune_messages(self, session: SessionKey, *, upto_seq: int, before: datetime) -> int:
        query = {"session": session.id, "seq": {"$lte": upto_seq}, "created_at": {"$lt": before}}
        with self._guard("prune_messages"):
            result = await self._messages.delete_many(query)
        return result.deleted_count

    async def prune_tool_calls(self, before: datetime) -> int:
        with self._guard("prune_tool_calls"):
            result = await self._calls.delete_many({"created_at": {"$lt": before}})
        return result.deleted_count
