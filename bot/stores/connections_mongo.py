"""`ConnectionStore` on MongoDB, in the main store's database."""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from bot.stores.connections import Connection, PendingSignIn

Doc = dict[str, Any]
_FIELDS = ("team", "person", "server", "issuer", "tokens", "connected_at", "updated_at")
_PENDING = ("state_hash", "team", "person", "server", "expires_at", "doc")


def _connection(doc: Doc) -> Connection:
    return Connection(*(doc[f] for f in _FIELDS))


class MongoConnections:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._conns = db["tool_connections"]
        self._clients = db["tool_oauth_clients"]
        self._signins = db["tool_signins"]
        self._ready = False

    async def _indexes(self) -> None:
        if not self._ready:
            await self._conns.create_index([("team", 1), ("person", 1), ("server", 1)], unique=True)
            await self._conns.create_index([("person", 1)])
            await self._conns.create_index([("team", 1), ("server", 1)])
            await self._clients.create_index(
                [("team", 1), ("server", 1), ("issuer", 1)], unique=True
            )
            await self._signins.create_index([("state_hash", 1)], unique=True)
            await self._signins.create_index([("person", 1)])
            self._ready = True

    async def put(self, conn: Connection) -> None:
        await self._indexes()
        doc = {f: getattr(conn, f) for f in _FIELDS}
        await self._conns.replace_one(
            {"team": conn.team, "person": conn.person, "server": conn.server}, doc, upsert=True
        )

    async def get(self, team: str, person: str, server: str) -> Connection | None:
        await self._indexes()
        doc = await self._conns.find_one({"team": team, "person": person, "server": server})
        return _connection(doc) if doc else None

    async def of_person(self, team: str, person: str) -> list[Connection]:
        await self._indexes()
        cursor = self._conns.find({"team": team, "person": person}).sort("server", 1)
        return [_connection(d) async for d in cursor]

    async def remove(self, team: str, person: str, server: str) -> bool:
        await self._indexes()
        where = {"team": team, "person": person, "server": server}
        await self._signins.delete_many(where)
        return (await self._conns.delete_one(where)).deleted_count > 0

    async def remove_server(self, team: str, server: str) -> int:
        await self._indexes()
        where = {"team": team, "server": server}
        await self._signins.delete_many(where)
        await self._clients.delete_many(where)
        return int((await self._conns.delete_many(where)).deleted_count)

    async def forget_person(self, person: str) -> int:
        await self._indexes()
        await self._signins.delete_many({"person": person})
        return int((await self._conns.delete_many({"person": person})).deleted_count)

    async def put_client(self, team: str, server: str, issuer: str, sealed: str) -> None:
        await self._indexes()
        where = {"team": team, "server": server, "issuer": issuer}
        await self._clients.replace_one(where, {**where, "doc": sealed}, upsert=True)

    async def get_client(self, team: str, server: str, issuer: str) -> str | None:
        await self._indexes()
        doc = await self._clients.find_one({"team": team, "server": server, "issuer": issuer})
        return str(doc["doc"]) if doc else None

    async def add_pending(self, pending: PendingSignIn) -> None:
        await self._indexes()
        await self._signins.delete_many({"expires_at": {"$lt": pending.expires_at - 86400}})
        await self._signins.insert_one({f: getattr(pending, f) for f in _PENDING})

    async def peek_pending(self, state_hash: str, now: float) -> PendingSignIn | None:
        await self._indexes()
        doc = await self._signins.find_one({"state_hash": state_hash, "expires_at": {"$gte": now}})
        return PendingSignIn(*(doc[f] for f in _PENDING)) if doc else None

    async def take_pending(self, state_hash: str, now: float) -> PendingSignIn | None:
        await self._indexes()
        doc = await self._signins.find_one_and_delete({"state_hash": state_hash})
        if doc is None or float(doc["expires_at"]) < now:
            return None
        return PendingSignIn(*(doc[f] for f in _PENDING))
