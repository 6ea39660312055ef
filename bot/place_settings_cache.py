"""Where a turn reads its place's settings: the store, cached per team, fresh on every replica.

A turn must not pay a store round trip for settings that change a few times a month, and a
change made through one replica must apply in all of them at their next turn. So each process
keeps a team's settings (the team's values and every channel that overrides them) with the
team's version number, kept in the shared `Cache` (Redis when configured): a change bumps the
version, and every turn compares its copy's version with the shared one (one cache read, a
dict lookup in a single process) before using it. A copy is also dropped after `MAX_AGE`
seconds, so a version key evicted from Redis costs a minute of staleness at most.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from cachetools import LRUCache

from bot.keys import TeamKey
from bot.stores.place_settings import TEAM_WIDE, PlaceSettingsStore, SettingChange
from bot.stores.protocols import Cache

MAX_AGE = 60.0
VERSION_TTL = 30 * 86_400.0
TEAMS_KEPT = 10_000


def version_key(team: TeamKey) -> str:
    return f"place-settings-version:{team.id}"


@dataclass(frozen=True, slots=True)
class _Copy:
    version: int
    loaded: float
    team: Mapping[str, str]
    channels: Mapping[str, Mapping[str, str]]


class CachedPlaceSettings:
    """`bot.policy.PlaceSettingsSource` over a `PlaceSettingsStore`; changes go through it."""

    def __init__(self, store: PlaceSettingsStore, cache: Cache) -> None:
        self.store = store
        self.cache = cache
        self._copies: LRUCache[str, _Copy] = LRUCache(maxsize=TEAMS_KEPT)

    async def place_values(
        self, team: TeamKey, channel: str
    ) -> tuple[Mapping[str, str], Mapping[str, str]]:
        copy = await self._copy(team)
        return copy.team, copy.channels.get(channel, {})

    async def team_values(
        self, team: TeamKey
    ) -> tuple[Mapping[str, str], Mapping[str, Mapping[str, str]]]:
        """The team's own values and every overriding channel's (read-only), from the same
        cached copy turns use, so an admin's overview costs no store round trip."""
        copy = await self._copy(team)
        return copy.team, copy.channels

    async def _copy(self, team: TeamKey) -> _Copy:
        version = int(await self.cache.get_json(version_key(team)) or 0)
        copy = self._copies.get(team.id)
        if copy is None or copy.version != version or time.monotonic() - copy.loaded > MAX_AGE:
            own, _ = await self.store.place_values(team, TEAM_WIDE)
            channels = await self.store.overrides(team)
            copy = _Copy(version, time.monotonic(), own, channels)
            self._copies[team.id] = copy
        return copy

    async def change(
        self, team: TeamKey, channel: str, changes: Mapping[str, str | None], *, by: str
    ) -> list[SettingChange]:
        done = await self.store.change(team, channel, changes, by=by, at=time.time())
        if done:
            await self.cache.incr([version_key(team)], ttl=VERSION_TTL)
            self._copies.pop(team.id, None)
        return done
