"""The settings-per-place store (`bot.stores.place_settings`) on every backend: atomic
multi-key changes, unset, team vs channel, teams apart, history order and bound, and forget."""

from __future__ import annotations

import pytest

from bot.keys import PersonKey, TeamKey
from bot.stores.place_settings import (
    FORGOTTEN,
    MAX_VALUE_CHARS,
    TEAM_WIDE,
    PlaceSettingsStore,
    place_settings_of,
)
from bot.stores.protocols import Store

T1, T2 = TeamKey("slack", "T1"), TeamKey("slack", "T2")
ADMIN = PersonKey("slack", "T1", "UADMIN")


@pytest.fixture
def places(store: Store) -> PlaceSettingsStore:
    kept = place_settings_of(store)
    assert kept is not None
    return kept


async def test_several_keys_change_at_once_and_unset(places: PlaceSettingsStore) -> None:
    done = await places.change(T1, "C1", {"reply": "all", "language": "de"}, by=ADMIN.id, at=1.0)
    assert sorted(c.key for c in done) == ["language", "reply"]
    assert await places.place_values(T1, "C1") == ({}, {"reply": "all", "language": "de"})
    again = await places.change(T1, "C1", {"reply": "all", "language": None}, by=ADMIN.id, at=2.0)
    assert [(c.key, c.old, c.new) for c in again] == [("language", "de", None)]  # reply: same
    assert await places.place_values(T1, "C1") == ({}, {"reply": "all"})


async def test_team_and_channel_and_teams_stay_apart(places: PlaceSettingsStore) -> None:
    await places.change(T1, TEAM_WIDE, {"model": "big"}, by=ADMIN.id, at=1.0)
    await places.change(T1, "C1", {"memory": "off"}, by=ADMIN.id, at=2.0)
    await places.change(T2, "C1", {"memory": "on"}, by="slack:T2:U9", at=3.0)
    assert await places.place_values(T1, "C1") == ({"model": "big"}, {"memory": "off"})
    assert await places.place_values(T1, "C2") == ({"model": "big"}, {})
    assert await places.place_values(T2, "C1") == ({}, {"memory": "on"})
    assert await places.overrides(T1) == {"C1": {"memory": "off"}}
    await places.change(T1, "C1", {"memory": None}, by=ADMIN.id, at=4.0)
    assert await places.overrides(T1) == {}  # a channel with nothing left overrides nothing


async def test_history_is_newest_first_bounded_and_per_place(places: PlaceSettingsStore) -> None:
    for i in range(30):
        await places.change(T1, "C1", {"language": f"l{i % 2}x"}, by=ADMIN.id, at=float(i))
    await places.change(T1, TEAM_WIDE, {"reply": "mention"}, by=ADMIN.id, at=100.0)
    await places.change(T1, "C2", {"reply": "all"}, by=ADMIN.id, at=101.0)
    here = await places.history(T1, "C1", limit=20)
    assert len(here) == 20
    assert (here[0].channel, here[0].key, here[0].new) == (TEAM_WIDE, "reply", "mention")
    assert all(c.channel in (TEAM_WIDE, "C1") for c in here)  # C2's change is not shown here
    assert [c.at for c in here] == sorted((c.at for c in here), reverse=True)
    assert here[1].old == "l0x" and here[1].new == "l1x"


async def test_bounds_refuse_the_whole_change(places: PlaceSettingsStore) -> None:
    with pytest.raises(ValueError):
        await places.change(
            T1, "C1", {"reply": "all", "instructions": "x" * (MAX_VALUE_CHARS + 1)}, by="a", at=1
        )
    assert await places.place_values(T1, "C1") == ({}, {})
    assert await places.history(T1, "C1", limit=5) == []


async def test_forget_takes_the_author_out_of_the_history(places: PlaceSettingsStore) -> None:
    await places.change(T1, "C1", {"reply": "all"}, by=ADMIN.id, at=1.0)
    await places.change(T1, "C1", {"bots": "mentions"}, by="slack:T1:UOTHER", at=2.0)
    assert await places.forget_author(ADMIN) == 1
    authors = [c.by for c in await places.history(T1, "C1", limit=5)]
    assert authors == ["slack:T1:UOTHER", FORGOTTEN]
    assert await places.place_values(T1, "C1") == ({}, {"reply": "all", "bots": "mentions"})
