"""Open the memory index next to the store: MongoDB when the store is MongoDB (same client and
database), else its own SQLite file `memory.db` in the data directory."""

from __future__ import annotations

from pathlib import Path

from bot.stores.index_sqlite import INDEX_FILENAME, SqliteMemoryIndex
from bot.stores.memory_index import MemoryIndex


async def open_memory_index(store: object, *, data_dir: Path) -> MemoryIndex:
    """`store` only says which backend runs (no method of it is called)."""
    from bot.stores.mongo import MongoStore  # keeps SQLite-only runs free of pymongo startup

    if isinstance(store, MongoStore):
        from bot.stores.index_mongo import MongoMemoryIndex

        return await MongoMemoryIndex.open(store.client, store.db.name)
    return await SqliteMemoryIndex.open(Path(data_dir) / INDEX_FILENAME)
