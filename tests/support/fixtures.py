"""Reusable pytest fixtures for real servers. Import them into a conftest:

    from tests.support.fixtures import mongo_uri, mongoeco_uri, redis_prefix, redis_proxy, redis_url

`mongoeco_uri` always runs mongoeco; `mongo_uri` is TEST_MONGODB_URI when set (a real MongoDB),
else mongoeco. When a server is missing the tests skip, except under CI (env CI set), where a
missing server is a broken setup and fails loudly.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

import pytest
import redis

from testkit.mongoeco import MongoecoMissing, mongoeco_python, mongoeco_server
from tests.support.ci import missing
from tests.support.tcp_proxy import TcpProxy

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="session")
def mongoeco_uri() -> Iterator[str]:
    """URI of a mongoeco server (in-memory) shared by the whole test session."""
    try:
        python = mongoeco_python()
    except MongoecoMissing as exc:
        missing(str(exc))
    with mongoeco_server(python) as uri:
        yield uri


@pytest.fixture(scope="session")
def mongo_uri(request: pytest.FixtureRequest) -> str:
    """A real MongoDB from TEST_MONGODB_URI when set, else the shared mongoeco server."""
    real = os.environ.get("TEST_MONGODB_URI")
    if real:
        return real
    uri: str = request.getfixturevalue("mongoeco_uri")
    return uri


@pytest.fixture(scope="session")
def redis_url() -> str:
    """REDIS_URL or redis://127.0.0.1:6379/0, checked to answer a PING."""
    url = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        missing(f"Redis at {url} does not answer: {exc}")
    finally:
        client.close()
    return url


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix unique to this test; every key under it is deleted afterwards."""
    prefix = f"test:{uuid.uuid4().hex[:12]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=500))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
async def redis_proxy(redis_url: str) -> AsyncIterator[TcpProxy]:
    """A TCP proxy in front of Redis that a test can cut (`stop()`) and restore (`start()`)."""
    parts = urlsplit(redis_url)
    made = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    await made.start()
    try:
        yield made
    finally:
        await made.stop()
