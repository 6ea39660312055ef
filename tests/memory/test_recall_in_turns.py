"""Episodic recall through real turns (BotApp on FakeOpenAI, SQLite and mongoeco): the scope
rule, placement after the history, dates, and the relevance threshold."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.app import BotApp
from bot.keys import PersonKey
from bot.messages import IncomingMessage
from testkit.fakes.openai_server import FakeOpenAI
from tests.conftest import MakeApp
from tests.helpers import CollectingSink

JAN = datetime(2026, 1, 14, 10, 0, tzinfo=UTC)
MARCH = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
DETAIL = "the supplier for the Lisbon order is Ferreira & Filhos"
QUESTION = "Who was the supplier for the Lisbon order again?"
HEADER = "Memories from earlier conversations"


def msg(
    text: str,
    *,
    user: str,
    channel: str,
    thread: str | None = None,
    team: str = "T1",
    dm: bool = False,
    private: bool = False,
    at: datetime = MARCH,
) -> IncomingMessage:
    return IncomingMessage(
        platform="slack",
        team=team,
        channel=channel,
        thread=thread,
        user=user,
        text=text,
        user_name=user.lower(),
        is_dm=dm,
        is_private=private,
        sent_at=at,
    )


async def turn(app: BotApp, fake: FakeOpenAI, message: IncomingMessage) -> list[dict[str, Any]]:
    """Run a turn; the messages of the model request it made."""
    before = len(fake.requests)
    sink = CollectingSink()
    await app.handle_message(message, sink)
    assert sink.final and not sink.error
    assert app.episodic is not None and await app.episodic.idle(timeout=20)
    return list(fake.requests[before]["messages"])


def recalled(messages: list[dict[str, Any]]) -> str:
    found = [m["content"] for m in messages if m["role"] == "system" and HEADER in m["content"]]
    return found[0] if found else ""


@pytest.fixture(params=["sqlite", "mongo"])
async def app(request: pytest.FixtureRequest, make_app: MakeApp) -> BotApp:
    extra: dict[str, Any] = {}
    if request.param == "mongo":
        extra = {"mongodb_uri": request.getfixturevalue("mongo_uri"), "mongodb_db": _db()}
    made = await make_app(episodic=True, **extra)
    # Said in a January thread of #ops by Alice, with Bob there too.
    await turn(
        made,
        _fake(request),
        msg(f"FYI {DETAIL}", user="UALICE", channel="COPS", thread="1.1", at=JAN),
    )
    await turn(
        made,
        _fake(request),
        msg("Thanks, noted.", user="UBOB", channel="COPS", thread="1.1", at=JAN),
    )
    return made


def _db() -> str:
    import uuid

    return f"ep{uuid.uuid4().hex[:10]}"


def _fake(request: pytest.FixtureRequest) -> FakeOpenAI:
    fake: FakeOpenAI = request.getfixturevalue("fake_openai")
    return fake


async def test_recalled_in_a_new_thread_of_the_channel(
    app: BotApp, fake_openai: FakeOpenAI
) -> None:
    sent = await turn(app, fake_openai, msg(QUESTION, user="UCAROL", channel="COPS", thread="2.2"))
    memory = recalled(sent)
    assert "Ferreira & Filhos" in memory and "14 January 2026" in memory
    # After the history, right before the current message: the cached prefix stays put.
    assert sent[-1] == {"role": "user", "content": QUESTION}
    assert sent[-2]["content"] == memory
    # The next request repeats this one byte for byte (the memories stay with their message)
    # and does not recall the same memory again.
    follow = "And when does the Lisbon order ship?"
    nxt = await turn(app, fake_openai, msg(follow, user="UCAROL", channel="COPS", thread="2.2"))
    assert nxt[: len(sent)] == sent
    assert recalled(nxt[len(sent) :]) == ""


async def test_recalled_in_a_dm_with_a_participant_only(
    app: BotApp, fake_openai: FakeOpenAI
) -> None:
    alice = await turn(app, fake_openai, msg(QUESTION, user="UALICE", channel="DALICE", dm=True))
    assert "Ferreira & Filhos" in recalled(alice)
    bob = await turn(app, fake_openai, msg(QUESTION, user="UBOB", channel="DBOB", dm=True))
    assert "Ferreira & Filhos" in recalled(bob)  # he took part in that thread
    dave = await turn(app, fake_openai, msg(QUESTION, user="UDAVE", channel="DDAVE", dm=True))
    assert recalled(dave) == ""


async def test_not_in_another_channel_nor_another_team(
    app: BotApp, fake_openai: FakeOpenAI
) -> None:
    other = await turn(app, fake_openai, msg(QUESTION, user="UALICE", channel="CSALES"))
    assert recalled(other) == ""
    team = await turn(app, fake_openai, msg(QUESTION, user="UALICE", channel="COPS", team="T2"))
    assert recalled(team) == ""
    assert "Ferreira" not in json.dumps(other + team)


async def test_an_unrelated_question_recalls_nothing(app: BotApp, fake_openai: FakeOpenAI) -> None:
    sent = await turn(
        app, fake_openai, msg("What is a good name for a cat?", user="UCAROL", channel="COPS")
    )
    assert recalled(sent) == ""


async def test_a_private_channel_keeps_its_memories(app: BotApp, fake_openai: FakeOpenAI) -> None:
    await turn(
        app,
        fake_openai,
        msg(
            "The Porto budget is 40k euros", user="UALICE", channel="GSECRET", private=True, at=JAN
        ),
    )
    ask = "What is the Porto budget?"
    inside = await turn(
        app, fake_openai, msg(ask, user="UBOB", channel="GSECRET", thread="9.9", private=True)
    )
    assert "40k" in recalled(inside)
    dm = await turn(app, fake_openai, msg(ask, user="UALICE", channel="DALICE", dm=True))
    elsewhere = await turn(app, fake_openai, msg(ask, user="UALICE", channel="COPS"))
    assert "40k" not in recalled(dm) + recalled(elsewhere)


async def test_forget_all_erases_what_was_drawn_from_the_person(
    app: BotApp, fake_openai: FakeOpenAI
) -> None:
    from bot.core import CommandRequest

    reply = await app.handle_command(
        CommandRequest("slack", "T1", "COPS", "UALICE", "memory", "forget all")
    )
    assert reply.ok
    sent = await turn(app, fake_openai, msg(QUESTION, user="UCAROL", channel="COPS", thread="3.3"))
    assert "Ferreira" not in recalled(sent)
    assert app.episodic is not None
    assert await app.episodic.index.entries_of_person(PersonKey("slack", "T1", "UALICE")) == []
