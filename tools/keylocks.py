"""One asyncio lock per key, alive only while someone holds or waits for it.

The bot serialises turns per session and the tool executor serialises identical write calls per
idempotency key with this one helper: a plain `dict[key, asyncio.Lock]` would grow by one lock
per session or call forever, so each entry counts its users and is dropped when the last leaves.
Waiters are served in arrival order (asyncio.Lock is FIFO).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # holding or waiting


class KeyLocks(Generic[K]):
    def __init__(self) -> None:
        self._entries: dict[K, _Entry] = {}

    @asynccontextmanager
    async def hold(self, key: K) -> AsyncIterator[None]:
        entry = self._entries.setdefault(key, _Entry())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[key]

    def users(self, key: K) -> int:
        """How many tasks hold or wait for `key` (0 when nobody does)."""
        entry = self._entries.get(key)
        return 0 if entry is None else entry.users

    def __len__(self) -> int:
        return len(self._entries)
