"""An admin's overview of a team's settings, for a surface that shows it (an app's home tab).

Platform-neutral data that a surface renders: each key's value for the whole team and whether
it is the default or set for the team, the channels that override them, and the team's last
changes. Why here and bounded: the adapter holds no settings logic, and a team may have
10,000 overriding channels, so only the first `channels` of them (by id, a stable order) are
handed out, with the total; values are passed as typed (the surface cuts and escapes them).
Read from the cached settings turns use (`CachedPlaceSettings.team_values`), so opening the
overview after a `/config set` shows the new value without any push.

The changes are the team-wide ones only, who/when/key: a subset of what `/config history`
shows anywhere in the team, never more.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from bot.config_command import effective_value
from bot.keys import TeamKey
from bot.place_settings_cache import CachedPlaceSettings
from bot.policy import KEYS, Layer, PolicyResolver, resolve
from bot.stores.place_settings import TEAM_WIDE, SettingChange

log = logging.getLogger(__name__)

CHANNELS_SHOWN = 40
CHANGES_SHOWN = 10


@dataclass(frozen=True, slots=True)
class TeamSetting:
    key: str
    value: str  # the team's effective value, as `/config show` names it ("" = none)
    source: Layer  # "default" or "team"


@dataclass(frozen=True, slots=True)
class ChannelOverride:
    channel: str
    values: tuple[tuple[str, str], ...]  # (key, value as typed), in `KEYS` order


@dataclass(frozen=True, slots=True)
class SettingsOverview:
    settings: tuple[TeamSetting, ...]
    overrides: tuple[ChannelOverride, ...]  # the first ones by channel id
    overrides_total: int  # every channel that overrides a key
    changes: tuple[SettingChange, ...]  # the team's own, newest first
    kept: bool = True  # False: this deployment keeps no settings (all places on defaults)


async def team_overview(
    settings: CachedPlaceSettings | None,
    policies: PolicyResolver,
    team: TeamKey,
    *,
    channels: int = CHANNELS_SHOWN,
    changes: int = CHANGES_SHOWN,
) -> SettingsOverview:
    """The overview of one team. Store errors propagate, except the history's (optional)."""
    own: Mapping[str, str] = {}
    places: Mapping[str, Mapping[str, str]] = {}
    if settings is not None:
        own, places = await settings.team_values(team)
    policy = resolve(own, {}, models=policies.models, default_model=policies.default_model)
    rows = tuple(
        TeamSetting(key, effective_value(policy, key, policies.default_model), policy.source(key))
        for key in KEYS
    )
    # O(n) over every channel, O(k log k) for the ones shown: 10,000 channels cost milliseconds.
    overriding = [c for c, values in places.items() if any(k in values for k in KEYS)]
    shown = heapq.nsmallest(max(0, channels), overriding)
    overrides = tuple(
        ChannelOverride(c, tuple((k, places[c][k]) for k in KEYS if k in places[c])) for c in shown
    )
    recent: list[SettingChange] = []
    if settings is not None and changes > 0:
        try:
            recent = await settings.store.history(team, TEAM_WIDE, limit=changes)
        except Exception as exc:  # the overview still shows the settings without it
            log.warning(
                "settings_history_unavailable",
                extra={"fields": {"team": team.id, "error": type(exc).__name__}},
            )
    return SettingsOverview(rows, overrides, len(overriding), tuple(recent), settings is not None)
