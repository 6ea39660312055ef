"""ResilientCache keeps the bot answering through a Redis outage and goes back when it returns.

The outage is real: Redis is reached through a TCP proxy that is cut and restored, or through a
port where nothing listens, or a server that accepts and never answers.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aredis

from bot.stores.memory_cache import MemoryCache
from bot.stores.protocols import LockTimeout, StoreUnavailable
from bot.stores.redis_cache import RedisCache
from bot.stores.resilient_cache import ResilientCache
from tests.support.tcp_proxy import TcpProxy


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def via(redis_proxy: TcpProxy, redis_url: str) -> str:
    db = urlsplit(redis_url).path or "/0"
    return f"redis://127.0.0.1:{redis_proxy.port}{db}"


async def test_redis_cache_reports_unavailable_quickly() -> None:
    cache = RedisCache.from_url(f"redis://127.0.0.1:{closed_port()}/0")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        await cache.get_json("k")
    assert not await cache.ping()
    assert time.monotonic() - started < 2
    await cache.close()


async def test_a_server_that_never_answers_times_out() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    cache = RedisCache.from_url(f"redis://127.0.0.1:{port}/0", timeout=0.2)
    started = time.monotonic()
    try:
        with pytest.raises(StoreUnavailable):
            await cache.set_json("k", 1, ttl=5)
        assert time.monotonic() - started < 2
    finally:
        await cache.close()
        server.close()


async def test_falls_back_when_redis_is_down(caplog: pytest.LogCaptureFixture) -> None:
    primary = RedisCache.from_url(f"redis://127.0.0.1:{closed_port()}/0")
    cache = ResilientCache(primary, MemoryCache(), probe_interval=60)
    with caplog.at_level(logging.WARNING, logger="bot.stores.resilient_cache"):
        await cache.set_json("state", {"a": 1}, ttl=30)
        assert await cache.get_json("state") == {"a": 1}
        assert await cache.set_nx("event", ttl=30)
        assert not await cache.set_nx("event", ttl=30)
        async with cache.lock("session", ttl=5, wait=1):
            with pytest.raises(LockTimeout):
                async with cache.lock("session", ttl=5, wait=0.05):
                    pass
        await cache.delete("state")
        assert await cache.get_json("state") is None
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == 1
    await cache.close()


async def test_fails_over_and_recovers(
    redis_proxy: TcpProxy, redis_url: str, redis_prefix: str
) -> None:
    cache = ResilientCache(
        RedisCache.from_url(via(redis_proxy, redis_url), prefix=redis_prefix, timeout=0.5),
        MemoryCache(),
        probe_interval=0.2,
    )
    direct = aredis.Redis.from_url(redis_url)
    try:
        await cache.set_json("before", 1, ttl=30)
        assert await direct.get(redis_prefix + "before") == b"1"

        await redis_proxy.stop()  # Redis goes away
        started = time.monotonic()
        await cache.set_json("during", 2, ttl=30)
        assert await cache.set_nx("event:E1", ttl=30)
        assert await cache.get_json("during") == 2
        assert time.monotonic() - started < 2
        async with cache.lock("session:s1", ttl=5, wait=1):
            pass
        assert await direct.get(redis_prefix + "during") is None

        await redis_proxy.start()  # ...and comes back on the same port
        await asyncio.sleep(0.3)
        await cache.set_json("after", 3, ttl=30)
        assert await direct.get(redis_prefix + "after") == b"3"
        assert await cache.get_json("during") == 2  # written in the outage, still served
        assert not await cache.set_nx("event:E1", ttl=30)  # still a duplicate after recovery
        assert await cache.get_json("before") == 1
        async with cache.lock("session:s1", ttl=5, wait=1):
            assert await direct.exists(redis_prefix + "lock:session:s1")
    finally:
        await direct.aclose()
        await cache.close()


async def test_locks_stay_exclusive_in_process_across_a_failover(
    redis_proxy: TcpProxy, redis_url: str, redis_prefix: str
) -> None:
    cache = ResilientCache(
        RedisCache.from_url(via(redis_proxy, redis_url), prefix=redis_prefix, timeout=0.5),
        MemoryCache(),
        probe_interval=0.1,
    )
    try:
        async with cache.lock("session:s1", ttl=5, wait=1):  # held in Redis and in-process
            await redis_proxy.stop()
            with pytest.raises(LockTimeout):
                async with cache.lock("session:s1", ttl=5, wait=0.2):
                    pass
    finally:
        await cache.close()
