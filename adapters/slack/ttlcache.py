"""A small bounded in-process cache with per-entry expiry.

Used for things that are cheap to lose and costly to refetch on every event (user names, which
threads the bot is in, installations): bounded so a busy workspace cannot grow memory without
limit, expiring so changes made elsewhere are picked up.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    def __init__(
        self,
        maxsize: int,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if maxsize <= 0 or ttl <= 0:
            raise ValueError("maxsize and ttl must be positive")
        self._data: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._maxsize = maxsize
        self._ttl = ttl
        self._clock = clock

    def get(self, key: K) -> V | None:
        item = self._data.get(key)
        if item is None:
            return None
        expires, value = item
        if expires <= self._clock():
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return value

    def set(self, key: K, value: V, ttl: float | None = None) -> None:
        self._data[key] = (self._clock() + (self._ttl if ttl is None else ttl), value)
        self._data.move_to_end(key)
        while len(self._data) > self._maxsize:
            self._data.popitem(last=False)

    def add(self, key: K, value: V, ttl: float | None = None) -> bool:
        """Set only if absent (or expired); True if this call set it."""
        if self.get(key) is not None:
            return False
        self.set(key, value, ttl)
        return True

    def pop(self, key: K) -> None:
        self._data.pop(key, None)

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
