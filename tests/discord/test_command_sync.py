"""Slash-command sync at start-up, through the real discord.py client and the fake's REST:
only when the set changed, no stale global copies beside guild ones, the deprecated
`dm_permission` never sent, and a long rate limit never stops the bot from starting."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from adapters.discord import commandsync
from testkit.fakes.discord_api import FakeDiscord
from tests.discord.conftest import StartDiscord
from tests.slack.echo_core import EchoCore


def first_channel(fake: FakeDiscord, guild: str) -> str:
    return next(c for c, v in fake.channels.items() if v.get("guild_id") == guild)


async def test_the_sync_payload_uses_contexts_not_dm_permission(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    await start_discord(EchoCore())
    [put] = fake_discord.calls_to("PUT", r"/commands$")
    assert {c["name"] for c in put.body} == {"memory", "tools", "config", "usage"}
    for command in put.body:
        assert "dm_permission" not in command
        assert command["contexts"] and command["integration_types"] == [0]


async def test_an_unchanged_command_set_is_not_synced_again_on_restart(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    first = await start_discord(EchoCore())
    await first.close()
    assert fake_discord.command_puts == [None]
    await start_discord(EchoCore())
    assert fake_discord.command_puts == [None]  # Discord's copy was read, and it was current
    assert len(fake_discord.calls_to("GET", r"/commands$")) == 2


async def test_a_changed_command_set_is_synced(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    first = await start_discord(EchoCore())
    await first.close()
    [memory] = [c for c in fake_discord.commands[None] if c["name"] == "memory"]
    memory["description"] = "an older wording"
    await start_discord(EchoCore())
    assert fake_discord.command_puts == [None, None]
    [memory] = [c for c in fake_discord.commands[None] if c["name"] == "memory"]
    assert memory["description"] != "an older wording"


async def test_guild_commands_clear_the_global_ones_left_from_before(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    guild = fake_discord.add_guild("Guild A")
    first = await start_discord(EchoCore())  # global, as before DISCORD_COMMAND_GUILDS was set
    await first.close()
    assert {c["name"] for c in fake_discord.commands[None]} == {
        "memory",
        "tools",
        "config",
        "usage",
    }
    await start_discord(EchoCore(), command_guilds=(int(guild),))
    assert fake_discord.commands[None] == []  # not shown twice in the guild
    assert {c["name"] for c in fake_discord.commands[guild]} == {
        "memory",
        "tools",
        "config",
        "usage",
    }
    puts = len(fake_discord.command_puts)
    h = await start_discord(EchoCore(), command_guilds=(int(guild),))
    assert len(fake_discord.command_puts) == puts  # nothing to clear or sync a second time
    assert h.runtime.command_sync.synced == [int(guild)]


@pytest.mark.parametrize("global_", [False, True])
async def test_a_long_rate_limit_on_the_sync_does_not_stop_start_up_and_is_retried(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    make_app: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    global_: bool,
) -> None:
    """A 429 longer than discord.py's cap raises `RateLimited` (not an HTTPException): start-up
    goes on, a mention is answered, and the sync runs again after Discord's wait."""
    caplog.set_level(logging.INFO)
    waits: list[float] = []
    go_on = asyncio.Event()

    async def wait(seconds: float) -> None:  # the test decides when Discord's 120 s are over
        waits.append(seconds)
        await go_on.wait()

    monkeypatch.setattr(commandsync, "_sleep", wait)
    ada = fake_discord.add_user("Ada")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    fake_discord.fail_next("PUT", r"/commands$", retry_after=120.0, global_=global_)
    h = await start_discord(await make_app())
    assert fake_discord.command_puts == []  # the 429 created nothing
    [line] = [r for r in caplog.records if r.getMessage() == "discord_command_sync_rate_limited"]
    assert line.fields["retry_after"] == 120.0 and line.fields["retrying"]  # type: ignore[attr-defined]
    await fake_discord.user_says(channel, ada, f"{h.mention()} hi", mentions=[h.bot_id])
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(channel)))
    assert fake_discord.bot_messages(channel)[0]["content"] == "ok: hi"
    assert waits == [120.0]
    go_on.set()
    await fake_discord.wait_for(lambda: fake_discord.command_puts == [None])
    assert {c["name"] for c in fake_discord.commands[None]} == {
        "memory",
        "tools",
        "config",
        "usage",
    }
    await fake_discord.wait_for(lambda: h.runtime.command_sync.synced == [None])
    assert not [r for r in caplog.records if r.exc_info]
