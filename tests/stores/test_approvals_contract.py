"""The approvals store (`bot.stores.approvals`) on every backend: a pending call decided once
(a double click or a second replica changes nothing more), the turn's pending calls, expiry,
the audit listing, grants and their revocation, forget, bounds."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from bot.keys import PersonKey, TeamKey
from bot.stores.approvals import (
    MAX_ARGUMENTS_CHARS,
    Approval,
    ApprovalStore,
    Grant,
    approvals_of,
)
from bot.stores.protocols import Store

T1, T2 = TeamKey("slack", "T1"), TeamKey("slack", "T2")
ANN, BOB = PersonKey("slack", "T1", "UANN"), PersonKey("slack", "T1", "UBOB")
SESSION = "slack:T1:C1:1.0000"


def approval(
    aid: str = "a1",
    *,
    person: PersonKey = ANN,
    turn: str = "t_1",
    created: float = 100.0,
    ttl: float = 600.0,
    team: TeamKey = T1,
    tool: str = "crm_create_ticket",
) -> Approval:
    return Approval(
        id=aid,
        team=team.id,
        place="C1",
        session=SESSION if team == T1 else f"{team.id}:C1:1.0000",
        person=person.id,
        audience="public",
        turn_id=turn,
        call_id=f"call_{aid}",
        tool=tool,
        arguments='{"title":"printer on fire"}',
        message='{"text":"open a ticket: printer on fire"}',
        created_at=created,
        expires_at=created + ttl,
    )


@pytest.fixture
def approvals(store: Store) -> ApprovalStore:
    kept = approvals_of(store, keep=3)
    assert kept is not None
    return kept


async def test_a_pending_call_is_kept_as_asked(approvals: ApprovalStore) -> None:
    await approvals.add(approval())
    assert await approvals.get("a1") == approval()
    assert await approvals.get("nope") is None
    with pytest.raises(ValueError):
        await approvals.add(approval())  # the id is taken


async def test_a_call_is_decided_once(approvals: ApprovalStore) -> None:
    await approvals.add(approval())
    first = await approvals.decide("a1", "approved", by=ANN.id, at=150.0)
    assert first is not None
    assert (first.status, first.decided_by, first.decided_at) == ("approved", ANN.id, 150.0)
    assert await approvals.decide("a1", "approved", by=ANN.id, at=151.0) is None  # double click
    assert await approvals.decide("a1", "denied", by=ANN.id, at=152.0) is None
    assert await approvals.decide("nope", "denied", by=ANN.id, at=152.0) is None
    await approvals.finish("a1", "ok", 812.5)
    kept = await approvals.get("a1")
    assert kept is not None
    assert (kept.status, kept.outcome, kept.latency_ms, kept.decided_at) == (
        "approved",
        "ok",
        812.5,
        150.0,
    )


async def test_concurrent_clicks_one_wins(approvals: ApprovalStore) -> None:
    await approvals.add(approval())
    results = await asyncio.gather(
        *(approvals.decide("a1", "approved", by=ANN.id, at=float(i)) for i in range(8))
    )
    assert sum(r is not None for r in results) == 1


async def test_the_turns_pending_calls_and_the_persons_latest(approvals: ApprovalStore) -> None:
    await approvals.add(approval("a1", created=100.0))
    await approvals.add(approval("a2", created=101.0))
    await approvals.add(approval("a3", created=102.0, turn="t_2"))
    await approvals.add(approval("b1", created=103.0, person=BOB, turn="t_3"))
    assert [a.id for a in await approvals.of_turn(SESSION, "t_1")] == ["a1", "a2"]
    await approvals.decide("a1", "denied", by=ANN.id, at=110.0)
    turn = await approvals.of_turn(SESSION, "t_1")
    assert [(a.id, a.status) for a in turn] == [("a1", "denied"), ("a2", "pending")]
    latest = await approvals.latest_pending(SESSION, ANN.id)
    assert latest is not None and latest.id == "a3"
    await approvals.decide("a3", "approved", by=ANN.id, at=111.0)
    await approvals.decide("a2", "approved", by=ANN.id, at=111.0)
    assert await approvals.latest_pending(SESSION, ANN.id) is None
    assert await approvals.latest_pending("slack:T1:C9:1.0000", BOB.id) is None


async def test_due_lists_pending_calls_past_their_time(approvals: ApprovalStore) -> None:
    await approvals.add(approval("a1", created=100.0, ttl=10.0))
    await approvals.add(approval("a2", created=100.0, ttl=5.0))
    await approvals.add(approval("a3", created=100.0, ttl=60.0))
    await approvals.add(approval("a4", created=100.0, ttl=1.0))
    await approvals.decide("a4", "approved", by=ANN.id, at=100.5)
    assert [a.id for a in await approvals.due(110.0)] == ["a2", "a1"]
    assert [a.id for a in await approvals.due(110.0, limit=1)] == ["a2"]
    assert await approvals.due(100.0) == []


async def test_unsettled_lists_decided_calls_never_settled(approvals: ApprovalStore) -> None:
    for aid in ("a1", "a2", "a3", "a4"):
        await approvals.add(approval(aid))
    await approvals.decide("a1", "approved", by=ANN.id, at=150.0)
    await approvals.decide("a2", "denied", by=ANN.id, at=140.0)
    await approvals.decide("a3", "approved", by=ANN.id, at=190.0)  # too recent
    await approvals.decide("a4", "approved", by=ANN.id, at=120.0)
    await approvals.finish("a4", "ok", 10.0)  # settled
    assert [a.id for a in await approvals.unsettled(160.0)] == ["a2", "a1"]
    assert [a.id for a in await approvals.unsettled(160.0, limit=1)] == ["a2"]


async def test_recent_lists_the_teams_newest_first_and_keeps_a_bound(
    approvals: ApprovalStore,
) -> None:
    for i in range(5):
        await approvals.add(approval(f"a{i}", created=100.0 + i))
        await approvals.decide(f"a{i}", "denied", by=ANN.id, at=200.0)
    await approvals.add(approval("p", created=50.0))  # pending: never dropped by the bound
    await approvals.add(approval("other", created=300.0, team=T2))
    assert [a.id for a in await approvals.recent(T1, limit=10)] == ["a4", "a3", "a2", "p"]
    assert [a.id for a in await approvals.recent(T1, limit=2)] == ["a4", "a3"]
    assert [a.id for a in await approvals.recent(T2)] == ["other"]


async def test_grants_per_person_tool_and_place_until_revoked(approvals: ApprovalStore) -> None:
    args = (T1.id, "C1", ANN.id, "crm_create_ticket")
    assert not await approvals.granted(*args)
    await approvals.grant(Grant(*args, by=ANN.id, at=1.0))
    await approvals.grant(Grant(*args, by=ANN.id, at=2.0))  # renewed, not doubled
    await approvals.grant(Grant(T1.id, "C1", BOB.id, "crm_create_ticket", by=BOB.id, at=3.0))
    assert await approvals.granted(*args)
    assert not await approvals.granted(T1.id, "C2", ANN.id, "crm_create_ticket")  # other place
    assert not await approvals.granted(T1.id, "C1", ANN.id, "crm_close_ticket")  # other tool
    assert not await approvals.granted(T2.id, "C1", ANN.id, "crm_create_ticket")  # other team
    grants = await approvals.grants(T1, "C1")
    assert [(g.person, g.at) for g in grants] == [(ANN.id, 2.0), (BOB.id, 3.0)]
    assert await approvals.revoke(T1, "C1", "crm_create_ticket", ANN.id) == 1
    assert not await approvals.granted(*args)
    assert await approvals.granted(T1.id, "C1", BOB.id, "crm_create_ticket")
    assert await approvals.revoke(T1, "C1", "crm_create_ticket") == 1
    assert await approvals.grants(T1, "C1") == []


async def test_forget_takes_the_persons_requests_and_grants(approvals: ApprovalStore) -> None:
    await approvals.add(approval("a1"))
    await approvals.add(approval("b1", person=BOB, turn="t_3"))
    await approvals.decide("b1", "approved", by=ANN.id, at=1.0)  # (an admin's own click)
    await approvals.grant(Grant(T1.id, "C1", ANN.id, "crm_create_ticket", by=ANN.id, at=1.0))
    await approvals.grant(Grant(T1.id, "C1", BOB.id, "crm_create_ticket", by=BOB.id, at=1.0))
    assert await approvals.forget_person(ANN) == 1
    assert await approvals.get("a1") is None
    kept = await approvals.get("b1")
    assert kept is not None and kept.decided_by == ""  # ANN's name gone, BOB's request kept
    assert [g.person for g in await approvals.grants(T1, "C1")] == [BOB.id]


async def test_bounds(approvals: ApprovalStore) -> None:
    for bad in (
        replace(approval(), id=""),
        replace(approval(), tool="t" * 1000),
        replace(approval(), arguments="x" * (MAX_ARGUMENTS_CHARS + 1)),
        replace(approval(), status="maybe"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValueError):
            await approvals.add(bad)
    assert await approvals.get("a1") is None
    with pytest.raises(ValueError):
        await approvals.grant(Grant(T1.id, "C1", ANN.id, "", by=ANN.id, at=1.0))
    with pytest.raises(ValueError):
        await approvals.decide("a1", "pending", by=ANN.id, at=1.0)
