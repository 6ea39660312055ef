"""Versioned facts (`facts`) and erasure receipts (`erasure_receipts`) in MongoDB, mixed into
`MongoStore`.

One document per version. `user_key` (`platform:user`, see `fact_common.user_key`) is indexed
so one user's facts in every team and DM scope of a platform are found without reading anyone
else's. `audience` is who could read what the fact came from: readers filter on it in the query
(`$in`; a document without one matches no filter, it is the narrowest). `live_norm` is the
audience and normalised text while the version is live and `~<id>` once closed, so a unique
index on (person, live_norm) forbids two live copies of one fact for one audience while closed
versions may repeat it (no partial index needed, which older servers lack).

A replacement and the close of the version it replaces are made atomic without a
multi-document transaction (a standalone server has none): the new version is inserted first,
naming the old one in `replaces`; that insert is the commit point. Readers treat a live version
named in another live version's `replaces` as closed (and finish closing it), so a crash between
the two writes never shows two live versions, nor none (a reader filtering on audiences looks
for such replacements in every audience).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pymongo import ASCENDING
from pymongo.errors import DuplicateKeyError, OperationFailure

from bot.audience import UNKNOWN_FACT
from bot.keys import PersonKey, SessionKey
from bot.stores import codec
from bot.stores.fact_common import (
    audience_of_messages,
    closed_norm,
    draft_fact,
    lineage,
    live_norm,
    message_audience,
    user_key,
)
from bot.stores.ids import FACT_ID_ATTEMPTS, canonical_fact_id, new_fact_id, normalize_fact
from bot.stores.protocols import StaleFact
from bot.stores.records import ErasureReceipt, Fact, FactSource

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

Doc = dict[str, Any]
_INDEX_NOT_FOUND = 27
_ORDER = [("created_at", ASCENDING), ("_id", ASCENDING)]
CLAIM_TTL = timedelta(seconds=60)


def _fact_doc(fact: Fact) -> Doc:
    doc: Doc = fact.model_dump(mode="json")
    doc["created_at"] = fact.created_at
    doc["live"] = fact.live
    doc["live_norm"] = live_norm(fact.audience, fact.text) if fact.live else closed_norm(fact.id)
    doc["claimed_at"] = None
    doc["user_key"] = user_key(fact.person)
    return doc


class MongoFacts:
    """The `FactStore` half of `MongoStore` (errors mapped by the caller's `_unavailable`)."""

    _facts: AsyncCollection[Doc]
    _receipts: AsyncCollection[Doc]
    _messages: AsyncCollection[Doc]  # read once, to find the audience of facts stored before it
    _guard: Callable[[str], AbstractContextManager[None]]  # maps outages to StoreUnavailable

    async def ensure_fact_indexes(self) -> None:
        """Indexes of the versioned layout; upgrades a collection written before versions."""
        try:
            await self._facts.drop_index("person_1_norm_1")  # the unversioned unique index
        except OperationFailure as exc:
            if exc.code != _INDEX_NOT_FOUND and "not found" not in str(exc).lower():
                raise
        async for old in self._facts.find({"live_norm": {"$exists": False}}):
            norm = old.get("norm") or normalize_fact(str(old.get("text", "")))
            await self._facts.update_one(
                {"_id": old["_id"]}, {"$set": {"live_norm": norm, "live": True}}
            )
        await self._settle_audiences()
        await self._facts.create_index([("person", ASCENDING), ("id", ASCENDING)], unique=True)
        await self._facts.create_index(
            [("person", ASCENDING), ("live_norm", ASCENDING)], unique=True
        )
        await self._facts.create_index([("person", ASCENDING), ("live", ASCENDING)])
        await self._facts.create_index(
            [("person", ASCENDING), ("live", ASCENDING), ("audience", ASCENDING)]
        )
        async for old in self._facts.find({"user_key": {"$exists": False}}, {"person": 1}):
            await self._facts.update_one(
                {"_id": old["_id"]}, {"$set": {"user_key": user_key(str(old.get("person", "")))}}
            )
        await self._facts.create_index(
            [("user_key", ASCENDING), ("live", ASCENDING), ("created_at", ASCENDING)]
        )
        await self._receipts.create_index([("person", ASCENDING), ("created_at", ASCENDING)])

    async def _settle_audiences(self) -> None:
        """Documents stored before facts carried an audience get one: found from the messages
        the fact came from while they are still stored (`fact_common.message_audience`; the
        narrowest of them), else the narrowest there is (`UNKNOWN_FACT`: the person's DMs only).
        A live document's `live_norm` takes its audience."""
        async for old in self._facts.find({"audience": {"$exists": False}}):
            found: list[str | None] = []
            for ref in old.get("source_messages") or ():
                session, _, seq = str(ref).rpartition("#")
                message = (
                    await self._messages.find_one({"session": session, "seq": int(seq)})
                    if seq.isdigit()
                    else None
                )
                meta = message.get("meta") if message is not None else None
                found.append(message_audience(session, meta) if isinstance(meta, dict) else None)
            audience = audience_of_messages(found)
            update: Doc = {"audience": audience}
            if old.get("live", True):
                update["live_norm"] = live_norm(audience, str(old.get("text", "")))
            await self._facts.update_one({"_id": old["_id"]}, {"$set": update})

    async def add_fact(
        self,
        person: PersonKey,
        text: str,
        *,
        key: str | None = None,
        source: FactSource = "user",
        session: SessionKey | None = None,
        source_ref: str | None = None,
        source_messages: Sequence[str] = (),
        valid_from: datetime | None = None,
        audience: str = UNKNOWN_FACT,
    ) -> Fact:
        draft = draft_fact(
            person, text, key, source, session, source_ref, source_messages, valid_from, audience
        )
        with self._guard("add_fact"):
            return await self._insert_live(draft)

    async def _insert_live(self, draft: Fact) -> Fact:
        norm = live_norm(draft.audience, draft.text)
        for _ in range(FACT_ID_ATTEMPTS):
            existing = await self._facts.find_one({"person": draft.person, "live_norm": norm})
            if existing is not None:
                return codec.load(Fact, existing)
            fact = draft.model_copy(update={"id": new_fact_id()})
            try:
                await self._facts.insert_one(_fact_doc(fact))
                return fact
            except DuplicateKeyError:
                # The id collided (try a fresh one) or the same text was added concurrently
                # (the next lookup returns it).
                continue
        raise RuntimeError(f"could not store a fact for {draft.person} after retries")

    async def replace_fact(
        self,
        person: PersonKey,
        old_id: str,
        text: str | None,
        *,
        key: str | None = None,
        source: FactSource = "user",
        session: SessionKey | None = None,
        source_ref: str | None = None,
        source_messages: Sequence[str] = (),
        valid_from: datetime | None = None,
        audience: str = UNKNOWN_FACT,
    ) -> Fact | None:
        with self._guard("replace_fact"):
            return await self._replace(
                person,
                old_id,
                text,
                key,
                source,
                session,
                source_ref,
                source_messages,
                valid_from,
                audience,
            )

    async def _replace(
        self,
        person: PersonKey,
        old_id: str,
        text: str | None,
        key: str | None,
        source: FactSource,
        session: SessionKey | None,
        source_ref: str | None,
        source_messages: Sequence[str],
        valid_from: datetime | None,
        audience: str,
    ) -> Fact | None:
        pid, fid = person.id, canonical_fact_id(old_id)
        live = await self._live_docs({"person": pid})
        old_doc = next((d for d in live if d["id"] == fid), None)
        now = codec.now_ms()
        # Claim the old version (a short lease, so a crash before the insert frees it): of two
        # concurrent replacements only one goes on, the other is told the fact is stale.
        claimed = (
            old_doc is not None
            and (
                await self._facts.update_one(
                    {
                        "person": pid,
                        "id": fid,
                        "live": True,
                        "$or": [{"claimed_at": None}, {"claimed_at": {"$lt": now - CLAIM_TTL}}],
                    },
                    {"$set": {"claimed_at": now}},
                )
            ).modified_count
            == 1
        )
        if old_doc is None or not claimed:
            raise StaleFact(fid)
        new: Fact | None = None
        if text is not None:
            draft = draft_fact(
                person,
                text,
                key,
                source,
                session,
                source_ref,
                source_messages,
                valid_from,
                audience,
            )
            draft.replaces = [fid]
            when = draft.valid_from
            if live_norm(draft.audience, draft.text) == old_doc["live_norm"]:
                await self._close(pid, fid, when, "updated", None)  # same text: free its norm
            new = await self._insert_live(draft)
            if new.id != fid and fid not in new.replaces:
                # The text was already live as another fact: that one stands for both.
                await self._facts.update_one(
                    {"person": pid, "id": new.id}, {"$addToSet": {"replaces": fid}}
                )
        closed_at = draft.valid_from if text is not None else now
        await self._close(
            pid, fid, closed_at, "updated" if new else "deleted", new.id if new else None
        )
        return new

    async def _close(
        self, pid: str, fid: str, when: Any, reason: str, replaced_by: str | None
    ) -> None:
        await self._facts.update_one(
            {"person": pid, "id": fid, "live": True},
            {
                "$unset": {"claimed_at": ""},
                "$set": {
                    "live": False,
                    "live_norm": closed_norm(fid),
                    "valid_to": when.isoformat().replace("+00:00", "Z"),
                    "closed_reason": reason,
                    "replaced_by": replaced_by,
                },
            },
        )

    async def _live_docs(self, scope: Doc, audiences: Sequence[str] | None = None) -> list[Doc]:
        """Live versions (of one person, or of one user's scopes; of `audiences` only, when
        given), finishing any close a crash interrupted (see the module docstring). Ids are
        unique per person only."""
        query: Doc = {**scope, "live": True}
        if audiences is not None:
            query["audience"] = {"$in": sorted(set(audiences))}
        docs = await self._facts.find(query).sort(_ORDER).to_list()
        replacing = docs
        if audiences is not None and docs:
            # A replacement of one of these may be of another audience: look for it there too.
            replacing = await self._facts.find(
                {**scope, "live": True, "replaces": {"$in": sorted({d["id"] for d in docs})}}
            ).to_list()
        replaced = {(d["person"], old): d for d in replacing for old in d.get("replaces") or ()}
        stale = [d for d in docs if (d["person"], d["id"]) in replaced]
        for d in stale:
            newer = replaced[(d["person"], d["id"])]
            await self._close(d["person"], d["id"], codec.now_ms(), "updated", newer["id"])
        return [d for d in docs if (d["person"], d["id"]) not in replaced]

    async def list_facts(
        self,
        person: PersonKey,
        *,
        history: bool = False,
        audiences: Sequence[str] | None = None,
    ) -> list[Fact]:
        with self._guard("list_facts"):
            return await self._list({"person": person.id}, history, audiences)

    async def list_user_facts(
        self,
        person: PersonKey,
        *,
        history: bool = False,
        audiences: Sequence[str] | None = None,
    ) -> list[Fact]:
        with self._guard("list_user_facts"):
            return await self._list({"user_key": user_key(person.id)}, history, audiences)

    async def _list(self, scope: Doc, history: bool, audiences: Sequence[str] | None) -> list[Fact]:
        if audiences is not None and not audiences:
            return []
        live = await self._live_docs(scope, audiences)
        if not history:
            return [codec.load(Fact, d) for d in live]
        query: Doc = dict(scope)
        if audiences is not None:
            query["audience"] = {"$in": sorted(set(audiences))}
        docs = await self._facts.find(query).sort(_ORDER).to_list()
        return [codec.load(Fact, d) for d in docs]

    async def delete_fact(self, person: PersonKey, fact_id: str) -> bool:
        fid = canonical_fact_id(fact_id)
        with self._guard("delete_fact"):
            docs = await self._facts.find({"person": person.id}).to_list()
            ids = lineage(fid, {str(d["id"]): codec.load(Fact, d) for d in docs})
            if not ids:
                return False
            result = await self._facts.delete_many({"person": person.id, "id": {"$in": ids}})
        return result.deleted_count > 0

    async def delete_all_facts(self, person: PersonKey) -> int:
        with self._guard("delete_all_facts"):
            result = await self._facts.delete_many({"person": person.id})
        return result.deleted_count

    async def add_receipt(self, receipt: ErasureReceipt) -> None:
        doc: Doc = receipt.model_dump(mode="json")
        doc["created_at"] = receipt.created_at
        with self._guard("add_receipt"):
            await self._receipts.insert_one(doc)

    async def receipts(self, person: PersonKey) -> list[ErasureReceipt]:
        with self._guard("receipts"):
            docs = await self._receipts.find({"person": person.id}).sort(_ORDER).to_list()
        return [codec.load(ErasureReceipt, d) for d in docs]
