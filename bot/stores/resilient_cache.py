"""A cache that survives a Redis outage: the bot keeps answering while Redis is down.

When the primary (Redis) fails to answer, the failure is logged once and calls are served by
the in-process fallback; every `probe_interval` seconds one call tries the primary again, and
the first success switches back. Nothing durable lives in a cache, so the cost of an outage is
only that de-duplication and locks are per-process until Redis returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

from bot.stores.protocols import Cache, StoreUnavailable
from bot.stores.redis_cache import UNAVAILABLE_ERRORS

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_PROBE_INTERVAL = 3.0
_FAILOVER_ERRORS: tuple[type[BaseException], ...] = (StoreUnavailable, *UNAVAILABLE_ERRORS)


class ResilientCache:
    """`Cache` over `primary`, falling back to `fallback` (a MemoryCache) while it is down.

    Values written to the fallback during an outage stay visible (and keep de-duplicating)
    after recovery until they expire. Locks are always taken in the fallback first and then in
    the primary, so they stay exclusive within this process across a failover.
    """

    def __init__(
        self,
        primary: Cache,
        fallback: Cache,
        *,
        probe_interval: float = DEFAULT_PROBE_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self._probe_interval = probe_interval
        self._clock = clock
        self._down = False
        self._next_probe = 0.0

    def _primary_usable(self) -> bool:
        if not self._down:
            return True
        now = self._clock()
        if now < self._next_probe:
            return False
        self._next_probe = now + self._probe_interval  # this call is the probe
        return True

    def _failed(self, exc: BaseException) -> None:
        self._next_probe = self._clock() + self._probe_interval
        if not self._down:
            self._down = True
            log.warning("cache primary unavailable, using the in-process cache: %s", exc)

    def _answered(self) -> None:
        if self._down:
            self._down = False
            log.warning("cache primary answers again; leaving the in-process cache")

    async def _try_primary(self, op: Callable[[Cache], Awaitable[T]]) -> tuple[bool, T | None]:
        """(True, result) if the primary answered; (False, None) to use the fallback."""
        if not self._primary_usable():
            return False, None
        try:
            result = await op(self.primary)
        except _FAILOVER_ERRORS as exc:
            self._failed(exc)
            return False, None
        self._answered()
        return True, result

    async def get_json(self, key: str) -> Any | None:
        ok, value = await self._try_primary(lambda c: c.get_json(key))
        if ok and value is not None:
            return value
        return await self.fallback.get_json(key)

    async def set_json(self, key: str, value: Any, *, ttl: float) -> None:
        ok, _ = await self._try_primary(lambda c: c.set_json(key, value, ttl=ttl))
        if ok:
            await self.fallback.delete(key)  # an outage-era copy must not shadow the new value
        else:
            await self.fallback.set_json(key, value, ttl=ttl)

    async def delete(self, key: str) -> None:
        await self._try_primary(lambda c: c.delete(key))
        await self.fallback.delete(key)

    async def set_nx(self, key: str, *, ttl: float) -> bool:
        ok, created = await self._try_primary(lambda c: c.set_nx(key, ttl=ttl))
        if not ok:
            return await self.fallback.set_nx(key, ttl=ttl)
        # A key first seen during the outage lives only in the fallback: still a duplicate.
        return bool(created) and await self.fallback.get_json(key) is None

    async def incr(
        self, keys: Sequence[str], *, ttl: float, amounts: Sequence[int] | None = None
    ) -> list[int]:
        ok, counts = await self._try_primary(lambda c: c.incr(keys, ttl=ttl, amounts=amounts))
        if ok and counts is not None:
            return counts
        return await self.fallback.incr(
            keys, ttl=ttl, amounts=amounts
        )  # per-process counts during an outage

    @asynccontextmanager
    async def lock(
        self, key: str, *, ttl: float, wait: float, keep_alive: bool = False
    ) -> AsyncIterator[None]:
        deadline = self._clock() + wait
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(
                self.fallback.lock(key, ttl=ttl, wait=wait, keep_alive=keep_alive)
            )
            if self._primary_usable():
                remaining = max(0.0, deadline - self._clock())
                try:
                    await stack.enter_async_context(
                        self.primary.lock(key, ttl=ttl, wait=remaining, keep_alive=keep_alive)
                    )
                except _FAILOVER_ERRORS as exc:
                    self._failed(exc)
                else:
                    self._answered()
            yield

    async def ping(self) -> bool:
        """Whether the primary answers (the fallback always does); probes regardless of timing."""
        ok = await self.primary.ping()
        if ok:
            self._answered()
        else:
            self._failed(StoreUnavailable("ping got no answer"))
        return ok

    async def close(self) -> None:
        try:
            await self.primary.close()
        finally:
            await self.fallback.close()
