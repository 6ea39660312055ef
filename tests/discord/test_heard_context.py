"""What was said before a mention on Discord, through the real discord.py client and the fake
gateway: guild messages the bot sees are recorded (`bot.memory.heard`) and a later mention in
that channel reads them without a history call; a private channel's stay in it."""

from __future__ import annotations

from typing import Any

from testkit.fakes.discord_api import FakeDiscord
from testkit.fakes.openai_server import FakeOpenAI
from tests.discord.conftest import StartDiscord
from tests.discord.test_dm_facts import context_of, first_channel


async def test_a_mention_sees_the_channels_earlier_messages_without_a_history_call(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    make_app: Any,
    fake_openai: FakeOpenAI,
) -> None:
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    guild = fake_discord.add_guild("Guild")
    public = first_channel(fake_discord, guild)
    private = fake_discord.add_channel(guild, "leads", private=True)
    h = await start_discord(await make_app())
    await fake_discord.user_says(public, bob, "the deploy moved to 17:00 on Friday")
    await fake_discord.user_says(
        public, bob, "see the plan", attachments=[_attachment("rollout-plan.pdf")]
    )
    await fake_discord.user_says(private, bob, "the reorg memo is confidential-8812")

    seen = await context_of(h, fake_openai, public, ada)
    assert "the deploy moved to 17:00 on Friday" in seen and "Bob" in seen
    assert "rollout-plan.pdf" in seen
    assert "confidential-8812" not in seen  # a private channel's messages stay in it
    assert fake_discord.calls_to("GET", r"/channels/\d+/messages$") == []

    inside = await context_of(h, fake_openai, private, ada)
    assert "confidential-8812" in inside


def _attachment(name: str) -> dict[str, Any]:
    return {
        "id": "1100000000000000001",
        "filename": name,
        "size": 10,
        "url": f"https://cdn.discordapp.com/attachments/1/2/{name}",
        "proxy_url": f"https://media.discordapp.net/attachments/1/2/{name}",
        "content_type": "application/pdf",
    }
