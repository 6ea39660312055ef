"""Feedback buttons on Discord through the real discord.py client and the real core: the last
message of a reply carries two buttons; a click (INTERACTION_CREATE type 3) is answered
ephemerally within the window and kept; changed; one vote per person; forget and a delete of
the reply remove votes; another guild, an unknown message and hostile custom_ids are refused."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from bot.app import BotApp
from bot.feedback import FeedbackAnswer, FeedbackClick, ReplyRef, offer_feedback
from bot.keys import TeamKey
from bot.messages import IncomingMessage, ReplySink
from bot.stores.feedback import Tally
from testkit.fakes.discord_api import EPHEMERAL, FakeDiscord, components_problem
from tests.discord.conftest import StartDiscord
from tests.discord.harness import DiscordHarness
from tests.slack.echo_core import EchoCore


def first_channel(fake: FakeDiscord, guild: str) -> str:
    return next(c for c, v in fake.channels.items() if v.get("guild_id") == guild)


async def reply_to(h: DiscordHarness, channel: str, user: str, words: str) -> dict[str, Any]:
    await h.fake.user_says(channel, user, f"{h.mention()} {words}", mentions=[h.bot_id])
    count = len(h.fake.bot_messages(channel))
    await h.fake.wait_for(lambda: len(h.fake.bot_messages(channel)) > count - 1 and count >= 0)
    await h.fake.wait_for(lambda: any(m["components"] for m in h.fake.bot_messages(channel)))
    await h.idle()
    return h.fake.bot_messages(channel)[-1]


async def answered(fake: FakeDiscord, token: str) -> str:
    interaction = fake.interactions[token]
    await fake.wait_for(lambda: interaction.response is not None)
    response = interaction.response or {}
    assert interaction.responded_at is not None
    assert interaction.responded_at - interaction.created < 3.0  # Discord's window
    assert response["type"] == 4 and response["data"]["flags"] & EPHEMERAL
    return str(response["data"]["content"])


async def votes(app: BotApp, guild: str, reply: str) -> list[tuple[str, int]]:
    assert app.feedback_desk is not None
    kept = await app.feedback_desk.votes.votes_on(TeamKey("discord", guild), reply)
    return sorted((v.person.rsplit(":", 1)[1], v.vote) for v in kept)


async def test_buttons_votes_forget_and_delete(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    app: BotApp = await make_app()
    h = await start_discord(app)
    reply = await reply_to(h, channel, ada, "how tall is the tower")
    (row,) = reply["components"]
    assert [b["type"] for b in row["components"]] == [2, 2]
    assert all(len(b["custom_id"]) <= 100 for b in row["components"])

    up = await fake_discord.user_clicks(reply["id"], ada, label="Helpful")
    assert "Thanks" in await answered(fake_discord, up.token)
    down = await fake_discord.user_clicks(reply["id"], ada, label="Not helpful")
    assert "Changed your vote" in await answered(fake_discord, down.token)
    other = await fake_discord.user_clicks(reply["id"], bob, label="Helpful")
    await answered(fake_discord, other.token)
    assert await votes(app, guild, reply["id"]) == [(ada, -1), (bob, 1)]
    assert app.feedback_desk is not None
    totals = await app.feedback_desk.votes.feedback_totals(TeamKey("discord", guild))
    assert totals.total == Tally(1, 1) and totals.by_place == {channel: Tally(1, 1)}

    forget = await fake_discord.run_command(channel, bob, "memory", "forget", {"id": "all"})
    await fake_discord.wait_for(lambda: bool(forget.response) or bool(forget.followups), 15)
    await fake_discord.wait_for(lambda: bool(forget.followups) or bool(forget.original), 15)
    await h.idle()
    assert await votes(app, guild, reply["id"]) == [(ada, -1)]

    await fake_discord.user_deletes(reply["id"])
    for _ in range(100):  # applied from the inbox, after the gateway event
        if not await votes(app, guild, reply["id"]):
            break
        await asyncio.sleep(0.05)
    assert await votes(app, guild, reply["id"]) == []


async def test_refusals_and_hostile_clicks(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    make_app: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ada = fake_discord.add_user("Ada")
    guild, elsewhere = fake_discord.add_guild("Guild A"), fake_discord.add_guild("Guild B")
    channel = first_channel(fake_discord, guild)
    app: BotApp = await make_app()
    h = await start_discord(app)
    reply = await reply_to(h, channel, ada, "hello")
    caplog.set_level(logging.INFO)
    tries = [
        await fake_discord.user_clicks(reply["id"], ada, guild_id=elsewhere),  # another guild
        await fake_discord.user_clicks(  # a message the bot never wrote
            reply["id"], ada, custom_id=f"fb:u:t_00000000deadbeef:1:{channel}:-"
        ),
        await fake_discord.user_clicks(reply["id"], ada, custom_id="fb:" + "x" * 100_000),
        await fake_discord.user_clicks(reply["id"], ada, custom_id="fb:u:t_1:1:1:1:extra:parts"),
    ]
    texts = [await answered(fake_discord, t.token) for t in tries]
    assert "can't find that reply" in texts[0] and "can't find that reply" in texts[1]
    assert all("isn't one I can use" in t for t in texts[2:])
    # Not a feedback button, and a payload without a custom_id: left alone, no traceback.
    await fake_discord.user_clicks(reply["id"], ada, custom_id="someone-elses-button")
    await fake_discord.user_clicks(reply["id"], ada, data={"component_type": 2})
    await h.idle()
    assert await votes(app, guild, reply["id"]) == []
    assert not [r for r in caplog.records if r.exc_info]
    assert "feedback_refused" in [r.msg for r in caplog.records]


def test_the_fake_checks_components_as_discord_does() -> None:
    button = {"type": 2, "style": 2, "label": "Helpful", "custom_id": "a"}
    assert components_problem([{"type": 1, "components": [button]}]) is None
    bad = [
        [{"type": 1, "components": [{**button, "custom_id": None}]}],
        [{"type": 1, "components": [{**button, "custom_id": "x" * 101}]}],
        [{"type": 1, "components": [{**button, "label": "x" * 81}]}],
        [{"type": 1, "components": [{**button, "custom_id": str(i)} for i in range(6)]}],
        [{"type": 1, "components": [{**button, "type": 9}]}],
        [{"type": 1, "components": [button, button]}],  # the same custom_id twice
        [button],  # not in an action row
    ]
    for rows in bad:
        assert components_problem(rows) is not None, rows


class SlowVotes(EchoCore):
    """A core whose replies carry buttons and whose store takes 2.5 s to keep a vote."""

    async def handle_message(self, message: IncomingMessage, sink: ReplySink) -> None:
        offer_feedback(sink, ReplyRef(message.session, "t_0123456789abcdef", 1))
        await super().handle_message(message, sink)

    async def feedback(self, click: FeedbackClick) -> FeedbackAnswer:
        await asyncio.sleep(2.5)
        return FeedbackAnswer("noted", vote=1)


async def test_a_slow_vote_is_deferred_within_the_window_then_answered(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    ada = fake_discord.add_user("Ada")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    h = await start_discord(SlowVotes())
    reply = await reply_to(h, channel, ada, "hello")
    clicked = await fake_discord.user_clicks(reply["id"], ada, label="Helpful")
    await fake_discord.wait_for(lambda: bool(clicked.followups), timeout=10)
    assert clicked.response is not None and clicked.response["type"] == 5
    assert clicked.responded_at is not None and clicked.responded_at - clicked.created < 3.0
    assert clicked.followups[0]["content"] == "noted"
    assert clicked.followups[0]["flags"] & EPHEMERAL


async def test_refused_buttons_still_send_the_answer(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    make_app: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Discord refusing the components (a 400) costs the buttons, never the answer."""
    from testkit.fakes import discord_api

    monkeypatch.setattr(discord_api, "components_problem", lambda rows: "refused" if rows else None)
    ada = fake_discord.add_user("Ada")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    h = await start_discord(await make_app())
    await fake_discord.user_says(channel, ada, f"{h.mention()} hello", mentions=[h.bot_id])
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(channel)))
    await h.idle()
    (reply,) = fake_discord.bot_messages(channel)
    assert reply["content"] == "ok: hello" and reply["components"] == []


async def test_a_vote_in_a_dm(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    app: BotApp = await make_app()
    h = await start_discord(app)
    await fake_discord.user_says(dm, ada, "hello there")
    await fake_discord.wait_for(lambda: any(m["components"] for m in fake_discord.bot_messages(dm)))
    await h.idle()
    reply = fake_discord.bot_messages(dm)[-1]
    clicked = await fake_discord.user_clicks(reply["id"], ada, label="Not helpful")
    assert "Thanks" in await answered(fake_discord, clicked.token)
    assert await votes(app, "@dm", reply["id"]) == [(ada, -1)]
    assert app.feedback_desk is not None
    (vote,) = await app.feedback_desk.votes.votes_on(TeamKey("discord", "@dm"), reply["id"])
    assert vote.audience.startswith("dm:") and vote.thread == ""
