"""The per-person connection store (`bot.stores.connections`) on every backend: keyed by team,
person and server; a sign-in's state taken once and never after it expired; forget and
removal of a server reach everything they should and nothing else."""

from __future__ import annotations

import pytest

from bot.stores.connections import Connection, ConnectionStore, PendingSignIn, connections_of
from bot.stores.protocols import Store

ALICE, BOB = "slack:T1:UALICE", "slack:T1:UBOB"


@pytest.fixture
def conns(store: Store) -> ConnectionStore:
    kept = connections_of(store)
    assert kept is not None
    return kept


def _conn(person: str, server: str, tokens: str = "enc:v1:x", team: str = "slack:T1") -> Connection:
    return Connection(team, person, server, "https://as.test", tokens, 1.0, 2.0)


def _pending(
    state: str, person: str = ALICE, server: str = "crm", expires: float = 100.0
) -> PendingSignIn:
    return PendingSignIn(state, "slack:T1", person, server, expires, "enc:v1:doc")


async def test_connections_are_per_person_and_replaced(conns: ConnectionStore) -> None:
    await conns.put(_conn(ALICE, "crm"))
    await conns.put(_conn(BOB, "crm", tokens="enc:v1:bob"))
    await conns.put(_conn(ALICE, "calendar"))
    assert (await conns.get("slack:T1", BOB, "crm")) == _conn(BOB, "crm", tokens="enc:v1:bob")
    assert [c.server for c in await conns.of_person("slack:T1", ALICE)] == ["calendar", "crm"]
    await conns.put(_conn(ALICE, "crm", tokens="enc:v1:rotated"))
    got = await conns.get("slack:T1", ALICE, "crm")
    assert got is not None and got.tokens == "enc:v1:rotated"
    assert await conns.get("slack:T2", ALICE, "crm") is None
    assert await conns.remove("slack:T1", ALICE, "crm") is True
    assert await conns.remove("slack:T1", ALICE, "crm") is False
    assert await conns.get("slack:T1", BOB, "crm") is not None


async def test_state_is_taken_once_and_not_after_it_expired(conns: ConnectionStore) -> None:
    await conns.add_pending(_pending("h1"))
    await conns.add_pending(_pending("h2", expires=10.0))
    assert await conns.peek_pending("h1", now=50.0) == _pending("h1")  # left in place
    assert await conns.peek_pending("h2", now=50.0) is None  # expired
    assert await conns.take_pending("h1", now=50.0) == _pending("h1")
    assert await conns.peek_pending("h1", now=50.0) is None
    assert await conns.take_pending("h1", now=50.0) is None  # a replayed callback
    assert await conns.take_pending("h2", now=50.0) is None  # expired
    assert await conns.take_pending("unknown", now=0.0) is None


async def test_remove_server_and_forget_person(conns: ConnectionStore) -> None:
    await conns.put(_conn(ALICE, "crm"))
    await conns.put(_conn(BOB, "crm"))
    await conns.put(_conn(BOB, "calendar"))
    await conns.put(_conn(ALICE, "crm", team="slack:T2"))
    await conns.put_client("slack:T1", "crm", "https://as.test", "enc:v1:client")
    await conns.add_pending(_pending("h1", person=ALICE, server="crm"))
    await conns.add_pending(_pending("h2", person=BOB, server="calendar"))
    assert await conns.remove_server("slack:T1", "crm") == 2
    assert await conns.get_client("slack:T1", "crm", "https://as.test") is None
    assert await conns.take_pending("h1", now=0.0) is None
    assert [c.server for c in await conns.of_person("slack:T1", BOB)] == ["calendar"]
    assert await conns.get("slack:T2", ALICE, "crm") is not None  # another team's install
    assert await conns.forget_person(BOB) == 1
    assert await conns.of_person("slack:T1", BOB) == []
    assert await conns.take_pending("h2", now=0.0) is None
    assert await conns.get("slack:T2", ALICE, "crm") is not None


async def test_clients_are_per_team_server_and_issuer(conns: ConnectionStore) -> None:
    await conns.put_client("slack:T1", "crm", "https://as.test", "enc:v1:a")
    await conns.put_client("slack:T1", "crm", "https://as.test", "enc:v1:b")
    assert await conns.get_client("slack:T1", "crm", "https://as.test") == "enc:v1:b"
    assert await conns.get_client("slack:T1", "crm", "https://other.test") is None
    assert await conns.get_client("slack:T2", "crm", "https://as.test") is None
