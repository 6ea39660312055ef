"""In-process `Cache`: the default without Redis, and ResilientCache's fallback during outages.

It mirrors RedisCache's semantics (values are JSON round-tripped copies, TTLs, expiring locks
with owner tokens) so code tested against one behaves the same on the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from bot.stores.cache_common import lock_token, ttl_ms
from bot.stores.protocols import LockTimeout

KEPT_ALIVE = 10 * 365 * 86400.0  # a kept-alive lock's TTL in process (released, never expired)
SWEEP_INTERVAL = 1.0  # seconds between purges of expired entries (bounds memory, not latency)


class MemoryCache:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        """`clock` is monotonic seconds (injectable for tests of expiry)."""
        self._clock = clock
        self._values: dict[str, tuple[float, str]] = {}  # key -> (expires_at, json)
        self._locks: dict[str, tuple[float, str]] = {}  # key -> (expires_at, owner token)
        self._waiters: dict[str, deque[asyncio.Event]] = {}  # key -> lock waiters, oldest first
        self._next_sweep = clock() + SWEEP_INTERVAL

    def _live(self, table: dict[str, tuple[float, str]], key: str) -> str | None:
        entry = table.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del table[key]
            return None
        return entry[1]

    def _put(self, table: dict[str, tuple[float, str]], key: str, value: str, ttl: float) -> None:
        now = self._clock()
        table[key] = (now + ttl_ms(ttl) / 1000, value)
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_INTERVAL
            for t in (self._values, self._locks):
                for k in [k for k, (expires, _) in t.items() if expires <= now]:
                    del t[k]

    async def get_json(self, key: str) -> Any | None:
        raw = self._live(self._values, key)
        return None if raw is None else json.loads(raw)

    async def set_json(self, key: str, value: Any, *, ttl: float) -> None:
        self._put(self._values, key, json.dumps(value), ttl)

    async def delete(self, key: str) -> None:
        self._values.pop(key, None)

    async def incr(
        self, keys: Sequence[str], *, ttl: float, amounts: Sequence[int] | None = None
    ) -> list[int]:
        counts: list[int] = []
        for i, key in enumerate(keys):
            step = 1 if amounts is None else int(amounts[i])
            raw = self._live(self._values, key)
            if raw is None:
                self._put(self._values, key, str(step), ttl)
                counts.append(step)
                continue
            count = int(json.loads(raw)) + step
            expires_at, _ = self._values[key]
            self._values[key] = (expires_at, str(count))  # the window's expiry does not move
            counts.append(count)
        return counts

    async def set_nx(self, key: str, *, ttl: float) -> bool:
        ttl_ms(ttl)
        if self._live(self._values, key) is not None:
            return False
        self._put(self._values, key, "1", ttl)
        return True

    @asynccontextmanager
    async def lock(
        self, key: str, *, ttl: float, wait: float, keep_alive: bool = False
    ) -> AsyncIterator[None]:
        """Waiters are served first come, first served, and handed the lock at once. With
        `keep_alive` the lock lasts while held: its holder lives exactly as long as this cache."""
        ttl_ms(ttl)
        token = lock_token()
        await self._acquire(key, token, KEPT_ALIVE if keep_alive else ttl, wait)
        try:
            yield
        finally:
            if self._live(self._locks, key) == token:
                del self._locks[key]
                self._wake_next(key)

    async def _acquire(self, key: str, token: str, ttl: float, wait: float) -> None:
        queue = self._waiters.setdefault(key, deque())
        me = asyncio.Event()
        queue.append(me)
        deadline = self._clock() + wait
        try:
            while True:
                if queue[0] is me and self._live(self._locks, key) is None:
                    self._put(self._locks, key, token, ttl)
                    return
                now = self._clock()
                if now >= deadline:
                    raise LockTimeout(f"lock {key!r} not acquired within {wait}s")
                held = self._locks.get(key)
                until = deadline if held is None else min(deadline, held[0])  # or its expiry
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(me.wait(), max(until - now, 0.001))
                me.clear()
        finally:
            was_head = queue[0] is me
            queue.remove(me)
            if not queue:
                del self._waiters[key]
            elif was_head and self._live(self._locks, key) is None:
                queue[0].set()  # we left without taking a free lock: the next one may

    def _wake_next(self, key: str) -> None:
        queue = self._waiters.get(key)
        if queue:
            queue[0].set()

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        self._values.clear()
        self._locks.clear()
