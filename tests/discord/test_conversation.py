"""Mentions, DMs, threads and what the bot must ignore, through the real discord.py client."""

from __future__ import annotations

from typing import Any

from testkit.fakes.discord_api import FakeDiscord
from tests.discord.conftest import StartDiscord
from tests.discord.harness import DiscordHarness


def first_channel(fake: FakeDiscord, guild: str) -> str:
    return next(c for c, v in fake.channels.items() if v.get("guild_id") == guild)


async def ask(h: DiscordHarness, channel: str, user: str, text: str) -> dict[str, Any]:
    """`user` mentions the bot with `text` in `channel`."""
    return await h.fake.user_says(channel, user, f"{h.mention()} {text}", mentions=[h.fake.app_id])


async def test_login_identifies_with_the_four_intents(discord_real: DiscordHarness) -> None:
    fake = discord_real.fake
    [identify] = fake.identifies
    intents = int(identify["intents"])
    guilds, guild_messages, dm_messages, message_content = 1 << 0, 1 << 9, 1 << 12, 1 << 15
    assert intents == guilds | guild_messages | dm_messages | message_content
    assert {c["name"] for c in fake.commands[None]} == {"memory", "tools", "config", "usage"}


async def test_a_mention_is_answered_as_a_reply_in_the_channel(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    bob = fake_discord.add_user("Bob")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    h = await start_discord(await make_app())
    asked = await fake_discord.user_says(
        channel,
        ada,
        f"{h.mention()} hello <@{bob}> and @everyone",
        mentions=[fake_discord.app_id, bob],
    )
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(channel)))
    await h.idle()
    [reply] = fake_discord.bot_messages(channel)
    assert reply["content"] == "ok: hello @Bob and @everyone"
    assert str(reply["message_reference"]["message_id"]) == asked["id"]
    allowed = reply["allowed_mentions"]  # what Discord would let this message ping
    assert allowed["parse"] == [] and not allowed.get("replied_user", False)
    assert allowed.get("roles", []) == [] and [str(u) for u in allowed["users"]] == [bob]
    assert fake_discord.calls_to("POST", rf"/channels/{channel}/typing")


async def test_every_dm_is_answered(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    h = await start_discord(await make_app())
    await fake_discord.user_says(dm, ada, "no mention needed here")
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(dm)))
    await h.idle()
    [reply] = fake_discord.bot_messages(dm)
    assert reply["content"] == "ok: no mention needed here"
    assert "message_reference" not in reply


async def test_own_other_bots_and_unmentioned_messages_are_ignored(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    other_bot = fake_discord.add_user("OtherBot", bot=True)
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    h = await start_discord(await make_app())
    await fake_discord.user_says(channel, ada, "talking among humans")
    await fake_discord.user_says(
        channel, other_bot, f"{h.mention()} bots talking", mentions=[fake_discord.app_id]
    )
    await fake_discord.user_says(
        channel, fake_discord.app_id, f"{h.mention()} myself", mentions=[fake_discord.app_id]
    )
    await ask(h, channel, ada, "the one to answer")  # the positive signal handling finished
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(channel)))
    await h.idle()
    assert [m["content"] for m in fake_discord.bot_messages(channel)] == ["ok: the one to answer"]


async def test_other_bots_are_answered_when_configured(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    other_bot = fake_discord.add_user("OtherBot", bot=True)
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    h = await start_discord(await make_app(), allow_bots=True)
    await ask(h, channel, other_bot, "hi from a bot")
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(channel)))
    assert fake_discord.bot_messages(channel)[0]["content"] == "ok: hi from a bot"


async def test_thread_mode_opens_a_thread_and_follow_ups_need_no_mention(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    h = await start_discord(await make_app(), thread_guilds=frozenset({guild}))
    asked = await ask(h, channel, ada, "start a thread please")
    thread = asked["id"]  # Discord gives a thread opened on a message that message's id
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(thread)))
    assert fake_discord.channels[thread]["name"] == "start a thread please"
    assert fake_discord.bot_messages(channel) == []
    await fake_discord.user_says(thread, ada, "and a follow-up")
    await fake_discord.wait_for(lambda: len(fake_discord.bot_messages(thread)) == 2)
    await h.idle()
    assert [m["content"] for m in fake_discord.bot_messages(thread)] == [
        "ok: start a thread please",
        "ok: and a follow-up",
    ]


async def test_follow_up_in_a_thread_the_bot_answered_before_a_restart(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    """A thread someone else opened: after the bot answered a mention there, later messages
    are answered without one, also by a fresh process (the core remembers the conversation);
    a thread where the bot never spoke is left alone."""
    ada = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    starter = await fake_discord.user_says(channel, ada, "a human thread")
    quiet = await fake_discord.user_says(channel, ada, "another human thread")
    core = await make_app()
    h = await start_discord(core)
    await fake_discord.user_opens_thread(ada, starter, "human thread")
    await fake_discord.user_opens_thread(ada, quiet, "quiet thread")
    await ask(h, starter["id"], ada, "join in")
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(starter["id"])))
    await h.close()
    h2 = await start_discord(core)
    await fake_discord.user_says(quiet["id"], ada, "not for the bot")
    await fake_discord.user_says(starter["id"], ada, "without a mention")
    await fake_discord.wait_for(lambda: len(fake_discord.bot_messages(starter["id"])) == 2)
    await h2.idle()
    assert fake_discord.bot_messages(starter["id"])[1]["content"] == "ok: without a mention"
    assert fake_discord.bot_messages(quiet["id"]) == []


async def test_reconnects_and_resumes_after_a_dropped_connection(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    h = await start_discord(await make_app())
    await fake_discord.drop_connection()
    await fake_discord.user_says(dm, ada, "sent while you were away")  # buffered for RESUME
    await fake_discord.wait_for(lambda: bool(fake_discord.resumes), timeout=30)
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(dm)))
    await h.idle()
    assert len(fake_discord.identifies) == 1  # resumed, not a new session
    assert [m["content"] for m in fake_discord.bot_messages(dm)] == ["ok: sent while you were away"]


async def test_a_429_on_send_gives_one_reply_not_two(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    h = await start_discord(await make_app())
    fake_discord.fail_next("POST", rf"/channels/{dm}/messages$", status=429, retry_after=0.2)
    await fake_discord.user_says(dm, ada, "rate limited")
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(dm)))
    await h.idle()
    posts = fake_discord.calls_to("POST", rf"/channels/{dm}/messages$")
    assert [c.status for c in posts] == [429, 200]  # discord.py waited and retried once
    assert [m["content"] for m in fake_discord.bot_messages(dm)] == ["ok: rate limited"]


async def test_shutdown_lets_an_answer_in_flight_finish(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    from tests.slack.echo_core import EchoCore

    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    core = EchoCore(delay=1.0)
    h = await start_discord(core)
    await fake_discord.user_says(dm, ada, "slow one")
    await fake_discord.wait_for(lambda: bool(core.messages))  # the turn has started
    h.stop.set()  # what SIGTERM does
    await h.task
    assert [m["content"] for m in fake_discord.bot_messages(dm)] == ["echo: slow one"]
    assert fake_discord.connected == 0


async def test_a_lost_response_to_a_create_is_retried_without_a_duplicate(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    """Discord made the message but the answer was a 502: discord.py retries the same request,
    and its nonce (enforce_nonce) makes Discord return the first message instead of a second."""
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    h = await start_discord(await make_app())
    fake_discord.fail_next("POST", rf"/channels/{dm}/messages$", status=502, after=True)
    await fake_discord.user_says(dm, ada, "answer once")
    await fake_discord.wait_for(
        lambda: len(fake_discord.calls_to("POST", rf"/channels/{dm}/messages$")) >= 2
    )
    await h.idle()
    posts = fake_discord.calls_to("POST", rf"/channels/{dm}/messages$")
    assert [c.status for c in posts] == [502, 200]
    assert posts[0].body["nonce"] == posts[1].body["nonce"]
    assert [m["content"] for m in fake_discord.bot_messages(dm)] == ["ok: answer once"]


async def test_a_429_on_an_edit_still_ends_with_the_final_text(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    from tests.slack.echo_core import EchoCore

    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    words = [f"part{i} " for i in range(12)]
    core = EchoCore(reply="".join(words).strip(), draft=words, delta_pause=0.1)
    h = await start_discord(core, first_edit_chars=10)
    fake_discord.fail_next("PATCH", rf"/channels/{dm}/messages/\d+$", status=429, retry_after=0.3)
    await fake_discord.user_says(dm, ada, "go")
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(dm)))
    await h.idle()
    assert [m["content"] for m in fake_discord.bot_messages(dm)] == ["".join(words).strip()]
    assert 429 in [c.status for c in fake_discord.calls_to("PATCH", r"/messages/")]
