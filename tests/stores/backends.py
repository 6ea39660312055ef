"""Store backends under test, each with a raw writer that bypasses the store (to plant rows
written by an older schema version)."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.stores.mongo import MongoStore
from bot.stores.protocols import Store
from bot.stores.sqlite import SqliteStore

RawInsert = Callable[[str, dict[str, Any]], Awaitable[None]]


@dataclass
class Backend:
    name: str
    store: Store
    raw_insert: RawInsert  # (table or collection, document) -> None


@asynccontextmanager
async def sqlite_backend(path: Path) -> AsyncIterator[Backend]:
    store = await SqliteStore.open(path)
    try:
        yield Backend("sqlite", store, _sqlite_raw(store.path))
    finally:
        await store.close()


@asynccontextmanager
async def mongo_backend(name: str, uri: str) -> AsyncIterator[Backend]:
    """A fresh database per test (mongoeco keeps everything in memory: keep them small)."""
    db_name = f"t_{uuid.uuid4().hex[:12]}"
    store = await MongoStore.open(uri, db_name)

    async def insert(collection: str, doc: dict[str, Any]) -> None:
        await store.db[collection].insert_one(dict(doc))

    try:
        yield Backend(name, store, insert)
    finally:
        await store.client.drop_database(db_name)
        await store.close()


_SQLITE_COLUMNS = {
    "messages": ("session", "seq", "speaker"),
    "tool_calls": ("session", "speaker", "created_at"),
    "slack_installations": ("enterprise_id", "team_id", "name"),
}


def _sqlite_raw(path: Path) -> RawInsert:
    async def insert(table: str, doc: dict[str, Any]) -> None:
        cols = _SQLITE_COLUMNS[table]
        values = [doc["created_at"].timestamp() if c == "created_at" else doc[c] for c in cols]
        conn = sqlite3.connect(path)
        try:
            conn.execute(
                f"INSERT INTO {table} ({', '.join(cols)}, doc) "
                f"VALUES ({', '.join('?' * (len(cols) + 1))})",
                (*values, json.dumps(doc, default=str)),
            )
            conn.commit()
        finally:
            conn.close()

    return insert
