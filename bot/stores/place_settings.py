"""Settings per place (`/config`): what is stored, and the protocol both backends implement.

One record per place: a team's (`channel` "") or one channel's `key -> value` strings, changed
atomically (several keys in one `/config set` land together or not at all), and a history of
changes: who, when, which key, old and new value. Values are kept as typed (`bot.policy`
parses them when a turn resolves its policy, so a value that stops being valid, a model taken
out of `BOT_MODELS`, falls back instead of failing the turn).

Privacy: settings are the team's, not a person's words about themselves, so `/memory forget
all` keeps them; the history names who changed what, and forget replaces that person's id with
`FORGOTTEN` there (the change stays, its author does not).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from bot.keys import PersonKey, TeamKey

MAX_VALUE_CHARS = 4000  # the longest value kept (instructions are at most 2,000 characters)
MAX_KEYS_PER_CHANGE = 20
HISTORY_KEPT = 200  # changes kept per team, oldest dropped first
FORGOTTEN = "(forgotten)"  # the author of a change, after `/memory forget all`
TEAM_WIDE = ""  # the `channel` of a team's own settings


@dataclass(frozen=True, slots=True)
class SettingChange:
    team: str  # TeamKey.id
    channel: str  # TEAM_WIDE for the team's settings
    key: str
    old: str | None
    new: str | None  # None: unset
    by: str  # PersonKey.id of the admin, or FORGOTTEN
    at: float  # epoch seconds


def check_change(changes: Mapping[str, str | None]) -> None:
    """The store's own bounds (the command layer validates meaning first)."""
    if not changes or len(changes) > MAX_KEYS_PER_CHANGE:
        raise ValueError(f"between 1 and {MAX_KEYS_PER_CHANGE} keys per change")
    for key, value in changes.items():
        if not key or len(key) > 64:
            raise ValueError("a setting's name is 1 to 64 characters")
        if value is not None and len(value) > MAX_VALUE_CHARS:
            raise ValueError(f"a setting's value is at most {MAX_VALUE_CHARS:,} characters")


class PlaceSettingsStore(Protocol):
    async def place_values(
        self, team: TeamKey, channel: str
    ) -> tuple[dict[str, str], dict[str, str]]:
        """The team's values and this channel's values (either may be empty)."""

    async def overrides(self, team: TeamKey) -> dict[str, dict[str, str]]:
        """Every channel of the team that has settings of its own: channel -> values."""

    async def change(
        self, team: TeamKey, channel: str, changes: Mapping[str, str | None], *, by: str, at: float
    ) -> list[SettingChange]:
        """Set (a value) or unset (None) these keys of one place, all at once; the history
        gets one entry per key whose value changed, returned. ValueError past the bounds."""

    async def history(self, team: TeamKey, channel: str, *, limit: int) -> list[SettingChange]:
        """The newest `limit` changes of the team's settings and this channel's, newest first."""

    async def forget_author(self, person: PersonKey) -> int:
        """Replace this person's id with FORGOTTEN in the history; returns entries changed."""


def place_settings_of(store: object) -> PlaceSettingsStore | None:
    """The settings store on the same connection as a durable store, or None for a store
    that keeps none (then every place runs on the defaults and `/config` is not offered)."""
    from bot.stores.mongo import MongoStore
    from bot.stores.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        from bot.stores.place_settings_sqlite import SqlitePlaceSettings

        return SqlitePlaceSettings(store.worker)
    if isinstance(store, MongoStore):
        from bot.stores.place_settings_mongo import MongoPlaceSettings

        return MongoPlaceSettings(store.db)
    return None


class SettingsAuthors:
    """An erasure tier (`bot.memory.erasure.MemoryTiers`): `/memory forget all` takes the
    person's id out of the settings history. Not a memory, so it counts none."""

    def __init__(self, store: PlaceSettingsStore) -> None:
        self.store = store

    async def erase_person(self, person: PersonKey) -> int:
        await self.store.forget_author(person)
        return 0

    async def compact(self) -> None:
        """The main store's compaction covers it (same file / database)."""
