"""Exactly-once answering: an event (or message) is handled only on its first delivery.

Slack re-delivers an event when it thinks the ack was late; a Discord gateway may replay
dispatches after a RESUME; and several bot processes may receive the same event. A local set
catches repeats in this process for free; the core's `first_delivery` (the cache's SET NX)
decides across processes. If the shared cache fails we answer anyway (fail open) rather than
drop a message: the local set still stops local repeats.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from cachetools import TTLCache

from adapters.common.logs import emit
from bot import metrics

_LOG = logging.getLogger(__name__)


class Deduplicator:
    def __init__(
        self,
        first_delivery: Callable[[str], Awaitable[bool]],
        *,
        local_ttl: float = 900.0,
        maxsize: int = 100_000,
        platform: str = "slack",
    ) -> None:
        self._first_delivery = first_delivery
        self._platform = platform
        self._local: TTLCache[str, bool] = TTLCache(maxsize=maxsize, ttl=local_ttl)

    async def first(self, key: str) -> bool:
        """True exactly once per key (per process always; across processes via the core)."""
        if key in self._local:
            self._count(key, "local")
            return False
        self._local[key] = True
        try:
            first = await self._first_delivery(key)
        except Exception as exc:  # the cache is down: answer rather than drop
            metrics.ERRORS.labels(self._platform, "dedup_unavailable").inc()
            emit(
                _LOG,
                f"{self._platform}_dedup_unavailable",
                logging.WARNING,
                error=type(exc).__name__,
            )
            return True
        if not first:
            self._count(key, "shared")
        return first

    def _count(self, key: str, where: str) -> None:
        metrics.DEDUPLICATED_EVENTS.labels(self._platform).inc()
        emit(_LOG, f"{self._platform}_event_duplicate", key=key, where=where)
