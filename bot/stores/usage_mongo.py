"""`UsageStore` on MongoDB, in the main store's database: one document per row key, counts
added with `$inc` in one unordered bulk write per batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import UpdateOne
from pymongo.asynchronous.database import AsyncDatabase

from bot.stores.usage import FORGOTTEN, KEPT_DAYS, UsageRow, bounded

Doc = dict[str, Any]
_KEY = ("day", "team", "place", "person", "model", "kind")
_COUNTS = (
    "requests", "prompt", "cached", "completion", "cost_micros", "unpriced", "estimated",
)  # fmt: skip


def _update(row: UsageRow) -> UpdateOne:
    r = bounded(row)
    key = {k: getattr(r, k) for k in _KEY}
    return UpdateOne(
        key,
        {"$inc": {c: getattr(r, c) for c in _COUNTS}, "$set": {"audience": r.audience}},
        upsert=True,
    )


def _row(doc: Doc) -> UsageRow:
    day, team, place, person, model, kind = (str(doc[k]) for k in _KEY)
    return UsageRow(
        day, team, place, person, model, kind, str(doc.get("audience", "")),
        *(int(doc.get(c, 0)) for c in _COUNTS),
    )  # fmt: skip


class MongoUsage:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._rows = db["usage_days"]
        self._ready = False
        self._pruned = ""

    async def _indexes(self) -> None:
        if not self._ready:
            await self._rows.create_index(
                [(k, 1) for k in ("team", *_KEY[:1], *_KEY[2:])], unique=True
            )
            await self._rows.create_index([("person", 1), ("day", 1)])
            await self._rows.create_index([("day", 1)])
            self._ready = True

    async def add_usage(self, rows: Sequence[UsageRow]) -> None:
        if not rows:
            return
        await self._indexes()
        await self._rows.bulk_write([_update(r) for r in rows], ordered=False)
        today = datetime.now(UTC).date()
        if self._pruned != today.isoformat():
            oldest = (today - timedelta(days=KEPT_DAYS)).isoformat()
            await self._rows.delete_many({"day": {"$lt": oldest}})
            self._pruned = today.isoformat()

    async def usage(
        self, *, since: str, team: str | None = None, person: str | None = None
    ) -> list[UsageRow]:
        await self._indexes()
        query: Doc = {"day": {"$gte": since}}
        if team is not None:
            query["team"] = team
        if person is not None:
            query["person"] = person
        docs = await self._rows.find(query).sort([("day", 1), ("team", 1)]).to_list()
        return [_row(d) for d in docs]

    async def forget_person(self, person: str) -> int:
        """Each row is added to FORGOTTEN's, then deleted (a crash between the two counts that
        row twice in the team's totals; it never leaves the person's id)."""
        await self._indexes()
        docs = await self._rows.find({"person": person}).to_list()
        for doc in docs:
            await self._rows.bulk_write([_update(replace(_row(doc), person=FORGOTTEN))])
            await self._rows.delete_one({"_id": doc["_id"]})
        return len(docs)
