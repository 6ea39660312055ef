"""Feedback in the core (`bot.feedback`, `BotApp.feedback`) on SQLite and mongoeco: a reply's
buttons point at its turn; a click is checked against the stored turn and kept with its
context (session, seq, model, audience); forget all and a reply delete remove votes; tokens
from elsewhere, of any length, are refused; the metric has no person in its labels."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest

from bot.app import BotApp
from bot.core import CommandRequest
from bot.feedback import FeedbackClick, ReplyRef, parse_token
from bot.keys import SessionKey, TeamKey
from bot.messages import IncomingMessage, MessageRef
from bot.metrics import FEEDBACK_VOTES, REGISTRY
from bot.stores.feedback import DOWN, UP, Tally
from testkit.fakes.openai_server import FakeOpenAI, status
from tests.helpers import CollectingSink

TEAM = TeamKey("test", "T1")


class RatedSink(CollectingSink):
    ref: ReplyRef | None = None

    def rate_with(self, ref: ReplyRef) -> None:
        self.ref = ref


@pytest.fixture(params=["sqlite", "mongoeco"])
async def app(request: pytest.FixtureRequest, make_app: Any) -> BotApp:
    if request.param == "sqlite":
        made: BotApp = await make_app()
        return made
    uri = request.getfixturevalue("mongoeco_uri")
    made = await make_app(mongodb_uri=uri, mongodb_db=f"t_{uuid.uuid4().hex[:12]}")
    return made


async def turn(app: BotApp, text: str, **where: Any) -> tuple[RatedSink, IncomingMessage]:
    msg = IncomingMessage(
        platform="test",
        team="T1",
        channel=where.pop("channel", "C1"),
        thread=where.pop("thread", None),
        user=where.pop("user", "U1"),
        text=text,
        **where,
    )
    sink = RatedSink()
    await app.handle_message(msg, sink)
    return sink, msg


def click(ref: ReplyRef, user: str, vote: int, *, reply: str = "R1", **over: Any) -> FeedbackClick:
    made = FeedbackClick(
        platform="test",
        team="T1",
        user=user,
        where=ref.session.thread or ref.session.channel,
        reply_id=reply,
        token=ref.token(vote),
    )
    return replace(made, **over)


async def test_a_vote_is_kept_with_its_turn_changed_and_forgotten(app: BotApp) -> None:
    sink, _ = await turn(app, "hello", channel="C2", is_private=True)
    ref = sink.ref
    assert ref is not None and ref.session == SessionKey("test", "T1", "C2") and ref.seq == 1
    before = REGISTRY.get_sample_value(
        "bot_feedback_votes_total", {"platform": "test", "vote": "up"}
    )
    answer = await app.feedback(click(ref, "U1", UP))
    assert answer.ok and answer.vote == UP and "Thanks" in answer.text
    after = REGISTRY.get_sample_value(
        "bot_feedback_votes_total", {"platform": "test", "vote": "up"}
    )
    assert (after or 0) - (before or 0) == 1
    assert set(FEEDBACK_VOTES._labelnames) == {"platform", "vote"}  # no person, team or reply
    assert "Changed" in (await app.feedback(click(ref, "U1", DOWN))).text
    await app.feedback(click(ref, "U2", UP))
    assert app.feedback_desk is not None
    store = app.feedback_desk.votes
    kept = {v.person: v for v in await store.votes_on(TEAM, "R1")}
    assert {p: v.vote for p, v in kept.items()} == {"test:T1:U1": DOWN, "test:T1:U2": UP}
    mine = kept["test:T1:U1"]
    assert (mine.session, mine.seq, mine.turn_id) == (ref.session.id, 1, ref.turn_id)
    assert mine.model == "gpt-4o-mini" and mine.audience == "private:test:T1:C2"
    assert (await store.feedback_totals(TEAM)).by_model == {"gpt-4o-mini": Tally(1, 1)}

    forgot = await app.handle_command(
        CommandRequest("test", "T1", "C2", "U2", "memory", "forget all")
    )
    assert forgot.ok
    assert [v.person for v in await store.votes_on(TEAM, "R1")] == ["test:T1:U1"]
    await app.message_deleted(MessageRef("test", "T1", ("R1",), channel="C2"))
    assert await store.votes_on(TEAM, "R1") == []


async def test_refused_clicks(app: BotApp) -> None:
    sink, _ = await turn(app, "hello")
    ref = sink.ref
    assert ref is not None
    gone = "can't find that reply"
    assert gone in (await app.feedback(click(ref, "U1", UP, team="T2"))).text  # another team
    fake_turn = replace(ref, turn_id="t_00000000deadbeef")
    assert gone in (await app.feedback(click(fake_turn, "U1", UP))).text  # no such turn
    assert gone in (await app.feedback(click(replace(ref, seq=99), "U1", UP))).text
    wrong_place = click(ref, "U1", UP, where="C9")  # clicked in another channel
    assert not (await app.feedback(wrong_place)).ok
    for token in ("x" * 100_000, "fb:u:t_1:1:C1", "fb:z:t_1:1:C1:-", "fb:u:t_1:1:C:1:-", ""):
        assert not (await app.feedback(click(ref, "U1", UP, token=token))).ok
    assert app.feedback_desk is not None
    assert (await app.feedback_desk.votes.feedback_totals(TEAM)).total == Tally()


async def test_an_apology_carries_no_buttons(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app: BotApp = await make_app()
    fake_openai.push(status(400), status(400), status(400))
    sink, _ = await turn(app, "hello")
    assert sink.error and sink.ref is None


def test_tokens_fit_discord_and_parse_back() -> None:
    ref = ReplyRef(SessionKey("discord", "1" * 20, "2" * 20, "3" * 20), "t_" + "a" * 16, 10**9)
    for vote in (UP, DOWN):
        token = ref.token(vote)
        assert len(token) <= 100
        parsed = parse_token(token)
        assert parsed is not None and parsed.vote == vote and parsed.seq == 10**9
        assert (parsed.channel, parsed.thread) == ("2" * 20, "3" * 20)
    assert parse_token(ReplyRef(SessionKey("s", "T", "D1"), "t_ab", 3).token(UP)) is not None
    assert parse_token(None) is None and parse_token(["fb:u"]) is None
