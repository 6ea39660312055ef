"""The production store: MongoDB through PyMongo's asyncio API (`AsyncMongoClient`).

One document per message (no growing arrays), seqs from a per-session counter, and unique
indexes that make a duplicate seq, fact or install impossible even if the code around them is
wrong. Connection failures surface as `StoreUnavailable` so callers can degrade.

Seq allocation and retries: `append` reserves a block of seqs with one atomic
`findOneAndUpdate({$inc})` on `counters`, then inserts the messages with `_id`s chosen before
the first attempt. If the insert is retried (by the driver's retryable writes, or once here
after a network error) a message that already landed fails with a duplicate `_id`, which is
proof it is stored and is ignored; so a retry never stores a message twice. A failure between
the reservation and the insert leaves a gap in the seqs, never a duplicate or a reorder.

Other parts keep collections of their own in this database (`db`): a platform's installations
(Slack's, in its adapter).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from bson import ObjectId
from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import (
    BulkWriteError,
    ConnectionFailure,
    DuplicateKeyError,
    OperationFailure,
    PyMongoError,
)

from bot.keys import PersonKey, SessionKey, TeamKey
from bot.stores import codec
from bot.stores.leases import MongoLeases
from bot.stores.mongo_edits import MongoEdits
from bot.stores.mongo_facts import MongoFacts
from bot.stores.protocols import StoreUnavailable
from bot.stores.records import (
    NewMessage,
    SessionState,
    StoredMessage,
    ToolCallLog,
    ToolInstall,
    utcnow,
)
from bot.stores.retention import MongoRetention

Doc = dict[str, Any]
TOOL_CALL_RETENTION = timedelta(days=7)
_DUPLICATE_KEY = 11000
_INDEX_OPTIONS_CONFLICT = 85


@contextmanager
def _unavailable(what: str) -> Iterator[None]:
    """Map "cannot reach the server" errors to StoreUnavailable; other errors are bugs."""
    try:
        yield
    except ConnectionFailure as exc:  # includes ServerSelectionTimeoutError, NetworkTimeout
        raise StoreUnavailable(f"MongoDB unavailable during {what}: {_brief(exc)}") from exc
    except PyMongoError as exc:
        if exc.timeout:
            raise StoreUnavailable(f"MongoDB timed out during {what}: {_brief(exc)}") from exc
        raise


def _brief(exc: BaseException) -> str:
    """The cause without PyMongo's topology dump, which is noise in a log line."""
    text = " ".join(str(exc).split())
    for cut in (" (configured timeouts", ", Timeout:", ", Topology Description"):
        text = text.split(cut, 1)[0]
    return text[:300]


def _doc(record: Any) -> Doc:
    """JSON-shaped document, except `created_at` stays a BSON date (TTL indexes need one)."""
    doc: Doc = record.model_dump(mode="json")
    if "created_at" in doc:
        doc["created_at"] = record.created_at
    return doc


class MongoStore(MongoFacts, MongoLeases, MongoRetention, MongoEdits):
    """`Store` over one MongoDB database; `await MongoStore.open(uri, db)` or wrap a client.
    Facts: see `bot.stores.mongo_facts`."""

    _guard = staticmethod(_unavailable)

    def __init__(self, client: AsyncMongoClient[Doc], db_name: str) -> None:
        self.client = client
        self.db: AsyncDatabase[Doc] = client[db_name]
        self._messages: AsyncCollection[Doc] = self.db["messages"]
        self._counters: AsyncCollection[Doc] = self.db["counters"]
        self._states: AsyncCollection[Doc] = self.db["session_state"]
        self._facts: AsyncCollection[Doc] = self.db["facts"]
        self._receipts: AsyncCollection[Doc] = self.db["erasure_receipts"]
        self._leases: AsyncCollection[Doc] = self.db["leases"]
        self._installs: AsyncCollection[Doc] = self.db["tool_installs"]
        self._calls: AsyncCollection[Doc] = self.db["tool_calls"]

    @classmethod
    async def open(
        cls, uri: str, db_name: str, *, timeout_ms: int = 5000, **client_options: Any
    ) -> MongoStore:
        """Connect, check the server answers and create the indexes; closes the client on error.

        `timeout_ms` bounds server selection and connecting, so an outage is reported in
        seconds rather than after PyMongo's 30 s default.
        """
        client: AsyncMongoClient[Doc] = AsyncMongoClient(
            uri,
            tz_aware=True,
            serverSelectionTimeoutMS=timeout_ms,
            connectTimeoutMS=timeout_ms,
            **client_options,
        )
        store = cls(client, db_name)
        try:
            await store.ensure_indexes()
        except BaseException:
            await client.close()
            raise
        return store

    async def ensure_indexes(self) -> None:
        """Create the indexes the queries and invariants rely on. Idempotent; run at startup."""
        with _unavailable("ensure_indexes"):
            await self._messages.create_index(
                [("session", ASCENDING), ("seq", ASCENDING)], unique=True
            )
            await self._messages.create_index([("speaker", ASCENDING), ("session", ASCENDING)])
            await self._states.create_index("session", unique=True)
            await self.ensure_fact_indexes()
            await self.ensure_edit_indexes()
            await self._installs.create_index(
                [("team", ASCENDING), ("pack", ASCENDING)], unique=True
            )
            await self._calls.create_index([("session", ASCENDING), ("created_at", DESCENDING)])
            await self._calls.create_index("speaker")
            await self._ensure_ttl(
                self._calls, "created_at", int(TOOL_CALL_RETENTION.total_seconds())
            )

    async def _ensure_ttl(self, collection: AsyncCollection[Doc], field: str, seconds: int) -> None:
        try:
            await collection.create_index(field, expireAfterSeconds=seconds)
        except OperationFailure as exc:
            if exc.code != _INDEX_OPTIONS_CONFLICT:
                raise
            # An older deployment used another retention: change it in place.
            await self.db.command(
                "collMod",
                collection.name,
                index={"keyPattern": {field: 1}, "expireAfterSeconds": seconds},
            )

    # --- conversation ------------------------------------------------------------------------

    async def append(
        self, session: SessionKey, messages: Sequence[NewMessage]
    ) -> list[StoredMessage]:
        if not messages:
            return []
        sid, now = session.id, codec.now_ms()
        with _unavailable("append"):
            last = await self._reserve_seqs(sid, len(messages))
            first = last - len(messages) + 1
            stored = [
                StoredMessage(**m.model_dump(), session=sid, seq=first + i, created_at=now)
                for i, m in enumerate(messages)
            ]
            docs = [{"_id": ObjectId(), **_doc(m)} for m in stored]
            await self._insert_idempotent(docs)
        return stored

    async def _reserve_seqs(self, sid: str, n: int) -> int:
        """Atomically take the next `n` seqs of a session; returns the last one."""
        try:
            return await self._inc_counter(sid, n)
        except DuplicateKeyError:
            # Two first appends raced to create the counter; now it exists, so $inc just works.
            return await self._inc_counter(sid, n)

    async def _inc_counter(self, sid: str, n: int) -> int:
        counter = await self._counters.find_one_and_update(
            {"_id": sid},
            {"$inc": {"last_seq": n}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        if counter is None:  # cannot happen with upsert + AFTER; keeps the types honest
            raise StoreUnavailable(f"MongoDB returned no seq counter for {sid}")
        return int(counter["last_seq"])

    async def _insert_idempotent(self, docs: list[Doc]) -> None:
        try:
            await self._messages.insert_many(docs, ordered=False)
        except BulkWriteError as exc:
            _raise_unless_already_stored(exc)
        except ConnectionFailure:
            # The first attempt may or may not have landed; the fixed _ids make a retry safe.
            try:
                await self._messages.insert_many(docs, ordered=False)
            except BulkWriteError as exc:
                _raise_unless_already_stored(exc)

    async def recent(self, session: SessionKey, *, limit: int) -> list[StoredMessage]:
        if limit <= 0:
            return []
        with _unavailable("recent"):
            cursor = self._messages.find({"session": session.id}).sort("seq", DESCENDING)
            docs = await cursor.limit(limit).to_list()
        return [codec.load(StoredMessage, d) for d in reversed(docs)]

    async def between(
        self, session: SessionKey, *, after_seq: int, upto_seq: int
    ) -> list[StoredMessage]:
        query = {"session": session.id, "seq": {"$gt": after_seq, "$lte": upto_seq}}
        with _unavailable("between"):
            docs = await self._messages.find(query).sort("seq", ASCENDING).to_list()
        return [codec.load(StoredMessage, d) for d in docs]

    async def count(self, session: SessionKey) -> int:
        with _unavailable("count"):
            return await self._messages.count_documents({"session": session.id})

    async def delete_speaker(self, person: PersonKey) -> int:
        with _unavailable("delete_speaker"):
            result = await self._messages.delete_many({"speaker": person.id})
        return result.deleted_count

    async def sessions_of_speaker(self, person: PersonKey) -> list[str]:
        with _unavailable("sessions_of_speaker"):
            sessions = await self._messages.distinct("session", {"speaker": person.id})
        return sorted(str(s) for s in sessions)

    async def session_heads(self) -> dict[str, int]:
        with _unavailable("session_heads"):
            docs = await self._counters.find({}, {"last_seq": 1}).to_list()
        return {str(d["_id"]): int(d["last_seq"]) for d in docs if "last_seq" in d}

    # --- session state -----------------------------------------------------------------------

    async def get_state(self, session: SessionKey) -> SessionState | None:
        with _unavailable("get_state"):
            doc = await self._states.find_one({"session": session.id})
        return None if doc is None else codec.load(SessionState, doc)

    async def head(self, session: SessionKey) -> tuple[int, SessionState | None]:
        with _unavailable("head"):
            counter, doc = await asyncio.gather(
                self._counters.find_one({"_id": session.id}, {"last_seq": 1}),
                self._states.find_one({"session": session.id}),
            )
        last_seq = int(counter.get("last_seq", 0)) if counter is not None else 0
        return last_seq, None if doc is None else codec.load(SessionState, doc)

    async def put_state(self, session: SessionKey, state: SessionState) -> bool:
        if state.session != session.id:
            raise ValueError(f"state of {state.session!r} put under session {session.id!r}")
        expected = state.version
        new = state.model_copy(update={"version": expected + 1, "updated_at": codec.now_ms()})
        doc = _doc(new)
        with _unavailable("put_state"):
            if expected == 0:
                try:
                    await self._states.insert_one(doc)
                except DuplicateKeyError:
                    return False
            else:
                result = await self._states.replace_one(
                    {"session": new.session, "version": expected}, doc
                )
                if result.matched_count != 1:
                    return False
        state.version, state.updated_at = new.version, new.updated_at
        return True

    # --- tool installs -----------------------------------------------------------------------

    async def install(
        self, team: TeamKey, pack: str, config: dict[str, str], *, by: str
    ) -> ToolInstall:
        record = ToolInstall(
            team=team.id, pack=pack, config=dict(config), installed_by=by, created_at=codec.now_ms()
        )
        with _unavailable("install"):
            await self._installs.replace_one(
                {"team": record.team, "pack": pack}, _doc(record), upsert=True
            )
        return record

    async def remove(self, team: TeamKey, pack: str) -> bool:
        with _unavailable("remove"):
            result = await self._installs.delete_one({"team": team.id, "pack": pack})
        return result.deleted_count > 0

    async def installed(self, team: TeamKey) -> list[ToolInstall]:
        with _unavailable("installed"):
            docs = await self._installs.find({"team": team.id}).sort("pack", ASCENDING).to_list()
        return [codec.load(ToolInstall, d) for d in docs]

    # --- tool call logs ----------------------------------------------------------------------

    async def log_call(self, session: SessionKey, record: ToolCallLog) -> None:
        if record.session != session.id:
            raise ValueError(f"tool call of {record.session!r} logged under {session.id!r}")
        with _unavailable("log_call"):
            await self._calls.insert_one(_doc(record))

    async def calls(self, session: SessionKey, *, limit: int = 100) -> list[ToolCallLog]:
        if limit <= 0:
            return []
        # The TTL monitor runs about once a minute; the filter hides what it has not reaped yet.
        query = {"session": session.id, "created_at": {"$gte": utcnow() - TOOL_CALL_RETENTION}}
        with _unavailable("calls"):
            cursor = self._calls.find(query).sort([("created_at", DESCENDING), ("_id", DESCENDING)])
            docs = await cursor.limit(limit).to_list()
        return [codec.load(ToolCallLog, d) for d in reversed(docs)]

    async def delete_speaker_calls(self, person: PersonKey) -> int:
        with _unavailable("delete_speaker_calls"):
            result = await self._calls.delete_many({"speaker": person.id})
        return result.deleted_count

    @staticmethod
    async def _upsert(collection: AsyncCollection[Doc], query: Doc, doc: Doc) -> None:
        """Replace or insert; two first writers of one key race on the unique index, and the
        loser retries as a plain replace (servers before 4.2 do not retry that themselves)."""
        try:
            await collection.replace_one(query, doc, upsert=True)
        except DuplicateKeyError:
            await collection.replace_one(query, doc, upsert=True)

    # --- lifecycle ---------------------------------------------------------------------------

    async def ping(self) -> bool:
        try:
            await self.client.admin.command("ping")
        except PyMongoError:
            return False
        return True

    async def close(self) -> None:
        await self.client.close()

    async def compact(self) -> None:
        """Nothing to do: MongoDB reuses the space of deleted documents itself."""


def _raise_unless_already_stored(exc: BulkWriteError) -> None:
    """Accept duplicate-_id errors (an earlier attempt of this insert landed); raise the rest."""
    for error in exc.details.get("writeErrors", []):
        pattern = error.get("keyPattern")
        on_id = dict(pattern) == {"_id": 1} if pattern else "index: _id_" in error.get("errmsg", "")
        if error.get("code") != _DUPLICATE_KEY or not on_id:
            raise exc
