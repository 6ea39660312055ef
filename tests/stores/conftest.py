"""Backends for the store and cache contract suites: every test runs against each of them.

The server fixtures (mongoeco_uri, redis_url, redis_prefix) come from tests/support/fixtures.py
through the top-level tests/conftest.py.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.stores.memory_cache import MemoryCache
from bot.stores.protocols import Cache, Store
from bot.stores.redis_cache import RedisCache
from tests.stores.backends import Backend, mongo_backend, sqlite_backend

REAL_MONGODB_URI = os.environ.get("TEST_MONGODB_URI")
BACKENDS = ["sqlite", "mongoeco", *(["mongodb"] if REAL_MONGODB_URI else [])]


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """sqlite always; mongoeco when installed; a real MongoDB when TEST_MONGODB_URI is set."""
    if request.param == "sqlite":
        async with sqlite_backend(tmp_path / "bot.db") as made:
            yield made
        return
    uri = REAL_MONGODB_URI if request.param == "mongodb" else None
    async with mongo_backend(request.param, uri or request.getfixturevalue("mongoeco_uri")) as made:
        yield made


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.store


@pytest.fixture(params=["memory", "redis"])
async def cache(request: pytest.FixtureRequest) -> AsyncIterator[Cache]:
    if request.param == "memory":
        made: Cache = MemoryCache()
    else:
        url = request.getfixturevalue("redis_url")
        made = RedisCache.from_url(url, prefix=request.getfixturevalue("redis_prefix"))
    try:
        yield made
    finally:
        await made.close()
