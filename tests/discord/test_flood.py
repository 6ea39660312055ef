"""A flood from one person is refused once, then dropped quietly; others are answered.
Through the real discord.py client, the real core (its per-person rate) and the fake."""

from __future__ import annotations

from typing import Any

from bot.ratelimit import USER_RATE_REPLY
from testkit.fakes.discord_api import FakeDiscord
from tests.discord.conftest import StartDiscord
from tests.discord.test_commands import first_channel

FLOOD = 200


async def test_a_flood_of_mentions_gets_one_refusal_and_others_are_still_answered(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    bob = fake_discord.add_user("Bob")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    h = await start_discord(await make_app(bot_rate_user="5/60"))
    mention = h.mention()
    for i in range(FLOOD):
        await fake_discord.user_says(channel, ada, f"{mention} spam {i}", mentions=[h.bot_id])
    await fake_discord.user_says(channel, bob, f"{mention} a real question", mentions=[h.bot_id])
    await fake_discord.wait_for(
        lambda: any(
            m["content"] == "ok: Bob: a real question" for m in fake_discord.bot_messages(channel)
        ),
        timeout=60,
    )
    await h.idle()
    posted = [m["content"] for m in fake_discord.bot_messages(channel)]
    assert posted.count(USER_RATE_REPLY) == 1
    assert len([p for p in posted if p.startswith("ok: spam")]) == 5
    assert len(posted) == 5 + 1 + 1  # nothing else: no apology for the dropped ones
