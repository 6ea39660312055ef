"""DISCORD_MESSAGE_CONTENT=auto: without the privileged intent the bot runs on, answering what
Discord still sends the content of (mentions, DMs), through the real client and the fake
gateway, which withholds content from sessions without the intent as Discord does."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from testkit.fakes.discord_api import MESSAGE_CONTENT, FakeDiscord
from tests.discord.conftest import StartDiscord
from tests.discord.harness import DiscordHarness
from tests.discord.test_commands import first_channel


async def _still_answers(h: DiscordHarness, fake: FakeDiscord) -> None:
    ada = fake.add_user("Ada")
    channel = first_channel(fake, next(iter(fake.guilds)))
    dm = fake.dm_channel(ada)
    await fake.user_says(channel, ada, f"{h.mention()} hello", mentions=[fake.app_id])
    await fake.user_says(dm, ada, "in a DM")
    await fake.wait_for(lambda: bool(fake.bot_messages(channel) and fake.bot_messages(dm)))
    await h.idle()
    assert [m["content"] for m in fake.bot_messages(channel)] == ["ok: hello"]
    assert [m["content"] for m in fake.bot_messages(dm)] == ["ok: in a DM"]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "discord_message_content_off"]


async def test_auto_without_the_portal_setting_identifies_without_the_intent(
    start_discord: StartDiscord, make_app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    fake = await FakeDiscord(allow_message_content=False).start()
    try:
        fake.add_guild("Guild A")
        h = await DiscordHarness.start(fake, await make_app())
        try:
            [identify] = fake.identifies  # no refused attempt first
            assert not int(identify["intents"]) & MESSAGE_CONTENT
            [line] = _warnings(caplog)
            assert "Privileged Gateway Intents" in line.fields["advice"]  # type: ignore[attr-defined]
            await _still_answers(h, fake)
        finally:
            await h.close()
    finally:
        await fake.close()


async def test_auto_after_a_4014_reconnects_without_the_intent(
    start_discord: StartDiscord, make_app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    fake = await FakeDiscord(allow_message_content=False).start()
    fake.content_flag = True  # the application's flags say it is on; the gateway refuses it
    try:
        fake.add_guild("Guild A")
        h = await DiscordHarness.start(fake, await make_app())
        try:
            first, second = fake.identifies
            assert int(first["intents"]) & MESSAGE_CONTENT
            assert not int(second["intents"]) & MESSAGE_CONTENT
            [line] = _warnings(caplog)
            assert "4014" in line.fields["why"]  # type: ignore[attr-defined]
            await _still_answers(h, fake)
            assert not [r for r in caplog.records if r.exc_info]
        finally:
            await h.close()
    finally:
        await fake.close()


async def test_without_the_intent_a_thread_follow_up_without_content_is_not_answered(
    start_discord: StartDiscord, make_app: Any
) -> None:
    """Discord sends a follow-up in the bot's thread without its text: nothing to answer
    (not "I got an empty message"); a mention in the same thread is answered."""
    fake = await FakeDiscord(allow_message_content=False).start()
    try:
        ada = fake.add_user("Ada")
        channel = first_channel(fake, fake.add_guild("Guild A"))
        h = await DiscordHarness.start(fake, await make_app(), thread_everywhere=True)
        try:
            await fake.user_says(channel, ada, f"{h.mention()} start", mentions=[fake.app_id])
            await fake.wait_for(lambda: any(c.get("type") == 11 for c in fake.channels.values()))
            thread = next(k for k, c in fake.channels.items() if c.get("type") == 11)
            await fake.wait_for(lambda: bool(fake.bot_messages(thread)))
            await fake.user_says(thread, ada, "a follow-up without a mention")
            await fake.user_says(thread, ada, f"{h.mention()} and now?", mentions=[fake.app_id])
            await fake.wait_for(lambda: len(fake.bot_messages(thread)) >= 2)
            await h.idle()
            assert [m["content"] for m in fake.bot_messages(thread)] == [
                "ok: start",
                "ok: and now?",
            ]
        finally:
            await h.close()
    finally:
        await fake.close()


async def test_without_the_intent_an_edit_whose_text_was_withheld_changes_nothing(
    start_discord: StartDiscord, make_app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Discord sends the edit of a message that no longer mentions the bot with its content
    emptied: the bot must not take that as the new text (it would blank what it keeps)."""
    caplog.set_level(logging.INFO)
    fake = await FakeDiscord(allow_message_content=False).start()
    try:
        ada = fake.add_user("Ada")
        channel = first_channel(fake, fake.add_guild("Guild A"))
        h = await DiscordHarness.start(fake, await make_app())
        try:
            asked = await fake.user_says(
                channel, ada, f"{h.mention()} remember blue", mentions=[fake.app_id]
            )
            await fake.wait_for(lambda: bool(fake.bot_messages(channel)))
            await h.idle()
            await fake.user_edits(asked["id"], "remember red, no mention now")
            await fake.user_says(channel, ada, f"{h.mention()} next", mentions=[fake.app_id])
            await fake.wait_for(lambda: len(fake.bot_messages(channel)) >= 2)
            await h.idle()
            edited = [r for r in caplog.records if r.getMessage() == "discord_message_edited"]
            assert edited == []
        finally:
            await h.close()
    finally:
        await fake.close()
