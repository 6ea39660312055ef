"""Which of the bot's shards this process runs, and how fast it may start them.

A bot past 2,500 servers must shard (Discord closes an unsharded or under-sharded connection
with 4011), and one process can run every shard or a range of them: `DISCORD_SHARD_COUNT=N` is
the total across all processes, `DISCORD_SHARDS=first-last` the ones this process runs (ids
0 to N-1; a single `k` is one shard). Discord routes a guild's events to shard
`(guild_id >> 22) % N` and every event without a guild (DMs) to shard 0.

Slash commands are synced by the process that holds shard 0, and only by it: every complete
deployment has exactly one such process (the ranges cover 0 to N-1), it needs no coordination
between machines, and it is the one that receives DMs anyway. The others leave the commands
alone (several processes writing the same set would race and spend Discord's rate limit).

Start-up pacing: Discord lets `max_concurrency` shards identify per 5 seconds, shard `k` in
bucket `k % max_concurrency`, one identify per bucket per 5 seconds (`GET /gateway/bot` says
the bot's `max_concurrency`; 1 for most bots). discord.py's own hook waits 5 s before every
identify after the first whatever the concurrency; `IdentifyPacer` waits only for the bucket.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

IDENTIFY_WINDOW = 5.0  # seconds: one identify per bucket per window (Discord's sharding docs)
MAX_SHARDS = 10_000
_MAX_TEXT = 24  # "first-last" with two five-digit ids and spaces: longer is refused unread


class ShardRangeError(ValueError):
    """DISCORD_SHARDS / DISCORD_SHARD_COUNT cannot be used as given; one line saying why."""


def parse_shard_range(text: str) -> tuple[int, int]:
    """`first-last` (or one id `k`), ASCII digits only; ShardRangeError otherwise."""
    if len(text) > _MAX_TEXT:
        raise ShardRangeError("must be first-last, e.g. 0-3 (shard ids, as numbers)")
    first, sep, last = text.strip().partition("-")
    parts = (first.strip(), last.strip()) if sep else (first.strip(), first.strip())
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise ShardRangeError("must be first-last, e.g. 0-3 (shard ids, as numbers)")
    low, high = int(parts[0]), int(parts[1])
    if low > high:
        raise ShardRangeError(f"must be first-last with first ≤ last, not {low}-{high}")
    return low, high


@dataclass(frozen=True)
class ShardPlan:
    """This process's shards: `ids` None means all of `count` (or no sharding when count is
    None too)."""

    count: int | None = None
    ids: tuple[int, ...] | None = None

    @classmethod
    def from_settings(cls, shards: str, count: int | None) -> ShardPlan:
        """Checked against each other: one line naming the variable to fix."""
        if not shards.strip():
            return cls(count=count)
        try:
            first, last = parse_shard_range(shards)
        except ShardRangeError as exc:
            raise ShardRangeError(f"DISCORD_SHARDS {exc}") from None
        if count is None:
            raise ShardRangeError(
                f"DISCORD_SHARDS={first}-{last} needs DISCORD_SHARD_COUNT, the total number of "
                "shards across all processes (e.g. 4 for DISCORD_SHARDS=0-1 here and 2-3 elsewhere)"
            )
        if last >= count:
            raise ShardRangeError(
                f"DISCORD_SHARDS={first}-{last} goes past DISCORD_SHARD_COUNT={count}: "
                f"shard ids run from 0 to {count - 1}"
            )
        return cls(count=count, ids=tuple(range(first, last + 1)))

    @property
    def syncs_commands(self) -> bool:
        """Whether this process syncs the slash commands: it holds shard 0 (module docstring)."""
        return self.ids is None or 0 in self.ids


class IdentifyPacer:
    """Waits before an identify only as long as its bucket (`shard % max_concurrency`) needs."""

    def __init__(self, max_concurrency: int = 1, *, window: float = IDENTIFY_WINDOW) -> None:
        self.max_concurrency = max(1, max_concurrency)
        self.window = window
        self._next: dict[int, float] = {}  # bucket -> when its next identify may go

    async def wait(self, shard_id: int | None) -> None:
        bucket = (shard_id or 0) % self.max_concurrency
        now = time.monotonic()
        slot = max(now, self._next.get(bucket, now))
        self._next[bucket] = slot + self.window  # reserved before sleeping: no lock needed
        if slot > now:
            await asyncio.sleep(slot - now)
