"""Replies, forwards, stickers and polls as people send them on Discord (the fake gateway sends
them as Discord does; the real discord.py client and the real core answer): a reply to the
bot is a mention, and what a message quotes or carries reaches the model, marked and bounded."""

from __future__ import annotations

import json
from typing import Any

from adapters.discord.quoting import MAX_QUOTE_CHARS
from bot.app import BotApp
from bot.memory.audit import audit
from testkit.fakes.discord_api import FakeDiscord
from testkit.fakes.openai_server import FakeOpenAI, text
from tests.discord.conftest import StartDiscord
from tests.discord.harness import DiscordHarness
from tests.discord.test_conversation import ask, first_channel


def last_user_text(fake: FakeOpenAI) -> str:
    """What the model was given as the person's message in the latest request."""
    [last] = [m for m in fake.requests[-1]["messages"][-1:] if m["role"] == "user"]
    content = last["content"]
    return content if isinstance(content, str) else json.dumps(content)


async def answered(h: DiscordHarness, channel: str, count: int) -> list[str]:
    await h.fake.wait_for(lambda: len(h.fake.bot_messages(channel)) >= count, timeout=15)
    await h.idle()
    return [m["content"] for m in h.fake.bot_messages(channel)]


async def test_a_reply_to_the_bots_answer_is_a_mention_with_or_without_the_ping(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    app: BotApp = await make_app()
    h = await start_discord(app)
    fake_openai.push(text("The meeting moved to Thursday."))
    await ask(h, channel, ada, "when is the meeting?")
    await answered(h, channel, 1)
    [answer] = fake_discord.bot_messages(channel)

    pinged = await fake_discord.user_replies(channel, bob, "which time?", to=answer["id"])
    assert [u["id"] for u in pinged["mentions"]] == [h.bot_id]  # Discord's reply ping
    assert h.mention() not in pinged["content"]
    await answered(h, channel, 2)
    asked = last_user_text(fake_openai)
    assert "[Replying to your earlier message, which said:]" in asked
    assert "> The meeting moved to Thursday." in asked and asked.endswith("which time?")
    reply = fake_discord.bot_messages(channel)[1]
    assert str(reply["message_reference"]["message_id"]) == pinged["id"]  # answered in place

    quiet = await fake_discord.user_replies(channel, ada, "and where?", to=answer["id"], ping=False)
    assert quiet["mentions"] == []  # only `referenced_message` names the bot's message
    await answered(h, channel, 3)
    assert last_user_text(fake_openai).endswith("and where?")

    # A reply to a person's message that does not mention the bot is not for it.
    await fake_discord.user_replies(channel, bob, "thanks Ada", to=quiet["id"])
    await ask(h, channel, bob, "one more thing")  # the positive signal: later, same place
    assert len(await answered(h, channel, 4)) == 4
    assert last_user_text(fake_openai) == "Bob: one more thing"
    # Never the message a turn answered (it may be shown as what was said before, from the
    # record of heard messages, but nothing answered it).
    assert all(
        "thanks Ada" not in json.dumps([m for m in r["messages"] if m["role"] == "user"][-1:])
        for r in fake_openai.requests
    )
    assert len(fake_openai.requests) == 4


async def test_the_message_replied_to_reaches_the_model_with_its_author_and_bounded(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    h = await start_discord(await make_app())
    claim = await fake_discord.user_says(
        channel, ada, f"the earth is flat, says <@{bob}>", mentions=[bob]
    )
    await fake_discord.user_replies(
        channel, bob, f"{h.mention()} is this true?", to=claim["id"], mentions=[h.bot_id]
    )
    await answered(h, channel, 1)
    asked = last_user_text(fake_openai)
    assert asked == "[Replying to Ada, who wrote:]\n> the earth is flat, says @Bob\nis this true?"

    essay = " ".join(f"word{i}" for i in range(20_000))  # 188,890 characters
    long = await fake_discord.user_says(channel, ada, essay)
    await fake_discord.user_replies(
        channel, bob, f"{h.mention()} summarise", to=long["id"], mentions=[h.bot_id]
    )
    await answered(h, channel, 2)
    asked = last_user_text(fake_openai)
    assert asked.startswith("[Replying to Ada, who wrote:]\n> word0 word1")
    assert "more characters]" in asked and "word19999" not in asked
    assert len(asked) < MAX_QUOTE_CHARS + 200 and asked.endswith("summarise")

    gone = await fake_discord.user_says(channel, ada, "delete me 77-zeta")
    await fake_discord.user_deletes(gone["id"])
    await fake_discord.user_replies(
        channel, bob, f"{h.mention()} what did she say?", to=gone["id"], mentions=[h.bot_id]
    )
    await answered(h, channel, 3)
    asked = last_user_text(fake_openai)
    assert asked == "[Replying to a message that has since been deleted]\nwhat did she say?"


async def test_a_forward_to_the_bot_is_read_from_its_snapshot(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    private = fake_discord.add_channel(guild, "staff", private=True)
    h = await start_discord(await make_app())
    report = fake_discord.attachment("q3-report.pdf", b"%PDF-1.7", "application/pdf")
    source = await fake_discord.user_says(private, ada, "Q3 numbers are in", attachments=[report])
    fake_discord.messages[source["id"]]["embeds"] = [
        {"type": "rich", "title": "Revenue", "description": "up 12% on Q2"}
    ]
    dm = fake_discord.dm_channel(bob)
    forward = await fake_discord.user_forwards(dm, bob, source["id"])
    assert forward["content"] == "" and forward["message_reference"]["type"] == 1
    await answered(h, dm, 1)
    asked = last_user_text(fake_openai)
    assert asked.startswith("[A forwarded message (forwarded by Bob;")
    assert "> Q3 numbers are in" in asked and "[files: q3-report.pdf]" in asked
    assert "[embed: Revenue — up 12% on Q2]" in asked
    assert "empty message" not in fake_discord.bot_messages(dm)[0]["content"]
    assert fake_discord.cdn_requests == 0  # a forwarded file is named, not downloaded

    # A snapshot with nothing readable says so rather than arriving empty.
    blank = await fake_discord.user_says(channel, ada, "")
    fake_discord.messages[blank["id"]]["content"] = ""
    await fake_discord.user_forwards(dm, bob, blank["id"])
    await answered(h, dm, 2)
    assert "> (its text is not visible to me)" in last_user_text(fake_openai)


async def test_stickers_and_polls_are_named_not_empty(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    h = await start_discord(await make_app())
    await fake_discord.user_sends_sticker(dm, ada, "Wave Hello")
    await answered(h, dm, 1)
    assert last_user_text(fake_openai) == "[sticker: Wave Hello]"
    await fake_discord.user_sends_poll(dm, ada, "Lunch?", ["Pizza", "Sushi", "x" * 500])
    await answered(h, dm, 2)
    asked = last_user_text(fake_openai)
    assert asked.startswith("[poll: Lunch? — answers: Pizza / Sushi / xxx")
    assert len(asked) < 200  # an answer's text is cut
    assert all("empty message" not in m["content"] for m in fake_discord.bot_messages(dm))


async def test_a_partial_update_adding_the_first_mention_is_answered_once(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    h = await start_discord(await make_app())
    plain = await fake_discord.user_says(channel, ada, "anyone know the wifi password?")
    await fake_discord.user_edits_partially(
        plain["id"], f"{h.mention()} anyone know the wifi password?", mentions=[h.bot_id]
    )
    assert await answered(h, channel, 1) == ["ok: anyone know the wifi password?"]
    assert fake_discord.calls_to("GET", rf"/channels/{channel}/messages/{plain['id']}$")
    await fake_discord.user_edits_partially(
        plain["id"], f"{h.mention()} anyone know the wifi password? please", mentions=[h.bot_id]
    )
    await ask(h, channel, bob, "hello")  # the positive signal: later in the same place
    assert await answered(h, channel, 2) == ["ok: anyone know the wifi password?", "ok: Bob: hello"]
    assert len(fake_discord.calls_to("POST", rf"/channels/{channel}/messages$")) == 2


async def test_a_forward_far_larger_than_discord_allows_is_bounded(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    """200 files with 5,000-character names, 50 embeds of 100,000 characters, 50 stickers and
    200,000 characters of text (Discord allows 10 files, 10 embeds, 3 stickers, 4,000
    characters): the model gets a bounded text that says what was left out."""
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    h = await start_discord(await make_app())
    files = [fake_discord.attachment(f"{i}-" + "n" * 5000, b"x") for i in range(200)]
    source = await fake_discord.user_says(channel, ada, "y" * 200_000, attachments=files)
    stored = fake_discord.messages[source["id"]]
    stored["embeds"] = [
        {"type": "rich", "title": f"E{i}", "description": "d" * 100_000} for i in range(50)
    ]
    stored["sticker_items"] = [{"id": str(i), "name": f"s{i}", "format_type": 1} for i in range(50)]
    dm = fake_discord.dm_channel(bob)
    await fake_discord.user_forwards(dm, bob, source["id"])
    await answered(h, dm, 1)
    asked = last_user_text(fake_openai)
    assert len(asked) < 8_000, len(asked)
    assert "more characters]" in asked and "and 190 more]" in asked
    assert "[47 more embeds left out]" in asked and "[47 more stickers]" in asked
    assert fake_discord.cdn_requests == 0


async def test_a_reply_edited_to_mention_the_bot_is_answered_with_its_quote(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    h = await start_discord(await make_app())
    said = await fake_discord.user_says(channel, bob, "the release is on Friday")
    reply = await fake_discord.user_replies(channel, ada, "really?", to=said["id"])
    await fake_discord.user_edits(reply["id"], f"{h.mention()} really?", mentions=[bob, h.bot_id])
    await answered(h, channel, 1)
    asked = last_user_text(fake_openai)
    assert asked == "[Replying to Bob, who wrote:]\n> the release is on Friday\nreally?"


async def test_deleting_a_message_takes_its_words_out_of_the_replies_that_quoted_it(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    """Ada's message was never for the bot, but Bob's reply to it brought it in as a quote:
    when she deletes it, the bot keeps Bob's reply as Discord now shows it (its reference
    deleted), not her words."""
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    app: BotApp = await make_app()
    h = await start_discord(app)
    said = await fake_discord.user_says(channel, ada, "locker code 5521-quokka, keep it quiet")
    fake_openai.push(text("Better not share codes here."))
    await fake_discord.user_replies(
        channel, bob, f"{h.mention()} is that safe?", to=said["id"], mentions=[h.bot_id]
    )
    await answered(h, channel, 1)
    assert "5521-quokka" in last_user_text(fake_openai)

    await fake_discord.user_deletes(said["id"])
    await h.idle()  # the deletion was applied
    await ask(h, channel, bob, "what did I ask you?")
    await answered(h, channel, 2)
    asked = json.dumps(fake_openai.requests[-1])
    assert "5521-quokka" not in asked
    assert "[Replying to a message that has since been deleted]" in asked
    assert "is that safe?" in asked  # Bob's own words are kept
    assert await audit(phrase="5521-quokka", store=app.store, cache=app.cache) == []
