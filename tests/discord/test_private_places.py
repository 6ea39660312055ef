"""Discord private channels are private places (the audience rule): a fact remembered there is
used there and in the person's DMs, never in the guild's public channels. Through the real
discord.py client and the fake gateway, whose private channel denies @everyone VIEW_CHANNEL as
Discord's "private channel" toggle does."""

from __future__ import annotations

from typing import Any

import discord

from adapters.discord.handlers import is_private_place
from testkit.fakes.discord_api import FakeDiscord
from testkit.fakes.openai_server import FakeOpenAI
from tests.discord.conftest import StartDiscord
from tests.discord.test_dm_facts import context_of, first_channel, says

SECRET = "my project codename is heron-4471"


async def test_a_fact_remembered_in_a_private_channel_stays_out_of_public_ones(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    make_app: Any,
    fake_openai: FakeOpenAI,
) -> None:
    ada = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild")
    public = first_channel(fake_discord, guild)
    private = fake_discord.add_channel(guild, "leads", private=True)
    h = await start_discord(await make_app())

    await says(h, private, ada, f"remember that {SECRET}")

    assert "heron-4471" in await context_of(h, fake_openai, private, ada)
    assert "heron-4471" in await context_of(h, fake_openai, fake_discord.dm_channel(ada), ada)
    assert "heron-4471" not in await context_of(h, fake_openai, public, ada)


async def test_which_places_are_private(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    guild = fake_discord.add_guild("Guild")
    public = first_channel(fake_discord, guild)
    private = fake_discord.add_channel(guild, "leads", private=True)
    h = await start_discord(await make_app())
    client: discord.Client = h.runtime.client
    assert not is_private_place(client.get_channel(int(public)))
    assert is_private_place(client.get_channel(int(private)))
    assert is_private_place(None)  # unknown: the narrowest


async def test_a_private_thread_is_a_place_of_its_own(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    make_app: Any,
    fake_openai: FakeOpenAI,
) -> None:
    """A private thread is read by its members only: what is remembered there stays there (and
    in the person's DMs), out of its public parent channel and of another private thread."""
    ada = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild")
    public = first_channel(fake_discord, guild)
    h = await start_discord(await make_app())
    first = await fake_discord.user_opens_private_thread(ada, public, "hr")
    other = await fake_discord.user_opens_private_thread(ada, public, "offsite")
    await h.fake.wait_for(lambda: h.runtime.client.get_channel(int(other)) is not None)

    await says(h, first, ada, f"remember that {SECRET}")

    assert "heron-4471" in await context_of(h, fake_openai, first, ada)
    assert "heron-4471" in await context_of(h, fake_openai, fake_discord.dm_channel(ada), ada)
    assert "heron-4471" not in await context_of(h, fake_openai, public, ada)
    assert "heron-4471" not in await context_of(h, fake_openai, other, ada)
