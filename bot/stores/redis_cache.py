"""`Cache` on Redis (`redis.asyncio`): shared by every bot process, so de-duplication and
per-session locks hold across processes. Unreachable Redis raises `StoreUnavailable`; wrap it in
`ResilientCache` to keep answering through an outage.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import redis.asyncio as redis
from redis.asyncio.lock import Lock
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError, LockNotOwnedError, ReadOnlyError
from redis.exceptions import TimeoutError as RedisTimeoutError

from bot.stores.cache_common import ttl_ms
from bot.stores.protocols import LockTimeout, StoreUnavailable

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "bot:"
# Short timeouts so an outage is noticed in about a second, not after the OS's TCP timeout.
DEFAULT_TIMEOUT = 1.0

# How often a waiter asks Redis again for a held lock (redis-py's Lock polls at a fixed pace).
LOCK_POLL = 0.01

UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,  # a replica after failover: as good as down for writes
    OSError,
    TimeoutError,
)

_RELEASE_ERRORS: tuple[type[BaseException], ...] = (LockError, *UNAVAILABLE_ERRORS)
_PING_ERRORS: tuple[type[BaseException], ...] = (*UNAVAILABLE_ERRORS, redis.RedisError)


@contextmanager
def _unavailable(op: str) -> Iterator[None]:
    try:
        yield
    except UNAVAILABLE_ERRORS as exc:
        raise StoreUnavailable(f"Redis unavailable during {op}: {exc}") from exc


class RedisCache:
    """Keys are namespaced with `prefix` (locks under `prefix + "lock:"`)."""

    def __init__(self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX) -> None:
        self.client = client
        self.prefix = prefix

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = DEFAULT_PREFIX, timeout: float = DEFAULT_TIMEOUT
    ) -> RedisCache:
        """A client with short socket timeouts and a single immediate retry (for a stale
        pooled connection after a Redis restart). Raises ValueError for a malformed URL."""
        client = redis.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 1),
            health_check_interval=30,
        )
        return cls(client, prefix=prefix)

    def _key(self, key: str) -> str:
        return self.prefix + key

    async def get_json(self, key: str) -> Any | None:
        with _unavailable("get"):
            raw = await self.client.get(self._key(key))
        return None if raw is None else json.loads(raw)

    async def set_json(self, key: str, value: Any, *, ttl: float) -> None:
        payload, px = json.dumps(value), ttl_ms(ttl)
        with _unavailable("set"):
            await self.client.set(self._key(key), payload, px=px)

    async def delete(self, key: str) -> None:
        with _unavailable("delete"):
            await self.client.delete(self._key(key))

    async def set_nx(self, key: str, *, ttl: float) -> bool:
        px = ttl_ms(ttl)
        with _unavailable("set_nx"):
            return bool(await self.client.set(self._key(key), b"1", nx=True, px=px))

    async def incr(
        self, keys: Sequence[str], *, ttl: float, amounts: Sequence[int] | None = None
    ) -> list[int]:
        px = ttl_ms(ttl)
        with _unavailable("incr"):
            async with self.client.pipeline(transaction=False) as pipe:
                for i, key in enumerate(keys):
                    full = self._key(key)
                    # Created with its TTL only when missing, so a window never moves (works on
                    # any Redis version, unlike PEXPIRE NX).
                    pipe.set(full, 0, nx=True, px=px)
                    pipe.incrby(full, 1 if amounts is None else int(amounts[i]))
                results = await pipe.execute()
        return [int(results[i]) for i in range(1, len(results), 2)]

    @asynccontextmanager
    async def lock(
        self, key: str, *, ttl: float, wait: float, keep_alive: bool = False
    ) -> AsyncIterator[None]:
        """redis-py's `Lock`: SET NX PX with a random token, released by a script that deletes
        the key only while it still holds our token (after expiry someone else may own it).
        `keep_alive`: `Lock.reacquire` (token-checked) every ttl/3 while held."""
        lock = Lock(
            self.client,
            self.prefix + "lock:" + key,
            timeout=ttl_ms(ttl) / 1000,
            sleep=LOCK_POLL,
            blocking_timeout=max(wait, 0.0),
            thread_local=False,  # one Lock object per acquisition; tasks share the thread
        )
        with _unavailable("lock"):
            if not await lock.acquire():
                raise LockTimeout(f"lock {key!r} not acquired within {wait}s")
        keeper = asyncio.create_task(_keep_alive(lock, key, ttl)) if keep_alive else None
        try:
            yield
        finally:
            if keeper is not None:
                keeper.cancel()
            try:
                await lock.release()
            except _RELEASE_ERRORS as exc:
                # Not fatal: the lock expires after `ttl` on its own (or already did).
                log.warning("could not release Redis lock %r: %s", key, exc)

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except _PING_ERRORS:
            return False

    async def close(self) -> None:
        await self.client.aclose()


async def _keep_alive(lock: Lock, key: str, ttl: float) -> None:
    """Renew a held lock until cancelled; stop if it is no longer ours (it expired during a
    stall and someone else took it: the holder finds out when it releases)."""
    while True:
        await asyncio.sleep(ttl / 3)
        try:
            await lock.reacquire()
        except LockNotOwnedError:
            log.warning("redis lock %r lost while held", key)
            return
        except _RELEASE_ERRORS:
            continue  # Redis is away: try again; the lock expires on its own if we die
