"""The heard-messages record in MongoDB (collections `heard`, `heard_marks`), sharing the
store's `AsyncMongoClient`. A record's `_id` is its team, channel and message id, so a record
heard twice (two replicas, a fetch after hearing) is one document."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection

from bot.messages import HeardMessage
from bot.stores.heard import MAX_AGE, MAX_TOTAL, PER_PLACE, Mark, page_key
from bot.stores.mongo import _unavailable

Doc = dict[str, Any]


def _team(platform: str, team: str) -> str:
    return f"{platform}:{team}"


def _doc(m: HeardMessage, stored: float = 0.0) -> Doc:
    team = _team(m.platform, m.team)
    return {
        "_id": f"{team}|{m.channel}|{m.message_id}",
        "team": team,
        "channel": m.channel,
        "thread": m.thread,
        "message_id": m.message_id,
        "author": m.author,
        "bot": bool(m.bot),
        "audience": m.audience,
        "at": float(m.at),
        "pkey": page_key(m),
        "stored": stored,
        "text": m.text,
        "name": m.name,
        "files": list(m.files),
    }


def _record(doc: Doc) -> HeardMessage:
    platform, _, team = str(doc["team"]).partition(":")
    return HeardMessage(
        platform=platform,
        team=team,
        channel=str(doc["channel"]),
        thread=str(doc["thread"]),
        message_id=str(doc["message_id"]),
        author=str(doc["author"]),
        text=str(doc.get("text") or ""),
        at=float(doc["at"]),
        audience=str(doc["audience"]),
        name=doc.get("name"),
        bot=bool(doc.get("bot")),
        files=tuple(str(f) for f in doc.get("files") or ()),
    )


_ORDER = [("at", ASCENDING), ("message_id", ASCENDING)]


class MongoHeardStore:
    """`HeardStore` over one MongoDB database. The client belongs to the caller (the store)."""

    def __init__(self, client: AsyncMongoClient[Doc], db_name: str) -> None:
        db = client[db_name]
        self._heard: AsyncCollection[Doc] = db["heard"]
        self._marks: AsyncCollection[Doc] = db["heard_marks"]

    @classmethod
    async def open(cls, client: AsyncMongoClient[Doc], db_name: str) -> MongoHeardStore:
        made = cls(client, db_name)
        with _unavailable("heard ensure_indexes"):
            heard = made._heard
            await heard.create_index(
                [
                    ("team", ASCENDING),
                    ("channel", ASCENDING),
                    ("thread", ASCENDING),
                    ("at", ASCENDING),
                ]
            )
            await heard.create_index([("team", ASCENDING), ("author", ASCENDING)])
            await heard.create_index([("team", ASCENDING), ("message_id", ASCENDING)])
            await heard.create_index([("team", ASCENDING), ("bot", ASCENDING), ("pkey", ASCENDING)])
            await heard.create_index("stored")
        return made

    async def add(self, records: Sequence[HeardMessage]) -> int:
        stored = time.time()
        docs = [_doc(m, stored) for m in records]
        if not docs:
            return 0
        with _unavailable("heard add"):
            await self._heard.bulk_write(
                [UpdateOne({"_id": d["_id"]}, {"$set": d}, upsert=True) for d in docs],
                ordered=False,
            )
            for team, channel, thread in sorted(
                {(d["team"], d["channel"], d["thread"]) for d in docs}
            ):
                place = {"team": team, "channel": channel, "thread": thread}
                edge = await (
                    self._heard.find(place, {"at": 1, "message_id": 1})
                    .sort([("at", DESCENDING), ("message_id", DESCENDING)])
                    .skip(PER_PLACE)
                    .limit(1)
                    .to_list()
                )
                if edge:
                    at, key = edge[0]["at"], edge[0]["message_id"]
                    older = [{"at": {"$lt": at}}, {"at": at, "message_id": {"$lte": key}}]
                    await self._heard.delete_many({**place, "$or": older})
        return len(docs)

    async def mark(self, marks: Sequence[Mark]) -> None:
        if not marks:
            return
        with _unavailable("heard mark"):
            await self._marks.bulk_write(
                [
                    UpdateOne(
                        {"_id": f"{_team(m.platform, m.team)}|{m.channel}|{m.thread}"},
                        {"$min": {"since": float(m.since)}},
                        upsert=True,
                    )
                    for m in marks
                ],
                ordered=False,
            )

    async def since(self, platform: str, team: str, channel: str, thread: str) -> float | None:
        with _unavailable("heard since"):
            doc = await self._marks.find_one({"_id": f"{_team(platform, team)}|{channel}|{thread}"})
        return None if doc is None else float(doc["since"])

    async def clear_marks(self) -> None:
        with _unavailable("heard clear_marks"):
            await self._marks.delete_many({})

    async def recent(
        self,
        platform: str,
        team: str,
        channel: str,
        thread: str,
        *,
        audiences: Sequence[str],
        before: float,
        after: float,
        limit: int,
    ) -> list[HeardMessage]:
        if not audiences or limit <= 0:
            return []
        query = {
            "team": _team(platform, team),
            "channel": channel,
            "thread": thread,
            "at": {"$gt": after, "$lte": before},
            "audience": {"$in": list(audiences)},
        }
        with _unavailable("heard recent"):
            docs = await (
                self._heard.find(query)
                .sort([("at", DESCENDING), ("message_id", DESCENDING)])
                .limit(limit)
                .to_list()
            )
        return [_record(d) for d in reversed(docs)]

    @staticmethod
    def _ids(platform: str, team: str, channel: str | None, ids: Sequence[str]) -> Doc:
        query: Doc = {"team": _team(platform, team), "message_id": {"$in": list(ids)}}
        if channel is not None:
            query["channel"] = channel
        return query

    async def find(
        self, platform: str, team: str, channel: str | None, message_ids: Sequence[str]
    ) -> list[HeardMessage]:
        if not message_ids:
            return []
        with _unavailable("heard find"):
            query = self._ids(platform, team, channel, message_ids)
            docs = await self._heard.find(query).sort(_ORDER).to_list()
        return [_record(d) for d in docs]

    async def delete(
        self, platform: str, team: str, channel: str | None, message_ids: Sequence[str]
    ) -> int:
        if not message_ids:
            return 0
        with _unavailable("heard delete"):
            result = await self._heard.delete_many(self._ids(platform, team, channel, message_ids))
        return result.deleted_count

    async def rewrite(self, records: Sequence[HeardMessage]) -> int:
        written = 0
        with _unavailable("heard rewrite"):
            for m in records:
                doc = _doc(m)
                result = await self._heard.update_one(
                    {"_id": doc["_id"]},
                    {"$set": {"text": doc["text"], "name": doc["name"], "files": doc["files"]}},
                )
                written += result.matched_count
        return written

    async def by_author(self, platform: str, team: str, author: str) -> list[HeardMessage]:
        with _unavailable("heard by_author"):
            query = {"team": _team(platform, team), "author": author}
            docs = await self._heard.find(query).sort(_ORDER).to_list()
        return [_record(d) for d in docs]

    async def delete_author(self, platform: str, team: str, author: str) -> int:
        with _unavailable("heard delete_author"):
            result = await self._heard.delete_many(
                {"team": _team(platform, team), "author": author}
            )
        return result.deleted_count

    async def bot_records(
        self, platform: str, team: str, *, after: str = "", limit: int = 500
    ) -> list[HeardMessage]:
        query = {"team": _team(platform, team), "bot": True, "pkey": {"$gt": after}}
        with _unavailable("heard bot_records"):
            docs = await self._heard.find(query).sort("pkey", ASCENDING).limit(limit).to_list()
        return [_record(d) for d in docs]

    async def prune(self, now: float) -> int:
        with _unavailable("heard prune"):
            old = {"stored": {"$lt": now - MAX_AGE}}
            gone = (await self._heard.delete_many(old)).deleted_count
            edge = await (
                self._heard.find({}, {"stored": 1})
                .sort("stored", DESCENDING)
                .skip(MAX_TOTAL)
                .limit(1)
            ).to_list()
            if edge:
                past = {"stored": {"$lte": edge[0]["stored"]}}
                gone += (await self._heard.delete_many(past)).deleted_count
        return int(gone)

    async def count(self) -> int:
        with _unavailable("heard count"):
            return int(await self._heard.count_documents({}))

    async def compact(self) -> None:
        return None

    async def close(self) -> None:
        return None  # the client is the store's
