"""`MessageEditStore` in MongoDB, mixed into `MongoStore`: the rewrites and deletions erasure
makes (`bot.memory.erasure`, `bot.memory.deletion`). A platform message is found through an
index on `meta.message_id`; a team's records by an anchored prefix of their session id (which
the (session, seq) index serves)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from pymongo import ASCENDING

from bot.keys import PersonKey, SessionKey, TeamKey
from bot.stores import codec
from bot.stores.records import FactTombstone, StoredMessage, ToolCallLog

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

Doc = dict[str, Any]


def _prefix(prefix: str) -> dict[str, str]:
    return {"$regex": "^" + re.escape(prefix)}


class MongoEdits:
    _messages: AsyncCollection[Doc]
    _calls: AsyncCollection[Doc]
    db: Any
    _guard: Callable[[str], AbstractContextManager[None]]

    async def ensure_edit_indexes(self) -> None:
        with self._guard("ensure_edit_indexes"):
            await self._messages.create_index("meta.message_id", sparse=True)
            await self.db["fact_tombstones"].create_index("person")

    async def team_messages(
        self, team: TeamKey, *, after: tuple[str, int] = ("", 0), limit: int = 500
    ) -> list[StoredMessage]:
        after_session, after_seq = after
        query = {
            "$and": [
                {"session": _prefix(team.id + ":")},
                {
                    "$or": [
                        {"session": {"$gt": after_session}},
                        {"session": after_session, "seq": {"$gt": after_seq}},
                    ]
                },
            ]
        }
        with self._guard("team_messages"):
            cursor = self._messages.find(query).sort([("session", ASCENDING), ("seq", ASCENDING)])
            docs = await cursor.limit(limit).to_list()
        return [codec.load(StoredMessage, d) for d in docs]

    async def rewrite_messages(self, messages: Sequence[StoredMessage]) -> int:
        written = 0
        with self._guard("rewrite_messages"):
            for m in messages:
                doc = m.model_dump(mode="json")
                result = await self._messages.update_one(
                    {"session": m.session, "seq": m.seq},
                    {
                        "$set": {
                            "content": doc["content"],
                            "name": doc["name"],
                            "tool_calls": doc["tool_calls"],
                            "meta": doc["meta"],
                            "tokens": doc["tokens"],
                        }
                    },
                )
                written += result.matched_count
        return written

    async def delete_messages(self, session: SessionKey, seqs: Sequence[int]) -> int:
        if not seqs:
            return 0
        with self._guard("delete_messages"):
            result = await self._messages.delete_many(
                {"session": session.id, "seq": {"$in": [int(s) for s in seqs]}}
            )
        return result.deleted_count

    async def find_platform_message(
        self, team: TeamKey, message_id: str, *, channel: str | None = None
    ) -> list[StoredMessage]:
        prefix = team.id + ":" + (channel + ":" if channel is not None else "")
        query = {"meta.message_id": message_id, "session": _prefix(prefix)}
        with self._guard("find_platform_message"):
            cursor = self._messages.find(query).sort([("session", ASCENDING), ("seq", ASCENDING)])
            docs = await cursor.to_list()
        return [codec.load(StoredMessage, d) for d in docs]

    async def team_tool_calls(self, team: TeamKey) -> list[ToolCallLog]:
        with self._guard("team_tool_calls"):
            cursor = self._calls.find({"session": _prefix(team.id + ":")})
            docs = await cursor.sort([("created_at", ASCENDING), ("_id", ASCENDING)]).to_list()
        return [codec.load(ToolCallLog, d) for d in docs]

    async def rewrite_tool_call(self, record: ToolCallLog) -> bool:
        with self._guard("rewrite_tool_call"):
            result = await self._calls.update_many(
                {"session": record.session, "call_id": record.call_id},
                {"$set": {"arguments": record.arguments}},
            )
        return result.matched_count > 0

    async def delete_tool_calls(self, session: SessionKey, call_ids: Sequence[str]) -> int:
        if not call_ids:
            return 0
        with self._guard("delete_tool_calls"):
            result = await self._calls.delete_many(
                {"session": session.id, "call_id": {"$in": list(call_ids)}}
            )
        return result.deleted_count

    # --- tombstones of forgotten facts ------------------------------------------------------

    async def add_tombstones(self, tombstones: Sequence[FactTombstone]) -> None:
        if not tombstones:
            return
        with self._guard("add_tombstones"):
            await self.db["fact_tombstones"].insert_many(
                [t.model_dump(mode="json") for t in tombstones]
            )

    async def tombstones(self, person: PersonKey) -> list[FactTombstone]:
        with self._guard("tombstones"):
            docs = await self.db["fact_tombstones"].find({"person": person.id}).to_list()
        return [codec.load(FactTombstone, d) for d in docs]

    async def delete_tombstones(self, person: PersonKey) -> int:
        with self._guard("delete_tombstones"):
            result = await self.db["fact_tombstones"].delete_many({"person": person.id})
        return int(result.deleted_count)
