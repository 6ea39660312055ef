"""`ApprovalStore` on MongoDB, in the main store's database: one document per approval (its id
is `_id`, so `decide` is one atomic conditional update) and one per grant."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from bot.keys import PersonKey, TeamKey
from bot.stores.approvals import KEPT, Approval, Grant, Status, check_approval, check_grant

Doc = dict[str, Any]
_FIELDS = [f.name for f in fields(Approval)]
_GRANT_FIELDS = [f.name for f in fields(Grant)]


def _approval(doc: Doc) -> Approval:
    return Approval(**{name: doc[name] for name in _FIELDS})


def _grant(doc: Doc) -> Grant:
    return Grant(**{name: doc[name] for name in _GRANT_FIELDS})


class MongoApprovals:
    def __init__(self, db: AsyncDatabase[Doc], *, keep: int = KEPT) -> None:
        self._approvals = db["approvals"]
        self._grants = db["approval_grants"]
        self._keep = keep
        self._ready = False

    async def _indexes(self) -> None:
        if self._ready:
            return
        a = self._approvals
        await a.create_index([("session", ASCENDING), ("turn_id", ASCENDING)])
        await a.create_index([("status", ASCENDING), ("expires_at", ASCENDING)])
        await a.create_index([("team", ASCENDING), ("created_at", DESCENDING)])
        await a.create_index([("person", ASCENDING)])
        await self._grants.create_index(
            [("team", ASCENDING), ("place", ASCENDING), ("tool", ASCENDING), ("person", ASCENDING)],
            unique=True,
        )
        await self._grants.create_index([("person", ASCENDING)])
        self._ready = True

    async def add(self, approval: Approval) -> None:
        check_approval(approval)
        await self._indexes()
        try:
            await self._approvals.insert_one({"_id": approval.id, **asdict(approval)})
        except DuplicateKeyError:
            raise ValueError("an approval with this id exists") from None
        stale = (
            await self._approvals.find(
                {"team": approval.team, "status": {"$ne": "pending"}}, {"_id": 1}
            )
            .sort([("created_at", DESCENDING), ("_id", DESCENDING)])
            .skip(self._keep)
            .limit(1000)
            .to_list()
        )
        if stale:
            await self._approvals.delete_many({"_id": {"$in": [d["_id"] for d in stale]}})

    async def _find(
        self, where: Doc, sort: list[tuple[str, int]], limit: int = 0
    ) -> list[Approval]:
        await self._indexes()
        cursor = self._approvals.find(where).sort(sort)
        if limit:
            cursor = cursor.limit(limit)
        return [_approval(d) for d in await cursor.to_list()]

    async def get(self, approval_id: str) -> Approval | None:
        await self._indexes()
        doc = await self._approvals.find_one({"_id": approval_id})
        return _approval(doc) if doc else None

    async def decide(
        self, approval_id: str, status: Status, *, by: str, at: float
    ) -> Approval | None:
        if status == "pending":
            raise ValueError("a decision is approved, denied or expired")
        await self._indexes()
        doc = await self._approvals.find_one_and_update(
            {"_id": approval_id, "status": "pending"},
            {"$set": {"status": status, "decided_by": by, "decided_at": at}},
            return_document=ReturnDocument.AFTER,
        )
        return _approval(doc) if doc else None

    async def finish(self, approval_id: str, outcome: str, latency_ms: float) -> None:
        await self._indexes()
        await self._approvals.update_one(
            {"_id": approval_id}, {"$set": {"outcome": outcome[:100], "latency_ms": latency_ms}}
        )

    async def of_turn(self, session: str, turn_id: str) -> list[Approval]:
        where = {"session": session, "turn_id": turn_id}
        return await self._find(where, [("created_at", ASCENDING), ("_id", ASCENDING)])

    async def latest_pending(self, session: str, person: str) -> Approval | None:
        where = {"session": session, "person": person, "status": "pending"}
        found = await self._find(where, [("created_at", DESCENDING), ("_id", DESCENDING)], 1)
        return found[0] if found else None

    async def due(self, now: float, limit: int = 100) -> list[Approval]:
        where = {"status": "pending", "expires_at": {"$lte": now}}
        return await self._find(where, [("expires_at", ASCENDING), ("_id", ASCENDING)], limit)

    async def unsettled(self, before: float, limit: int = 100) -> list[Approval]:
        where = {"status": {"$ne": "pending"}, "outcome": "", "decided_at": {"$lte": before}}
        return await self._find(where, [("decided_at", ASCENDING), ("_id", ASCENDING)], limit)

    async def recent(self, team: TeamKey, limit: int = 20) -> list[Approval]:
        sort = [("created_at", DESCENDING), ("_id", DESCENDING)]
        return await self._find({"team": team.id}, sort, limit)

    async def grant(self, grant: Grant) -> None:
        check_grant(grant)
        await self._indexes()
        key = {"team": grant.team, "place": grant.place, "tool": grant.tool, "person": grant.person}
        await self._grants.update_one(key, {"$set": asdict(grant)}, upsert=True)

    async def granted(self, team: str, place: str, person: str, tool: str) -> bool:
        await self._indexes()
        where = {"team": team, "place": place, "tool": tool, "person": person}
        return await self._grants.find_one(where, {"_id": 1}) is not None

    async def grants(self, team: TeamKey, place: str) -> list[Grant]:
        await self._indexes()
        docs = (
            await self._grants.find({"team": team.id, "place": place})
            .sort([("tool", ASCENDING), ("person", ASCENDING)])
            .to_list()
        )
        return [_grant(d) for d in docs]

    async def revoke(self, team: TeamKey, place: str, tool: str, person: str | None = None) -> int:
        await self._indexes()
        where: Doc = {"team": team.id, "place": place, "tool": tool}
        if person is not None:
            where["person"] = person
        return int((await self._grants.delete_many(where)).deleted_count)

    async def forget_person(self, person: PersonKey) -> int:
        await self._indexes()
        pid = person.id
        await self._grants.delete_many({"$or": [{"person": pid}, {"by": pid}]})
        await self._approvals.update_many({"decided_by": pid}, {"$set": {"decided_by": ""}})
        return int((await self._approvals.delete_many({"person": pid})).deleted_count)
