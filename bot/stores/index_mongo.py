"""The memory index in MongoDB (collections `memory_entries`, `memory_counters`,
`memory_checkpoints`), sharing the store's `AsyncMongoClient`.

Change stamps come from one `$inc` counter. A stamp is taken before its insert lands, so a
reader may see stamp 9 before stamp 8 lands; readers re-read `CURSOR_OVERLAP` stamps below
their cursor and merge by id (see `bot.stores.memory_index`). Vectors are stored as arrays, the
shape Atlas `$vectorSearch` indexes, should an operator configure it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymongo import ASCENDING, AsyncMongoClient, ReturnDocument, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError

from bot.audience import PUBLIC
from bot.keys import PersonKey, TeamKey
from bot.stores import codec
from bot.stores.memory_index import (
    IndexChanges,
    MemoryEntry,
    MemoryScope,
    check_entry,
)
from bot.stores.mongo import _unavailable

Doc = dict[str, Any]
_DUPLICATE_KEY = 11000
# Readers re-fetch this many change stamps below their cursor: a stamp is taken before its
# insert lands, so a slow writer can land just below a reader's cursor.
CURSOR_OVERLAP = 64


def _doc(entry: MemoryEntry, stamp: int) -> Doc:
    doc: Doc = entry.model_dump(mode="json")
    doc["occurred_at"] = entry.occurred_at
    doc["created_at"] = entry.created_at
    doc["stamp"] = stamp
    doc["_id"] = f"{entry.team}|{entry.id}"
    return doc


def _entry(doc: Doc) -> MemoryEntry:
    return codec.load(MemoryEntry, doc)


class MongoMemoryIndex:
    """`MemoryIndex` over one MongoDB database. The client belongs to the caller (the store)."""

    def __init__(self, client: AsyncMongoClient[Doc], db_name: str) -> None:
        self.db: AsyncDatabase[Doc] = client[db_name]
        self._entries: AsyncCollection[Doc] = self.db["memory_entries"]
        self._counters: AsyncCollection[Doc] = self.db["memory_counters"]
        self._checkpoints: AsyncCollection[Doc] = self.db["memory_checkpoints"]
        self._sessions: AsyncCollection[Doc] = self.db["memory_sessions"]

    @classmethod
    async def open(cls, client: AsyncMongoClient[Doc], db_name: str) -> MongoMemoryIndex:
        index = cls(client, db_name)
        with _unavailable("memory index ensure_indexes"):
            await index._entries.create_index(
                [("team", ASCENDING), ("place", ASCENDING), ("stamp", ASCENDING)]
            )
            await index._entries.create_index(
                [("team", ASCENDING), ("people", ASCENDING), ("stamp", ASCENDING)]
            )
            await index._entries.create_index([("embedder", ASCENDING), ("stamp", ASCENDING)])
            await index._entries.create_index(
                [("team", ASCENDING), ("participants", ASCENDING), ("stamp", ASCENDING)]
            )
            await index._entries.create_index([("team", ASCENDING), ("session", ASCENDING)])
        return index

    async def _bump(self, name: str, by: int = 1) -> int:
        doc = await self._counters.find_one_and_update(
            {"_id": name},
            {"$inc": {"value": by}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        return int(doc["value"]) if doc else 0

    async def add(self, entries: Sequence[MemoryEntry]) -> int:
        for entry in entries:
            check_entry(entry)
        if not entries:
            return 0
        with _unavailable("memory index add"):
            sessions = list({e.session for e in entries if e.session})
            known = {
                str(d["_id"]): list(d.get("people", []))
                for d in await self._sessions.find({"_id": {"$in": sessions}}).to_list()
            }
            last = await self._bump("stamp", len(entries))
            first = last - len(entries) + 1
            docs = [_doc(e, first + i) for i, e in enumerate(entries)]
            for doc in docs:
                doc["participants"] = known.get(doc["session"], [])
            try:
                result = await self._entries.insert_many(docs, ordered=False)
                return len(result.inserted_ids)
            except BulkWriteError as exc:
                errors = exc.details.get("writeErrors", [])
                if any(err.get("code") != _DUPLICATE_KEY for err in errors):
                    raise
                return int(exc.details.get("nInserted", len(docs) - len(errors)))

    async def changes(self, scope: MemoryScope, *, after: int = 0) -> IndexChanges:
        team = scope.team.id
        since = max(after - CURSOR_OVERLAP, 0) if after else 0
        either: list[Doc] = []
        if scope.places:
            either.append({"place": {"$in": list(scope.places)}})
        if scope.person is not None:
            either.append({"private": False, "people": scope.person.id})
            either.append({"private": False, "participants": scope.person.id})
        query: Doc = {"team": team, "stamp": {"$gt": since}, "$or": either}
        with _unavailable("memory index changes"):
            docs = await self._entries.find(query).sort("stamp", ASCENDING).to_list()
            gen = await self._counters.find_one({"_id": f"gen:{team}"})
        entries = [_entry(d) for d in docs]
        cursor = max([after, *(e.stamp for e in entries)])
        return IndexChanges(entries, cursor, int(gen["value"]) if gen else 0)

    async def add_participants(self, team: TeamKey, session_id: str, people: Sequence[str]) -> None:
        prefix = team.id + ":"
        if not session_id.startswith(prefix) or any(not p.startswith(prefix) for p in people):
            raise ValueError(f"session and people must be in team {team.id}")
        if not people:
            return
        with _unavailable("memory index add_participants"):
            doc = await self._sessions.find_one_and_update(
                {"_id": session_id},
                {"$addToSet": {"people": {"$each": list(dict.fromkeys(people))}}},
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
            everyone = list(doc.get("people", [])) if doc else list(people)
            await self._entries.update_many(
                {"team": team.id, "session": session_id},
                {"$addToSet": {"participants": {"$each": everyone}}},
            )

    async def get(self, team: TeamKey, ids: Sequence[str]) -> list[MemoryEntry]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        with _unavailable("memory index get"):
            docs = (
                await self._entries.find({"team": team.id, "id": {"$in": wanted}})
                .sort("stamp", ASCENDING)
                .to_list()
            )
        return [_entry(d) for d in docs]

    async def set_vectors(
        self, team: TeamKey, embedder: str, vectors: dict[str, list[float]]
    ) -> int:
        if not embedder:
            raise ValueError("an embedder name is required")
        if not vectors:
            return 0
        with _unavailable("memory index set_vectors"):
            last = await self._bump("stamp", len(vectors))
            first = last - len(vectors) + 1
            ops = [
                UpdateOne(
                    {"team": team.id, "id": eid},
                    {"$set": {"embedder": embedder, "vector": list(vec), "stamp": first + i}},
                )
                for i, (eid, vec) in enumerate(vectors.items())
            ]
            result = await self._entries.bulk_write(ops, ordered=False)
        return int(result.modified_count)

    async def missing_vectors(self, embedder: str, *, limit: int) -> list[MemoryEntry]:
        if limit <= 0:
            return []
        with _unavailable("memory index missing_vectors"):
            docs = (
                await self._entries.find({"embedder": {"$ne": embedder}})
                .sort("stamp", ASCENDING)
                .limit(limit)
                .to_list()
            )
        return [_entry(d) for d in docs]

    async def delete_entries(self, team: TeamKey, ids: Sequence[str]) -> int:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        with _unavailable("memory index delete_entries"):
            result = await self._entries.delete_many({"team": team.id, "id": {"$in": wanted}})
            if result.deleted_count:
                await self._bump(f"gen:{team.id}")
        return int(result.deleted_count)

    async def entries_of_person(self, person: PersonKey) -> list[MemoryEntry]:
        query = {"team": person.team_key.id, "people": person.id}
        with _unavailable("memory index entries_of_person"):
            docs = await self._entries.find(query).sort("stamp", ASCENDING).to_list()
        return [_entry(d) for d in docs]

    async def delete_person(self, person: PersonKey) -> int:
        team = person.team_key.id
        with _unavailable("memory index delete_person"):
            await self._sessions.update_many(
                {"people": person.id}, {"$pull": {"people": person.id}}
            )
            await self._entries.update_many(
                {"team": team, "participants": person.id},
                {"$pull": {"participants": person.id}},
            )
            result = await self._entries.delete_many({"team": team, "people": person.id})
            if result.deleted_count:
                await self._bump(f"gen:{team}")
        return int(result.deleted_count)

    async def get_checkpoint(self, session_id: str) -> int:
        with _unavailable("memory index get_checkpoint"):
            doc = await self._checkpoints.find_one({"_id": session_id})
        return int(doc["seq"]) if doc else 0

    async def set_checkpoint(self, session_id: str, seq: int) -> None:
        if not session_id:
            raise ValueError("a session id is required")
        with _unavailable("memory index set_checkpoint"):
            await self._checkpoints.update_one(
                {"_id": session_id}, {"$max": {"seq": seq}}, upsert=True
            )

    async def checkpoints(self) -> dict[str, int]:
        with _unavailable("memory index checkpoints"):
            docs = await self._checkpoints.find({}).to_list()
        return {str(d["_id"]): int(d["seq"]) for d in docs}

    async def ping(self) -> bool:
        with _unavailable("memory index ping"):
            await self.db.command("ping")
        return True

    async def compact(self) -> None:
        return None

    async def close(self) -> None:
        return None  # the client is the store's

    async def entries_of_team(
        self, team: TeamKey, *, without_audience: bool = False
    ) -> list[MemoryEntry]:
        query: dict[str, Any] = {"team": team.id}
        if without_audience:
            query["audience"] = {"$in": [None, ""]}
        with _unavailable("memory index entries_of_team"):
            cursor = self._entries.find(query, {"vector": 0})
            docs = await cursor.sort("stamp", ASCENDING).to_list()
        return [_entry({**d, "vector": None, "embedder": None}) for d in docs]

    async def reset_session(self, team: TeamKey, session_id: str) -> int:
        query = {"team": team.id, "session": session_id, "kind": {"$in": ["excerpt", None]}}
        with _unavailable("memory index reset_session"):
            result = await self._entries.delete_many(query)
            await self._checkpoints.delete_one({"_id": session_id})
            if result.deleted_count:
                await self._bump(f"gen:{team.id}")
        return int(result.deleted_count)

    async def set_audiences(self, team: TeamKey, audiences: dict[str, str]) -> int:
        updated = 0
        with _unavailable("memory index set_audiences"):
            for eid, audience in audiences.items():
                fields: dict[str, Any] = {"audience": audience}
                if audience != PUBLIC:
                    fields["private"] = True
                result = await self._entries.update_one(
                    {"team": team.id, "id": eid}, {"$set": fields}
                )
                updated += result.matched_count
            if updated:
                await self._bump(f"gen:{team.id}")
        return updated

    async def entries_from_sources(
        self, team: TeamKey, source_ids: Sequence[str]
    ) -> list[MemoryEntry]:
        wanted = list(dict.fromkeys(source_ids))
        if not wanted:
            return []
        # Served by the (team, session) index: entries list the messages of their own session
        # (or span sessions: session "").
        sessions = sorted({s.rpartition("#")[0] for s in wanted} | {""})
        query = {"team": team.id, "session": {"$in": sessions}, "source_ids": {"$in": wanted}}
        with _unavailable("memory index entries_from_sources"):
            docs = await self._entries.find(query).sort("stamp", ASCENDING).to_list()
        return [_entry(d) for d in docs]
