"""Write tools act once per request (the message that started the turn) and arguments, even if
the model repeats the call.

Models re-issue calls (after a timeout, twice in one response, in a round after the result);
and the durable inbox re-runs a turn whose process died (the same message, the same turn). For a
tool that changes something, the first result is stored under `sha256(session_id, event, tool
name, canonical JSON of the validated arguments)` for a window and replayed instead of acting
again. The event is the platform's message id (else the turn id), so a re-run of the same
message replays, while a new message asking for the same thing again acts again: the person
asked twice. While a call runs its key holds a "started" marker: a process that finds one (the
first died mid-call, and its turn is being re-run elsewhere) reports the outcome unknown instead
of acting a second time. Storage is the `IdempotencyCache` protocol, which the bot's
Redis/in-process `Cache` satisfies as-is; this package does not import the bot. A per-key
asyncio lock (`tools.keylocks`) keeps two identical calls in flight in this process from both
acting.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any, Protocol

from cachetools import TLRUCache
from pydantic import BaseModel

KEY_PREFIX = "tools:idem:"


class IdempotencyCache(Protocol):
    async def get_json(self, key: str) -> Any | None: ...

    async def set_json(self, key: str, value: Any, *, ttl: float) -> None: ...

    async def delete(self, key: str) -> None: ...


def _expires(_key: str, entry: tuple[float, str], now: float) -> float:
    return now + entry[0]


class MemoryIdempotencyCache:
    """The in-process default: `cachetools.TLRUCache` (each entry lives for the TTL it was
    written with; bounded: past `maxsize` the least recently used entry goes first)."""

    def __init__(self, *, maxsize: int = 100_000, clock: Callable[[], float] = time.monotonic):
        self._data: TLRUCache[str, tuple[float, str]] = TLRUCache(maxsize, _expires, timer=clock)

    async def get_json(self, key: str) -> Any | None:
        hit = self._data.get(key)
        return None if hit is None else json.loads(hit[1])

    async def set_json(self, key: str, value: Any, *, ttl: float) -> None:
        self._data[key] = (ttl, json.dumps(value))

    async def delete(self, key: str) -> None:
        self._data.pop(key, None)


def idempotency_key(session_id: str, tool_name: str, args: BaseModel, *, event: str = "") -> str:
    """`event`: the request the call serves (message or turn id); "" scopes it to the session."""
    canonical = json.dumps(
        args.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    parts = (
        (session_id, event, tool_name, canonical) if event else (session_id, tool_name, canonical)
    )
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    return KEY_PREFIX + digest[:40]
