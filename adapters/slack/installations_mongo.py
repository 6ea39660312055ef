"""Slack's installations and OAuth states in the bot's MongoDB database.

Uses the store's own database (`MongoStore.db`, one client for the whole bot). Documents live in
`slack_installations` (unique on enterprise_id + team_id + name), states in
`slack_oauth_states` (`_id` = the state) with a TTL index on `expires_at`; the TTL monitor is
lazy (about once a minute), so `consume_oauth_state` also filters on the expiry. Indexes are
created on first use. Server outages become the store's `StoreUnavailable`, as the store's own.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, OperationFailure

from adapters.slack.installations import (
    DOCS,
    STATES,
    InstallationDoc,
    check_installation_key,
    check_oauth_state,
)
from bot.stores import codec
from bot.stores.mongo import MongoStore
from bot.stores.records import SCHEMA_VERSION, utcnow

Doc = dict[str, Any]
_INDEX_OPTIONS_CONFLICT = 85
_guard = MongoStore._guard  # the store's mapping of outages to StoreUnavailable


class MongoInstallations:
    """`InstallationDocStore` on an open MongoDB store's database."""

    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._docs: AsyncCollection[Doc] = db[DOCS]
        self._states: AsyncCollection[Doc] = db[STATES]
        self._ready = False

    async def ensure_schema(self) -> None:
        """Create the indexes (idempotent; also done on first use)."""
        if self._ready:
            return
        with _guard("ensure_indexes"):
            await self._docs.create_index(
                [("enterprise_id", ASCENDING), ("team_id", ASCENDING), ("name", ASCENDING)],
                unique=True,
            )
            try:
                await self._states.create_index("expires_at", expireAfterSeconds=0)
            except OperationFailure as exc:
                if exc.code != _INDEX_OPTIONS_CONFLICT:
                    raise
        self._ready = True

    async def get_doc(self, enterprise_id: str, team_id: str, name: str) -> dict[str, Any] | None:
        check_installation_key(enterprise_id, team_id, name)
        await self.ensure_schema()
        query = {"enterprise_id": enterprise_id, "team_id": team_id, "name": name}
        with _guard("get_doc"):
            found = await self._docs.find_one(query)
        return None if found is None else codec.load(InstallationDoc, found).doc

    async def put_doc(
        self, enterprise_id: str, team_id: str, name: str, doc: dict[str, Any]
    ) -> None:
        check_installation_key(enterprise_id, team_id, name)
        record = InstallationDoc(
            enterprise_id=enterprise_id,
            team_id=team_id,
            name=name,
            doc=doc,
            updated_at=codec.now_ms(),
        )
        stored = record.model_dump(mode="json")  # the same JSON values SQLite keeps
        stored["updated_at"] = record.updated_at
        query = {"enterprise_id": enterprise_id, "team_id": team_id, "name": name}
        await self.ensure_schema()
        with _guard("put_doc"):
            await _upsert(self._docs, query, stored)

    async def delete_docs(self, enterprise_id: str, team_id: str, name: str | None = None) -> int:
        check_installation_key(enterprise_id, team_id, name)
        await self.ensure_schema()
        query = {"enterprise_id": enterprise_id, "team_id": team_id}
        if name is not None:
            query["name"] = name
        with _guard("delete_docs"):
            result = await self._docs.delete_many(query)
        return result.deleted_count

    async def put_oauth_state(self, state: str, expires_at: float) -> None:
        check_oauth_state(state, expires_at)
        await self.ensure_schema()
        stored = {
            "expires_at": datetime.fromtimestamp(expires_at, UTC),
            "schema_version": SCHEMA_VERSION,
        }
        with _guard("put_state"):
            await _upsert(self._states, {"_id": state}, stored)

    async def consume_oauth_state(self, state: str) -> bool:
        if not isinstance(state, str) or not state:
            return False
        await self.ensure_schema()
        # An expired state the TTL monitor has not reaped yet is left for it and refused here.
        query = {"_id": state, "expires_at": {"$gt": utcnow()}}
        with _guard("consume_state"):
            found = await self._states.find_one_and_delete(query)
        return found is not None


async def _upsert(collection: AsyncCollection[Doc], query: Doc, doc: Doc) -> None:
    """Replace or insert; two first writers of one key race on the unique index, and the
    loser retries as a plain replace (servers before 4.2 do not retry that themselves)."""
    try:
        await collection.replace_one(query, doc, upsert=True)
    except DuplicateKeyError:
        await collection.replace_one(query, doc, upsert=True)
