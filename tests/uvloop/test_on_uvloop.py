"""The Slack and Discord end-to-end flows again, on uvloop (the loop the bot's processes run on),
and the loop choice of `bot.eventloop`."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import pytest

from bot import eventloop
from testkit.fakes.discord_api import FakeDiscord
from testkit.slack_harness import SlackHarness
from tests.discord.conftest import StartDiscord
from tests.discord.test_conversation import first_channel


def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


async def test_a_mention_and_its_follow_up_are_answered_on_uvloop(slack_real: SlackHarness) -> None:
    assert _loop_module().startswith("uvloop")
    root = await slack_real.mention("hello there", channel="C1")
    await slack_real.wait_done(root, timeout=10)
    follow = await slack_real.channel_message("and one more thing", thread_ts=root)
    await slack_real.wait_done(follow, timeout=10)
    assert slack_real.replies("C1", thread_ts=root) == ["ok: hello there", "ok: and one more thing"]
    # The connection guard holds uvloop's transports too: the health route answers.
    async with slack_real.http.get(slack_real.url("/healthz")) as resp:
        assert resp.status == 200


async def test_a_discord_mention_is_answered_on_uvloop(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    assert _loop_module().startswith("uvloop")
    ada = fake_discord.add_user("Ada")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    h = await start_discord(await make_app())
    await fake_discord.user_says(
        channel, ada, f"{h.mention()} hello from discord", mentions=[fake_discord.app_id]
    )
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(channel)))
    await h.idle()
    [reply] = fake_discord.bot_messages(channel)
    assert reply["content"] == "ok: hello from discord"


def test_auto_runs_uvloop_when_installed_and_asyncio_when_asked() -> None:
    async def name() -> str:
        return eventloop.running_loop_name()

    assert eventloop.run(name(), "auto") == "uvloop"
    assert eventloop.run(name(), "uvloop") == "uvloop"
    assert eventloop.run(name(), "asyncio") == "asyncio"


def test_uvloop_asked_for_but_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else real(name, *a)
    )

    async def name() -> str:
        return eventloop.running_loop_name()

    assert eventloop.run(name(), "auto") == "asyncio"  # without uvloop, auto is asyncio's loop
    with pytest.raises(eventloop.EventLoopUnavailable, match="BOT_EVENT_LOOP=uvloop"):
        eventloop.run(name(), "uvloop")
