"""Exactly-once answering: an event (or message) is handled only on its first delivery.

Slack re-delivers an event when it thinks the ack was late, and several bot processes may
receive the same retry. A local set catches repeats in this process for free; the core's
`first_delivery` (the cache's SET NX) decides across processes. If the shared cache fails we
answer anyway (fail open) rather than drop a message: the local set still stops local repeats.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from cachetools import TTLCache

from adapters.slack.logs import emit
from bot import metrics

_LOG = logging.getLogger(__name__)


class Deduplicator:
    def __init__(
        self,
        first_delivery: Callable[[str], Awaitable[bool]],
        *,
        local_ttl: float = 900.0,
        maxsize: int = 100_000,
    ) -> None:
        self._first_delivery = first_delivery
        self._local: TTLCache[str, bool] = TTLCache(maxsize, local_ttl)

    async def first(self, key: str) -> bool:
        """True exactly once per key (per process always; across processes via the core)."""
        if key in self._local:
            self._count(key, "local")
            return False
        self._local[key] = True
        try:
            first = await self._first_delivery(key)
        except Exception as exc:  # the cache is down: answer rather than drop
            metrics.ERRORS.labels("slack", "dedup_unavailable").inc()
            emit(_LOG, "slack_dedup_unavailable", logging.WARNING, error=type(exc).__name__)
            return True
        if not first:
            self._count(key, "shared")
        return first

    @staticmethod
    def _count(key: str, where: str) -> None:
        metrics.DEDUPLICATED_EVENTS.labels("slack").inc()
        emit(_LOG, "slack_event_duplicate", key=key, where=where)
