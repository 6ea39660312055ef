"""Discord rejects a message whose `allowed_mentions.users` names more than 100 users (the
fake does too): the answer still goes out, pinging the first 100 the asker named."""

from __future__ import annotations

from typing import Any

from testkit.fakes.discord_api import FakeDiscord
from tests.discord.conftest import StartDiscord
from tests.discord.test_commands import first_channel


async def test_a_message_naming_more_than_100_people_is_answered_pinging_100_at_most(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    user = fake_discord.add_user("Ada")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    people = [fake_discord.add_user(f"P{i}") for i in range(150)]
    h = await start_discord(await make_app())
    names = " ".join(f"<@{p}>" for p in people)
    await fake_discord.user_says(
        channel, user, f"{h.mention()} hi {names}", mentions=[h.bot_id, *people]
    )
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(channel)), timeout=20)
    await h.idle()
    [reply] = fake_discord.bot_messages(channel)
    assert reply["content"].startswith("ok: hi @P0")
    assert [str(u) for u in reply["allowed_mentions"]["users"]] == people[:100]
