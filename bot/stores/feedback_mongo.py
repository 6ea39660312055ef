"""`FeedbackStore` on MongoDB, in the main store's database: one document per (team, reply,
person), so voting again is one atomic upsert."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, fields
from typing import Any

from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase

from bot.keys import PersonKey, TeamKey
from bot.stores.feedback import TRIM_EVERY, VOTES_KEPT, FeedbackTotals, Vote, check_vote, totals_of

Doc = dict[str, Any]
_FIELDS = [f.name for f in fields(Vote)]


def _vote(doc: Doc) -> Vote:
    return Vote(**{name: doc[name] for name in _FIELDS})


class MongoFeedback:
    def __init__(
        self, db: AsyncDatabase[Doc], *, keep: int = VOTES_KEPT, trim_every: int = TRIM_EVERY
    ) -> None:
        self._votes = db["feedback"]
        self._keep = keep
        self._trim_every = max(1, trim_every)
        self._cast = 0
        self._ready = False

    async def _indexes(self) -> None:
        if not self._ready:
            await self._votes.create_index(
                [("team", ASCENDING), ("reply_id", ASCENDING), ("person", ASCENDING)], unique=True
            )
            await self._votes.create_index([("team", ASCENDING), ("at", DESCENDING)])
            await self._votes.create_index([("person", ASCENDING)])
            self._ready = True

    async def cast(self, vote: Vote) -> int | None:
        check_vote(vote)
        await self._indexes()
        where = {"team": vote.team, "reply_id": vote.reply_id, "person": vote.person}
        before = await self._votes.find_one_and_update(
            where, {"$set": asdict(vote)}, upsert=True, return_document=ReturnDocument.BEFORE
        )
        trim, self._cast = self._cast % self._trim_every == 0, self._cast + 1
        if trim:
            await self._trim(vote.team)
        return int(before["vote"]) if before else None

    async def _trim(self, team: str) -> None:
        """The team's oldest votes past the bound go (by time, then by id)."""
        stale = (
            await self._votes.find({"team": team}, {"_id": 1})
            .sort([("at", DESCENDING), ("_id", DESCENDING)])
            .skip(self._keep)
            .limit(1000)
            .to_list()
        )
        if stale:
            await self._votes.delete_many({"_id": {"$in": [d["_id"] for d in stale]}})

    async def votes_on(self, team: TeamKey, reply_id: str) -> list[Vote]:
        await self._indexes()
        docs = (
            await self._votes.find({"team": team.id, "reply_id": reply_id})
            .sort([("at", ASCENDING), ("_id", ASCENDING)])
            .to_list()
        )
        return [_vote(d) for d in docs]

    async def feedback_totals(self, team: TeamKey, since: float = 0.0) -> FeedbackTotals:
        await self._indexes()
        groups = await (
            await self._votes.aggregate(
                [
                    {"$match": {"team": team.id, "at": {"$gte": since}}},
                    {
                        "$group": {
                            "_id": {
                                "channel": "$channel",
                                "model": "$model",
                                "person": "$person",
                                "vote": "$vote",
                            },
                            "n": {"$sum": 1},
                        }
                    },
                ]
            )
        ).to_list()
        return totals_of(
            [
                (
                    str(g["_id"]["channel"]),
                    str(g["_id"]["model"]),
                    str(g["_id"]["person"]),
                    int(g["_id"]["vote"]),
                    int(g["n"]),
                )
                for g in groups
            ]
        )

    async def forget_voter(self, person: PersonKey) -> int:
        await self._indexes()
        return int((await self._votes.delete_many({"person": person.id})).deleted_count)

    async def drop_replies(self, team: TeamKey, reply_ids: Sequence[str]) -> int:
        await self._indexes()
        where = {"team": team.id, "reply_id": {"$in": list(reply_ids)}}
        return int((await self._votes.delete_many(where)).deleted_count)
