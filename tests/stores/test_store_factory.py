"""Configuration picks the backends; bad settings fail with one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.stores.factory import StoreConfigError, open_cache, open_store
from bot.stores.memory_cache import MemoryCache
from bot.stores.mongo import MongoStore
from bot.stores.resilient_cache import ResilientCache
from bot.stores.sqlite import SqliteStore


async def test_without_a_uri_the_store_is_sqlite_in_the_data_dir(tmp_path: Path) -> None:
    store = await open_store(mongodb_uri=None, mongodb_db="bot", data_dir=tmp_path / ".bot-data")
    try:
        assert isinstance(store, SqliteStore)
        assert store.path == tmp_path / ".bot-data" / "bot.db" and store.path.exists()
        assert await store.ping()
    finally:
        await store.close()


async def test_an_unusable_data_dir_fails_clearly(tmp_path: Path) -> None:
    occupied = tmp_path / "file"
    occupied.write_text("not a directory")
    with pytest.raises(StoreConfigError) as caught:
        await open_store(mongodb_uri=None, mongodb_db="bot", data_dir=occupied / "data")
    assert str(caught.value).startswith("BOT_DATA_DIR=") and "\n" not in str(caught.value)


async def test_with_a_uri_the_store_is_mongodb(mongoeco_uri: str, tmp_path: Path) -> None:
    store = await open_store(mongodb_uri=mongoeco_uri, mongodb_db="factory_t", data_dir=tmp_path)
    try:
        assert isinstance(store, MongoStore) and await store.ping()
        await store.client.drop_database("factory_t")
    finally:
        await store.close()
    assert not (tmp_path / "bot.db").exists()


@pytest.mark.parametrize(
    ("uri", "db", "names"),
    [
        ("not-a-uri", "bot", "MONGODB_URI"),
        ("mongodb://localhost:notaport", "bot", "MONGODB_URI"),
        ("mongodb://", "bot", "MONGODB_URI"),
        ("mongodb://user@name:p@ss@host", "bot", "MONGODB_URI"),
        ("mongodb+srv://cluster.example.com:27017", "bot", "MONGODB_URI"),
        ("mongodb://localhost", "my.db", "MONGODB_DB"),
        ("mongodb://localhost", "", "MONGODB_DB"),
    ],
)
async def test_bad_mongo_settings_fail_clearly(
    uri: str, db: str, names: str, tmp_path: Path
) -> None:
    with pytest.raises(StoreConfigError) as caught:
        await open_store(mongodb_uri=uri, mongodb_db=db, data_dir=tmp_path)
    message = str(caught.value)
    assert message.startswith(names) and "\n" not in message


async def test_cache_choice(redis_url: str) -> None:
    memory = open_cache(redis_url=None)
    assert isinstance(memory, MemoryCache)
    resilient = open_cache(redis_url=redis_url)
    try:
        assert isinstance(resilient, ResilientCache) and await resilient.ping()
    finally:
        await resilient.close()


def test_bad_redis_url_fails_clearly() -> None:
    with pytest.raises(StoreConfigError) as caught:
        open_cache(redis_url="http://localhost:6379")
    assert str(caught.value).startswith("REDIS_URL") and "\n" not in str(caught.value)
