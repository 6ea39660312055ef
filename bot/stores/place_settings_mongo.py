"""`PlaceSettingsStore` on MongoDB, in the main store's database. A place's values are one
document, so a change of several keys is one atomic update."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo import DESCENDING
from pymongo.asynchronous.database import AsyncDatabase

from bot.keys import PersonKey, TeamKey
from bot.stores.place_settings import (
    FORGOTTEN,
    HISTORY_KEPT,
    TEAM_WIDE,
    SettingChange,
    check_change,
)

Doc = dict[str, Any]


def _change(doc: Doc) -> SettingChange:
    return SettingChange(
        team=str(doc["team"]),
        channel=str(doc["channel"]),
        key=str(doc["key"]),
        old=doc.get("old"),
        new=doc.get("new"),
        by=str(doc["by"]),
        at=float(doc["at"]),
    )


class MongoPlaceSettings:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._places = db["place_settings"]
        self._history = db["place_settings_history"]
        self._ready = False

    async def _indexes(self) -> None:
        if not self._ready:
            await self._places.create_index([("team", 1), ("channel", 1)], unique=True)
            await self._history.create_index([("team", 1), ("at", DESCENDING)])
            await self._history.create_index([("by", 1)])
            self._ready = True

    async def _values(self, team: str, channel: str) -> dict[str, str]:
        doc = await self._places.find_one({"team": team, "channel": channel})
        return dict(doc.get("values") or {}) if doc else {}

    async def place_values(
        self, team: TeamKey, channel: str
    ) -> tuple[dict[str, str], dict[str, str]]:
        await self._indexes()
        here = await self._values(team.id, channel) if channel != TEAM_WIDE else {}
        return await self._values(team.id, TEAM_WIDE), here

    async def overrides(self, team: TeamKey) -> dict[str, dict[str, str]]:
        await self._indexes()
        docs = await self._places.find({"team": team.id, "channel": {"$ne": TEAM_WIDE}}).to_list()
        found = {str(d["channel"]): dict(d.get("values") or {}) for d in docs}
        return {c: v for c, v in sorted(found.items()) if v}

    async def change(
        self, team: TeamKey, channel: str, changes: Mapping[str, str | None], *, by: str, at: float
    ) -> list[SettingChange]:
        check_change(changes)
        await self._indexes()
        where = {"team": team.id, "channel": channel}
        sets = {f"values.{k}": v for k, v in changes.items() if v is not None}
        unsets = {f"values.{k}": "" for k, v in changes.items() if v is None}
        update: Doc = {}
        if sets:
            update["$set"] = sets
        if unsets:
            update["$unset"] = unsets
        # One atomic update of the place's document; `before` says what each key was.
        before = await self._places.find_one_and_update(where, update, upsert=True)
        old = dict(before.get("values") or {}) if before else {}
        done = [
            SettingChange(team.id, channel, k, old.get(k), v, by, at)
            for k, v in changes.items()
            if old.get(k) != v
        ]
        if done:
            await self._history.insert_many(
                [
                    {
                        "team": c.team,
                        "channel": c.channel,
                        "key": c.key,
                        "old": c.old,
                        "new": c.new,
                        "by": c.by,
                        "at": c.at,
                    }
                    for c in done
                ]
            )
            stale = (
                await self._history.find({"team": team.id}, {"_id": 1})
                .sort("at", DESCENDING)
                .skip(HISTORY_KEPT)
                .to_list()
            )
            if stale:
                await self._history.delete_many({"_id": {"$in": [d["_id"] for d in stale]}})
        return done

    async def history(self, team: TeamKey, channel: str, *, limit: int) -> list[SettingChange]:
        await self._indexes()
        docs = (
            await self._history.find({"team": team.id, "channel": {"$in": [TEAM_WIDE, channel]}})
            .sort([("at", DESCENDING), ("_id", DESCENDING)])
            .limit(limit)
            .to_list()
        )
        return [_change(d) for d in docs]

    async def forget_author(self, person: PersonKey) -> int:
        await self._indexes()
        result = await self._history.update_many({"by": person.id}, {"$set": {"by": FORGOTTEN}})
        return int(result.modified_count)
