"""The feedback store (`bot.stores.feedback`) on every backend: one vote per person per reply,
changeable and back, totals per place/model/person since a time, forget, reply deletes, bounds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.keys import PersonKey, TeamKey
from bot.stores.feedback import (
    DOWN,
    MAX_ID_CHARS,
    UP,
    FeedbackStore,
    Tally,
    Vote,
    feedback_of,
)
from bot.stores.protocols import Store

T1, T2 = TeamKey("slack", "T1"), TeamKey("slack", "T2")
ANN, BOB = PersonKey("slack", "T1", "UANN"), PersonKey("slack", "T1", "UBOB")


def vote(
    person: PersonKey = ANN,
    value: int = UP,
    *,
    reply: str = "1.0001",
    at: float = 10.0,
    channel: str = "C1",
    model: str = "m-small",
    team: TeamKey = T1,
) -> Vote:
    return Vote(
        platform=team.platform,
        team=team.id,
        channel=channel,
        thread="1.0000",
        reply_id=reply,
        person=person.id,
        vote=value,
        at=at,
        model=model,
        session=f"{team.id}:{channel}:1.0000",
        turn_id="t_0123456789abcdef",
        seq=3,
        audience="public",
    )


@pytest.fixture
def feedback(store: Store) -> FeedbackStore:
    kept = feedback_of(store, keep=5, trim_every=1)
    assert kept is not None
    return kept


async def test_a_vote_is_kept_with_its_turn(feedback: FeedbackStore) -> None:
    assert await feedback.cast(vote()) is None
    (kept,) = await feedback.votes_on(T1, "1.0001")
    assert kept == vote()
    assert await feedback.votes_on(T2, "1.0001") == []  # another team's reply of the same id


async def test_one_vote_per_person_per_reply_changeable_and_back(
    feedback: FeedbackStore,
) -> None:
    await feedback.cast(vote(ANN, UP, at=1.0))
    assert await feedback.cast(vote(ANN, DOWN, at=2.0)) == UP
    assert await feedback.cast(vote(ANN, UP, at=3.0)) == DOWN
    await feedback.cast(vote(BOB, DOWN, at=4.0))
    votes = await feedback.votes_on(T1, "1.0001")
    assert [(v.person, v.vote, v.at) for v in votes] == [(ANN.id, UP, 3.0), (BOB.id, DOWN, 4.0)]


async def test_totals_per_place_model_and_person_since(feedback: FeedbackStore) -> None:
    await feedback.cast(vote(ANN, UP, reply="r1", at=5.0))
    await feedback.cast(vote(BOB, DOWN, reply="r1", at=6.0))
    await feedback.cast(vote(ANN, DOWN, reply="r2", at=7.0, channel="C2", model="m-big"))
    await feedback.cast(vote(ANN, UP, reply="r3", at=1.0))  # before `since`
    await feedback.cast(vote(ANN, UP, reply="r1", team=T2, at=8.0))  # another team
    totals = await feedback.feedback_totals(T1, since=5.0)
    assert totals.total == Tally(up=1, down=2)
    assert totals.by_place == {"C1": Tally(1, 1), "C2": Tally(0, 1)}
    assert totals.by_model == {"m-big": Tally(0, 1), "m-small": Tally(1, 1)}
    assert totals.by_person == {ANN.id: Tally(1, 1), BOB.id: Tally(0, 1)}
    everything = await feedback.feedback_totals(T1)
    assert everything.total == Tally(up=2, down=2)
    assert (await feedback.feedback_totals(TeamKey("slack", "T9"))).total == Tally()


async def test_forget_deletes_the_voters_votes_only(feedback: FeedbackStore) -> None:
    await feedback.cast(vote(ANN, UP, reply="r1"))
    await feedback.cast(vote(ANN, DOWN, reply="r2"))
    await feedback.cast(vote(BOB, UP, reply="r1"))
    assert await feedback.forget_voter(ANN) == 2
    assert [v.person for v in await feedback.votes_on(T1, "r1")] == [BOB.id]
    assert (await feedback.feedback_totals(T1)).by_person == {BOB.id: Tally(1, 0)}
    assert await feedback.forget_voter(ANN) == 0


async def test_a_deleted_reply_takes_its_votes(feedback: FeedbackStore) -> None:
    await feedback.cast(vote(ANN, UP, reply="r1"))
    await feedback.cast(vote(BOB, UP, reply="r1"))
    await feedback.cast(vote(BOB, DOWN, reply="r2"))
    assert await feedback.drop_replies(T1, ["r1", "nope"]) == 2
    assert await feedback.votes_on(T1, "r1") == []
    assert len(await feedback.votes_on(T1, "r2")) == 1


async def test_bounds(feedback: FeedbackStore) -> None:
    for bad in (
        replace(vote(), vote=0),
        replace(vote(), reply_id=""),
        replace(vote(), reply_id="x" * (MAX_ID_CHARS + 1)),
        replace(vote(), model="m" * 100_000),
        replace(vote(), seq=-1),
    ):
        with pytest.raises(ValueError):
            await feedback.cast(bad)
    assert await feedback.votes_on(T1, "1.0001") == []
    for i in range(8):  # kept: 5 per team, the oldest go
        await feedback.cast(vote(ANN, UP, reply=f"r{i}", at=float(i)))
    await feedback.cast(vote(ANN, UP, reply="other", team=T2, at=0.0))
    assert (await feedback.feedback_totals(T1)).total == Tally(up=5)
    assert await feedback.votes_on(T1, "r2") == []
    assert len(await feedback.votes_on(T1, "r3")) == 1
    assert len(await feedback.votes_on(T2, "other")) == 1
