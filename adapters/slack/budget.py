"""A per-team, per-method Web API budget for the reply sink's progress calls.

Slack limits every Web API method per workspace and app, by tier (documented floors: Tier 2 20
calls a minute, Tier 3 50, Tier 4 100), and answers a call over the limit with HTTP 429 and a
`Retry-After`. A streamed answer's progress calls (chat.startStream/appendStream, chat.update
previews, the working reaction) are optional; its final text is not. So progress asks
`try_spend` first and is skipped, not waited for, when the (team, method) bucket is empty or when
Slack answered 429 for that team and method within its Retry-After; final calls `spend` (they
count, but are never refused) and may wait out a known Retry-After themselves.

Buckets are aiolimiter's leaky buckets, sized so that no 60-second window holds more than the
tier's per-minute floor: a sixth of it as burst, leaking five sixths a minute (burst + a
minute's leak = the floor). Buckets and cooldowns live in bounded in-process caches: the budget
is per process. With several replicas each keeps its own, so together they may exceed a team's
floor; Slack then answers 429 to one of them, which stops that team's progress calls of that
method for the Retry-After, and the final text still goes out (README: "Web API budget").
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping

from aiolimiter import AsyncLimiter
from cachetools import LRUCache, TLRUCache
from prometheus_client import Counter
from slack_sdk.errors import SlackApiError

from bot import metrics

# Documented per-minute floors of the tiers the reply path uses (docs.slack.dev, method pages).
TIER_2, TIER_3, TIER_4 = 20.0, 50.0, 100.0
DEFAULT_PER_MINUTE: Mapping[str, float] = {
    "chat.startStream": TIER_2,
    "chat.appendStream": TIER_4,
    "chat.stopStream": TIER_2,
    "chat.update": TIER_3,
    "reactions.add": TIER_3,
    "reactions.remove": TIER_2,
}
_BURST_SHARE = 1 / 6  # of the per-minute floor; the rest leaks over the minute

SKIPPED = Counter(
    "bot_platform_api_skipped_total",
    "Optional (progress) Web API calls not made, by method and reason "
    "(budget: the team's budget for that method is spent | rate_limited: within a 429's "
    "Retry-After).",
    ["platform", "method", "reason"],
    registry=metrics.REGISTRY,
)


def retry_after(exc: BaseException) -> float | None:
    """Seconds to wait from a 429 answer (its Retry-After, 1 if absent), else None."""
    if not isinstance(exc, SlackApiError):
        return None
    response = exc.response
    if getattr(response, "status_code", None) != 429:
        return None
    headers = getattr(response, "headers", None) or {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    if isinstance(value, list):
        value = value[0] if value else None
    try:
        seconds = float(value) if value is not None else 1.0
    except (TypeError, ValueError):
        seconds = 1.0
    return min(max(seconds, 0.0), 3600.0) if math.isfinite(seconds) else 1.0


class WebApiBudget:
    """Token buckets per (team, method) plus the Retry-After cooldowns Slack asked for.

    The caller names each method's per-minute floor (`per_minute`; None or 0: unbudgeted, only
    a 429's cooldown holds it back); a bucket keeps the rate it was made with. At most
    `max_keys` buckets and cooldowns are kept (least recently used dropped: a dropped bucket
    comes back full, so churn past that size could allow one extra burst, never a wait).
    """

    def __init__(self, *, max_keys: int = 20_000) -> None:
        self._buckets: LRUCache[tuple[str, str], AsyncLimiter] = LRUCache(max_keys)
        # Entry value: the loop time the cooldown ends; it expires by itself then.
        self._cooldowns: TLRUCache[tuple[str, str], float] = TLRUCache(
            max_keys, lambda _key, until, _now: until, self._now
        )

    @staticmethod
    def _now() -> float:
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:
            return 0.0

    def _bucket(self, team: str, method: str, per_minute: float | None) -> AsyncLimiter | None:
        if not per_minute or per_minute <= 0:
            return None
        key = (team, method)
        bucket = self._buckets.get(key)
        if bucket is None:
            burst = max(1.0, per_minute * _BURST_SHARE)
            # `burst` flows out per `period`: (per_minute - burst) a minute.
            period = 60.0 * burst / max(per_minute - burst, 1e-9)
            bucket = self._buckets[key] = AsyncLimiter(burst, period)
        return bucket

    def blocked_for(self, team: str, method: str) -> float:
        """Seconds left of a Retry-After Slack gave for this team and method (0: none)."""
        until = self._cooldowns.get((team, method))
        return max(0.0, until - self._now()) if until is not None else 0.0

    async def try_spend(self, team: str, method: str, per_minute: float | None) -> bool:
        """For an optional call: take one call from the bucket, or say no (never waits)."""
        if self.blocked_for(team, method) > 0:
            SKIPPED.labels("slack", method, "rate_limited").inc()
            return False
        bucket = self._bucket(team, method, per_minute)
        if bucket is None:
            return True
        if not bucket.has_capacity():
            SKIPPED.labels("slack", method, "budget").inc()
            return False
        await bucket.acquire()  # it has capacity: returns without suspending
        return True

    async def spend(self, team: str, method: str, per_minute: float | None) -> None:
        """For a call that goes out anyway: count it while the bucket has room."""
        bucket = self._bucket(team, method, per_minute)
        if bucket is not None and bucket.has_capacity():
            await bucket.acquire()

    def rate_limited(self, team: str, method: str, seconds: float) -> None:
        """Slack answered 429: hold this team's calls of `method` back for `seconds`."""
        until = self._now() + max(0.0, seconds)
        key = (team, method)
        if until > (self._cooldowns.get(key) or 0.0):
            self._cooldowns[key] = until
