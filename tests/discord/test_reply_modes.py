"""`/config set key:reply` through Discord end to end (real core, discord.py, FakeDiscord):
`all` answers every message of the channel, `mention` no follow-up without a mention, the
default (`threads`) follow-ups in threads the bot is in. "Not answered" is asserted after a
later mention in the same place was answered (the positive signal) and the bot is idle."""

from __future__ import annotations

from typing import Any

from testkit.fakes.discord_api import FakeDiscord
from tests.discord.conftest import StartDiscord
from tests.discord.test_commands import ADMINISTRATOR, answered, first_channel
from tests.discord.test_conversation import ask


async def configure(fake: FakeDiscord, channel: str, user: str, **options: Any) -> str:
    interaction = await fake.run_command(
        channel, user, "config", "set", options, permissions=ADMINISTRATOR
    )
    return await answered(fake, interaction)


def said(fake: FakeDiscord, channel: str) -> list[str]:
    return [m["content"] for m in fake.bot_messages(channel)]


async def test_reply_all_answers_every_message_of_that_channel_only(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild A")
    general = first_channel(fake_discord, guild)
    other = fake_discord.add_channel(guild, "random")
    h = await start_discord(await make_app())
    assert "Set `reply`" in await configure(fake_discord, general, ada, key="reply", value="all")
    await fake_discord.user_says(general, ada, "is the build green?")
    await fake_discord.user_says(other, ada, "talking among humans")
    await ask(h, other, ada, "and now?")  # the positive signal in the other channel
    await fake_discord.wait_for(
        lambda: bool(said(fake_discord, general)) and bool(said(fake_discord, other))
    )
    await h.idle()
    assert said(fake_discord, general) == ["ok: is the build green?"]
    assert said(fake_discord, other) == ["ok: and now?"]


async def test_reply_mention_answers_no_thread_follow_up_without_a_mention(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    h = await start_discord(await make_app(), thread_guilds=frozenset({guild}))
    assert "Set `reply`" in await configure(
        fake_discord, channel, ada, key="reply", value="mention", scope="team"
    )
    asked = await ask(h, channel, ada, "start a thread please")
    thread = asked["id"]
    await fake_discord.wait_for(lambda: bool(said(fake_discord, thread)))
    await fake_discord.user_says(thread, ada, "a follow-up without a mention")
    await ask(h, thread, ada, "and with one")
    await fake_discord.wait_for(lambda: len(said(fake_discord, thread)) >= 2)
    await h.idle()
    assert said(fake_discord, thread) == ["ok: start a thread please", "ok: and with one"]


async def test_bots_mentions_answers_another_bot_five_times_then_stops(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    """Another bot that mentions ours in answer to each of its replies (a loop) is answered
    at most 5 times in 10 minutes in that place; people there still are."""
    ada = fake_discord.add_user("Ada")
    other_bot = fake_discord.add_user("OtherBot", bot=True)
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    quiet = fake_discord.add_channel(guild, "quiet")
    h = await start_discord(await make_app())
    assert "Set `bots`" in await configure(fake_discord, channel, ada, key="bots", value="mentions")
    for i in range(8):
        await ask(h, channel, other_bot, f"ping {i}")
        await ask(h, quiet, other_bot, f"ping {i}")  # bots=ignore (the default) there
    await ask(h, channel, ada, "a person asks")  # the positive signal, after all of them
    await fake_discord.wait_for(
        lambda: (
            "ok: Ada: a person asks" in said(fake_discord, channel)
            or "ok: a person asks" in said(fake_discord, channel)
        )
    )
    await h.idle()
    answers = said(fake_discord, channel)
    assert [a for a in answers if "ping" in a] == [f"ok: ping {i}" for i in range(5)]
    assert len(answers) == 6  # in order: the person's question came last and was answered last
    assert said(fake_discord, quiet) == []


async def test_each_key_changes_what_the_model_receives(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: Any
) -> None:
    """instructions, language, model, tools and memory, set with Discord's /config, reach the
    model request of the next mention in that channel; another channel keeps the team's."""
    ada = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild A")
    general = first_channel(fake_discord, guild)
    other = fake_discord.add_channel(guild, "random")
    h = await start_discord(await make_app(bot_models="gpt-4o"))
    for options in (
        {"key": "instructions", "value": "Answer like a ship captain", "scope": "team"},
        {"key": "language", "value": "de"},
        {"key": "model", "value": "gpt-4o"},
        {"key": "tools", "value": "none"},
        {"key": "memory", "value": "off"},
    ):
        assert "Set `" in await configure(fake_discord, general, ada, **options)
    await ask(h, general, ada, "what is the plan?")
    await fake_discord.wait_for(lambda: bool(said(fake_discord, general)))
    here = fake_openai.requests[-1]
    system = here["messages"][0]["content"]
    assert "Answer like a ship captain" in system and "language: de" in system
    assert here["model"] == "gpt-4o"
    assert not here.get("tools")
    await ask(h, other, ada, "and elsewhere?")
    await fake_discord.wait_for(lambda: bool(said(fake_discord, other)))
    there = fake_openai.requests[-1]
    assert "Answer like a ship captain" in there["messages"][0]["content"]
    assert "language: de" not in there["messages"][0]["content"]
    assert there["model"] == "gpt-4o-mini"
    assert {t["function"]["name"] for t in there.get("tools") or []} >= {"remember"}


async def test_a_budget_alert_reaches_the_admin_who_set_it_by_dm(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    """Crossing 100 % of a channel's budget: the admin who set it gets one DM (Create DM, then
    a message there); the next mention is refused with the reset time."""
    ada = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild A")
    general = first_channel(fake_discord, guild)
    h = await start_discord(await make_app())
    assert "Set `budget`" in await configure(
        fake_discord, general, ada, key="budget", value="50/day"
    )
    await ask(h, general, ada, "a question long enough to use the budget up")
    dm = fake_discord.dm_channel(ada)
    await fake_discord.wait_for(lambda: bool(said(fake_discord, dm)))
    (alert,) = said(fake_discord, dm)
    assert f"Budget alert: <#{general}>" in alert and "refused until it resets" in alert
    await ask(h, general, ada, "and another")
    await fake_discord.wait_for(lambda: len(said(fake_discord, general)) == 2)
    assert "this channel's budget (50 tokens a day) is used up" in said(fake_discord, general)[1]
    await h.idle()
    assert said(fake_discord, dm) == [alert]  # one alert in the period
