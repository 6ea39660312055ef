"""MongoDB specifics: indexes, retry-safe appends, and outages surfacing as StoreUnavailable."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar
from urllib.parse import urlsplit

import pytest
from bson import ObjectId
from pymongo.errors import DuplicateKeyError

from adapters.slack.installations import installation_docs
from bot.keys import PersonKey, SessionKey
from bot.stores.mongo import MongoStore
from bot.stores.protocols import StoreUnavailable
from bot.stores.records import NewMessage
from tests.stores.backends import mongo_backend
from tests.support.tcp_proxy import TcpProxy

T = TypeVar("T")
CHANNEL = SessionKey("slack", "T1", "C1")
ALICE = PersonKey("slack", "T1", "U1")


def msg(content: str) -> NewMessage:
    return NewMessage(role="user", content=content, speaker=ALICE.id, turn_id="t")


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[MongoStore]:
    async with mongo_backend("mongo", mongo_uri) as backend:
        assert isinstance(backend.store, MongoStore)
        yield backend.store


async def test_indexes_are_created_idempotently(store: MongoStore) -> None:
    await store.ensure_indexes()  # a second run at the next start is harmless
    messages = await store.db["messages"].index_information()
    keyed = {tuple(k for k, _ in spec["key"]): spec for spec in messages.values()}
    assert keyed[("session", "seq")].get("unique")
    assert ("speaker", "session") in keyed
    facts = await store.db["facts"].index_information()
    assert {tuple(k for k, _ in s["key"]) for s in facts.values() if s.get("unique")} >= {
        ("person", "id"),
        ("person", "live_norm"),
    }
    calls = await store.db["tool_calls"].index_information()
    ttl = [s for s in calls.values() if "expireAfterSeconds" in s]
    assert [(s["key"], s["expireAfterSeconds"]) for s in ttl] == [([("created_at", 1)], 604800)]
    await installation_docs(store).ensure_schema()  # Slack's storage, on the store's database
    slack = await store.db["slack_installations"].index_information()
    unique = {tuple(k for k, _ in s["key"]) for s in slack.values() if s.get("unique")}
    assert unique - {("_id",)} == {("enterprise_id", "team_id", "name")}
    states = await store.db["slack_oauth_states"].index_information()
    ttl = [s for s in states.values() if "expireAfterSeconds" in s]
    assert [(s["key"], s["expireAfterSeconds"]) for s in ttl] == [([("expires_at", 1)], 0)]


async def test_a_duplicate_seq_cannot_be_written(store: MongoStore) -> None:
    (first,) = await store.append(CHANNEL, [msg("one")])
    with pytest.raises(DuplicateKeyError):
        await store.db["messages"].insert_one({"session": CHANNEL.id, "seq": first.seq})


async def test_one_document_per_message(store: MongoStore) -> None:
    await store.append(CHANNEL, [msg(str(i)) for i in range(30)])
    assert await store.db["messages"].count_documents({"session": CHANNEL.id}) == 30
    counter = await store.db["counters"].find_one({"_id": CHANNEL.id})
    assert counter is not None and counter["last_seq"] == 30


async def test_a_retried_insert_does_not_duplicate(store: MongoStore) -> None:
    docs = [
        {"_id": ObjectId(), "session": CHANNEL.id, "seq": s, "speaker": ALICE.id} for s in (1, 2)
    ]
    await store._insert_idempotent([dict(d) for d in docs[:1]])  # first attempt landed halfway
    await store._insert_idempotent([dict(d) for d in docs])  # the retry: no error, no copy
    assert await store.db["messages"].count_documents({"session": CHANNEL.id}) == 2


async def test_an_unreachable_server_is_store_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(StoreUnavailable):
        await MongoStore.open(
            f"mongodb://127.0.0.1:{port}/?directConnection=true", "x", timeout_ms=300
        )


async def _eventually(op: Callable[[], Awaitable[T]], *, seconds: float = 5) -> T:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await op()
        except StoreUnavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_an_outage_mid_run_is_store_unavailable(mongoeco_uri: str) -> None:
    target = urlsplit(mongoeco_uri)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 27017)
    await proxy.start()
    uri = f"mongodb://127.0.0.1:{proxy.port}/?directConnection=true"
    store = await MongoStore.open(uri, "outage_test", timeout_ms=400)
    try:
        await store.append(CHANNEL, [msg("before")])
        await proxy.stop()
        with pytest.raises(StoreUnavailable):
            await store.recent(CHANNEL, limit=5)
        with pytest.raises(StoreUnavailable):
            await store.append(CHANNEL, [msg("during")])
        assert not await store.ping()
        await proxy.start()  # the driver's monitor finds the server again within a few checks
        assert [m.content for m in await _eventually(lambda: store.recent(CHANNEL, limit=5))] == [
            "before"
        ]
    finally:
        await store.client.drop_database("outage_test")
        await store.close()
        await proxy.stop()


async def test_installation_documents_carry_schema_version_and_an_expiring_state(
    store: MongoStore,
) -> None:
    docs = installation_docs(store)
    await docs.put_doc("-", "T1", "bot", {"bot_token": "xoxb-1"})
    stored = await store.db["slack_installations"].find_one({"team_id": "T1"})
    assert stored is not None and stored["schema_version"] == 1
    assert stored["doc"] == {"bot_token": "xoxb-1"} and isinstance(stored["updated_at"], datetime)
    await docs.put_oauth_state("pending", time.time() + 600)
    state = await store.db["slack_oauth_states"].find_one({"_id": "pending"})
    assert state is not None and isinstance(state["expires_at"], datetime)
    assert state["schema_version"] == 1


async def test_an_expired_state_not_yet_reaped_is_refused(store: MongoStore) -> None:
    """Real MongoDB's TTL monitor runs about once a minute: consume must check the expiry."""
    past = datetime.now(UTC) - timedelta(seconds=5)
    await store.db["slack_oauth_states"].drop_indexes()  # no TTL: the document stays
    await store.db["slack_oauth_states"].insert_one({"_id": "late", "expires_at": past})
    assert await store.db["slack_oauth_states"].count_documents({"_id": "late"}) == 1
    assert await installation_docs(store).consume_oauth_state("late") is False
