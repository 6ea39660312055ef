"""Messages deleted or edited on Discord (MESSAGE_DELETE, MESSAGE_DELETE_BULK, MESSAGE_UPDATE
from the fake gateway, through the real discord.py client): applied to what the bot keeps,
never answered, except an edit that brings a message its first mention of the bot."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bot.app import BotApp
from bot.keys import TeamKey
from bot.memory.audit import audit
from bot.stores.memory_index import MemoryScope
from testkit.fakes.discord_api import FakeDiscord, snowflake
from testkit.fakes.openai_server import FakeOpenAI, text
from tests.discord.conftest import StartDiscord
from tests.discord.harness import DiscordHarness
from tests.slack.echo_core import EchoCore


def first_channel(fake: FakeDiscord, guild: str) -> str:
    return next(c for c, v in fake.channels.items() if v.get("guild_id") == guild)


async def ask(h: DiscordHarness, channel: str, user: str, words: str) -> dict[str, Any]:
    return await h.fake.user_says(channel, user, f"{h.mention()} {words}", mentions=[h.bot_id])


def request_for(fake: FakeOpenAI, words: str) -> str:
    """The chat request that answered the user message with these words, as JSON."""
    for request in reversed(fake.requests):
        last = request["messages"][-1]
        if last["role"] == "user" and words in str(last["content"]):
            return json.dumps(request)
    raise AssertionError(f"no request answered {words!r}")


async def replied(h: DiscordHarness, channel: str, count: int) -> list[str]:
    await h.fake.wait_for(lambda: len(h.fake.bot_messages(channel)) >= count)
    await h.idle()
    return [m["content"] for m in h.fake.bot_messages(channel)]


async def settled(app: BotApp) -> None:
    assert app.episodic is not None and await app.episodic.idle(20)


async def index_text(app: BotApp, team: str, place: str) -> str:
    assert app.memory_index is not None
    scope = MemoryScope(TeamKey("discord", team), (f"discord:{team}:{place}",))
    return "\n".join(
        f"{e.text}\n{e.context}" for e in (await app.memory_index.changes(scope)).entries
    )


async def test_deleted_messages_leave_the_bots_memory_in_a_channel_and_a_dm(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    app: BotApp = await make_app(episodic=True)
    h = await start_discord(app)
    secret = await ask(h, channel, ada, "my locker code is 5521-quokka")
    assert await replied(h, channel, 1) == ["ok: my locker code is 5521-quokka"]
    await settled(app)
    assert "5521-quokka" in await index_text(app, guild, channel)

    await fake_discord.user_deletes(secret["id"])
    await ask(h, channel, bob, "what is the plan")  # after the deletion, in the same place
    await replied(h, channel, 2)
    await settled(app)
    asked = request_for(fake_openai, "what is the plan")
    assert "5521-quokka" not in asked  # neither her message nor the bot's answer to it
    assert "5521-quokka" not in await index_text(app, guild, channel)
    assert await audit(phrase="5521-quokka", store=app.store, cache=app.cache) == []

    dm = fake_discord.dm_channel(ada)
    private = await fake_discord.user_says(dm, ada, "my passport number is X-7741")
    await replied(h, dm, 1)
    await fake_discord.user_deletes(private["id"])  # no guild_id: a DM
    await fake_discord.user_says(dm, ada, "anything new")
    await replied(h, dm, 2)
    assert "X-7741" not in request_for(fake_openai, "anything new")
    assert await audit(phrase="X-7741", store=app.store, cache=app.cache) == []


async def test_a_bulk_delete_in_a_thread_erases_each_message(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    app: BotApp = await make_app(episodic=True)
    h = await start_discord(app, thread_guilds=frozenset({guild}))
    thread = (await ask(h, channel, ada, "start planning"))["id"]  # the thread opened on it
    await replied(h, thread, 1)
    one = await fake_discord.user_says(thread, ada, "first secret 11-alpha")
    await replied(h, thread, 2)
    two = await fake_discord.user_says(thread, ada, "second secret 22-beta")
    await replied(h, thread, 3)
    await settled(app)
    assert "11-alpha" in await index_text(app, guild, channel)

    await fake_discord.bulk_delete(thread, [one["id"], two["id"], snowflake()])
    await fake_discord.user_says(thread, bob, "what did we decide")
    await replied(h, thread, 4)
    await settled(app)
    asked = request_for(fake_openai, "what did we decide")
    assert "start planning" in asked  # the thread's history is there, without the two
    assert "11-alpha" not in asked and "22-beta" not in asked
    for phrase in ("11-alpha", "22-beta"):
        assert await audit(phrase=phrase, store=app.store, cache=app.cache) == []
        assert phrase not in await index_text(app, guild, channel)


async def test_a_bulk_delete_is_capped_at_discords_limit(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    core = EchoCore()
    h = await start_discord(core)
    ids = [snowflake() for _ in range(150)]
    await fake_discord.bulk_delete(channel, ids)
    await fake_discord.wait_for(lambda: bool(core.changes))
    await h.idle()
    ((kind, ref, _),) = core.changes  # one conversation: one entry, applied once
    assert (kind, ref.team, ref.channel) == ("deleted", next(iter(fake_discord.guilds)), None)
    assert list(ref.message_ids) == sorted(ids, key=int)[:100]  # the rest cut, with a warning


async def test_an_edit_is_applied_not_answered(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    app: BotApp = await make_app(episodic=True)
    h = await start_discord(app)
    fake_openai.push(text("Noted."))
    said = await ask(h, channel, ada, "the offsite is in Lisbon-aa")
    await replied(h, channel, 1)
    await settled(app)

    await fake_discord.user_edits(
        said["id"], f"{h.mention()} the offsite is in Porto-bb", mentions=[h.bot_id]
    )
    await ask(h, channel, bob, "remind me where")
    assert await replied(h, channel, 2) == ["Noted.", "ok: Bob: remind me where"]
    assert len(fake_discord.calls_to("POST", rf"/channels/{channel}/messages$")) == 2
    await settled(app)
    asked = request_for(fake_openai, "remind me where")
    assert "the offsite is in Porto-bb" in asked and "Lisbon-aa" not in asked
    index = await index_text(app, guild, channel)
    assert "Porto-bb" in index and "Lisbon-aa" not in index


async def test_an_edit_adding_the_first_mention_is_answered_once(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    app: BotApp = await make_app()
    h = await start_discord(app)
    plain = await fake_discord.user_says(channel, ada, "is anyone around?")  # not for the bot
    await fake_discord.user_edits(
        plain["id"], f"{h.mention()} is anyone around?", mentions=[h.bot_id]
    )
    assert await replied(h, channel, 1) == ["ok: is anyone around?"]
    (reply,) = fake_discord.bot_messages(channel)
    assert str(reply["message_reference"]["message_id"]) == plain["id"]

    await fake_discord.user_edits(
        plain["id"], f"{h.mention()} is anyone around? (sorry)", mentions=[h.bot_id]
    )
    await fake_discord.user_edits(reply["id"], reply["content"])  # its own message: ignored
    await ask(h, channel, bob, "hello")  # the positive signal: later in the same place
    assert await replied(h, channel, 2) == ["ok: is anyone around?", "ok: Bob: hello"]
    assert len(fake_discord.calls_to("POST", rf"/channels/{channel}/messages$")) == 2
    (stored,) = await app.store.find_platform_message(TeamKey("discord", guild), plain["id"])
    assert stored.content == "is anyone around? (sorry)"  # the second edit: applied only
    assert await app.store.find_platform_message(TeamKey("discord", guild), reply["id"]) == []


async def test_an_edit_of_a_message_answered_long_ago_is_not_answered_again(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    app: BotApp = await make_app(bot_inbox="off")  # de-duplication keys in the cache alone
    h = await start_discord(app)
    said = await ask(h, channel, ada, "hello there")
    await replied(h, channel, 1)
    await app.cache.delete(f"event:discord:{said['id']}")  # a day later the key is gone
    await fake_discord.user_edits(
        said["id"], f"{h.mention()} hello there, edited", mentions=[h.bot_id]
    )
    team = TeamKey("discord", guild)

    async def content() -> str:
        (stored,) = await app.store.find_platform_message(team, said["id"])
        return stored.content

    for _ in range(500):  # the positive signal: the edit reached the store
        if await content() == "hello there, edited":
            break
        await asyncio.sleep(0.02)
    assert await content() == "hello there, edited"  # applied as an edit...
    await h.idle()
    assert len(fake_discord.bot_messages(channel)) == 1  # ...and not answered again
    assert len(fake_discord.calls_to("POST", rf"/channels/{channel}/messages$")) == 1
