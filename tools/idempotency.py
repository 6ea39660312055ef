"""Write tools act once per session and arguments, even if the model repeats the call.

Models re-issue calls (after a timeout, in a retried turn, twice in one response). For a tool
that changes something, the first result is stored under
`sha256(session_id, tool name, canonical JSON of the validated arguments)` for a window and
replayed instead of acting again. Storage is the `IdempotencyCache` protocol, which the bot's
Redis/in-process `Cache` satisfies as-is; this package does not import the bot. A per-key
asyncio lock keeps two identical calls in flight in this process from both acting.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

from pydantic import BaseModel

KEY_PREFIX = "tools:idem:"


class IdempotencyCache(Protocol):
    async def get_json(self, key: str) -> Any | None: ...

    async def set_json(self, key: str, value: Any, *, ttl: float) -> None: ...


class MemoryIdempotencyCache:
    """The in-process default: a dict with expiry, pruned as it is written."""

    def __init__(self, *, clock: Any = time.monotonic) -> None:
        self._data: dict[str, tuple[float, str]] = {}
        self._clock = clock

    async def get_json(self, key: str) -> Any | None:
        hit = self._data.get(key)
        if hit is None:
            return None
        expires, text = hit
        if expires <= self._clock():
            self._data.pop(key, None)
            return None
        return json.loads(text)

    async def set_json(self, key: str, value: Any, *, ttl: float) -> None:
        now = self._clock()
        if len(self._data) > 1024:
            for k in [k for k, (exp, _) in self._data.items() if exp <= now]:
                del self._data[k]
        self._data[key] = (now + ttl, json.dumps(value))


def idempotency_key(session_id: str, tool_name: str, args: BaseModel) -> str:
    canonical = json.dumps(
        args.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    digest = hashlib.sha256(
        "\x1f".join((session_id, tool_name, canonical)).encode("utf-8", "surrogatepass")
    ).hexdigest()
    return KEY_PREFIX + digest[:40]


class KeyLocks:
    """One asyncio.Lock per key while anyone holds or waits for it; then forgotten."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)
