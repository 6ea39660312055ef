"""Review of issue 19 ("Memory you can trust II"): defects found as an attacker and a demanding
user would look for them, each shown by a test that failed on the code it was written against
and passes since its fix. The bot is the red team's: a parrot model that repeats its whole
context.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from bot.keys import PersonKey
from bot.memory.audit import audit
from testkit.fakes.openai_server import FakeOpenAI
from tests.redteam.test_memory_redteam import (
    C1,
    C1_THREAD,
    C2,
    Bot,
    dm,
    leftovers,
    parrot,
)

ALICE = PersonKey("slack", "T1", "UA")
_n = iter(range(10_000, 1_000_000))


async def say_on(
    bot: Bot,
    user: str,
    words: str,
    *,
    platform: str,
    team: str,
    channel: str,
    thread: str | None = None,
    private: bool = False,
    is_dm: bool = False,
    thread_is_place: bool = False,
) -> str:
    """`Bot.say` on any platform and team (as an adapter builds the message)."""
    from bot.messages import IncomingMessage
    from tests.helpers import CollectingSink

    before = len(bot.fake.requests)
    sink = CollectingSink()
    msg = IncomingMessage(
        platform=platform,
        team=team,
        channel=channel,
        thread=thread,
        user=user,
        text=words,
        message_id=str(next(_n)),
        is_dm=is_dm,
        is_private=private,
        thread_is_place=thread_is_place,
    )
    await bot.app.handle_message(msg, sink)
    assert sink.final is not None and not sink.error, sink.final
    sent = [r for r in bot.fake.requests[before:] if not r.get("response_format")]
    return json.dumps(sent, ensure_ascii=False)


@pytest.fixture
async def sq(make_app: Any, fake_openai: FakeOpenAI) -> tuple[Bot, dict[str, Any]]:
    """The red team's bot on the embedded setup (SQLite, in-process cache)."""
    fake_openai.brain = parrot
    app = await make_app(episodic=True)
    app.memory.policy = dataclasses.replace(app.memory.policy, max_messages=6)
    return Bot(app, fake_openai), {"kind": "sqlite", "data_dir": Path(app.settings.bot_data_dir)}


async def _until(done: Any, seconds: float = 20.0) -> None:
    import asyncio

    for _ in range(int(seconds * 100)):
        if done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def _fact(bot: Bot, person: PersonKey, word: str) -> Any:
    (fact,) = [f for f in await bot.app.store.list_facts(person) if word in f.text]
    return fact


# --- /memory forget <id> ----------------------------------------------------------------------


async def test_forget_id_of_a_plain_fact_drops_its_remember_call(sq: Any) -> None:
    bot, _ = sq
    await bot.say("UA", "please remember that I live in Berlin", C1)
    fact = await _fact(bot, ALICE, "Berlin")
    await bot.command("UA", f"forget {fact.id}")
    sent = await bot.say("UA", "where do I live?", C1)
    request = sent.split('"tools"')[0]
    assert '"remember"' not in request, "the remember call is still in the history"
    assert "live in Berlin" not in request
    found = await audit(
        phrase="live in Berlin", person=None, store=bot.app.store, cache=bot.app.cache
    )
    assert found == [], found


# --- platform deletes -------------------------------------------------------------------------


async def test_a_platform_delete_cuts_the_words_from_replies_in_other_sessions(sq: Any) -> None:
    """Alice's message in a public channel is recalled into Bob's DM and the bot's reply there
    repeats it (a model quotes what it was given). Alice deletes her message: the reply in
    Bob's DM still holds her words, and goes back to the model with Bob's next turn."""
    from bot.messages import MessageRef

    bot, where = sq
    await bot.say("UA", "My locker combination is 4471 and my cat is Mr Whiskerton", C1, "1700.7")
    await bot.say("UB", "hello all", C1)  # Bob took part there: his DM may recall it
    await bot.settle()
    sent = await bot.say("UB", "what was that about the locker combination and the cat?", dm("UB"))
    assert "Whiskerton" in sent  # recalled from the public channel, the reply repeats it
    change = await bot.app.message_deleted(MessageRef("slack", "T1", ("1700.7",), channel="C1"))
    assert not change.failed and change.found == 1
    await bot.settle()
    assert leftovers(where, "Whiskerton") == []
    sent = await bot.say("UB", "anything else?", dm("UB"))
    assert "Whiskerton" not in sent


async def test_a_forgotten_fact_is_not_made_again_in_other_words(sq: Any) -> None:
    """Alice says she is allergic, asks the bot to remember it, then asks it to forget it. That
    night the consolidation reads her statement (said before the forget) and words it as a
    model does ("Is allergic to ..."): the tombstone of "I am allergic to ..." does not see
    it, and the fact she asked to forget is back in her context."""
    from bot.memory.nightly import build_consolidator

    bot, _ = sq
    await bot.say("UA", "I am allergic to pangolin-scales-5.", C1)
    await bot.say("UA", "please remember that I am allergic to pangolin-scales-5", C1)
    fact = await _fact(bot, ALICE, "pangolin")
    await bot.command("UA", f"forget {fact.id}")
    assert not [f for f in await bot.app.store.list_facts(ALICE) if "pangolin" in f.text]
    await bot.settle()
    await build_consolidator(bot.app).run()
    remade = [f.text for f in await bot.app.store.list_facts(ALICE) if "pangolin" in f.text]
    assert remade == [], remade


# --- the audience rule: Discord private threads -------------------------------------------------


async def test_a_discord_private_thread_stays_out_of_its_public_parent_channel(sq: Any) -> None:
    """The Discord adapter gives a thread's messages `channel` = the parent channel and
    `thread` = the thread (adapters/discord/handlers.py Route), and marks a private thread
    `is_private`. The audience (`IncomingMessage.audience`) and the index place (`place_id`)
    are built from `channel` only: the private thread's excerpts are entries of the public
    parent channel, and the channel scope (`place IN (...)`) recalls them there."""
    bot, _ = sq
    where: dict[str, Any] = {"platform": "discord", "team": "G1", "channel": "C100"}
    # A private thread, as the Discord adapter hands it in (`thread_is_place`).
    private_thread = {"thread": "T9", "private": True, "thread_is_place": True}
    await say_on(bot, "UA", "Our layoffs list has Zelmanovich-77 on it", **where, **private_thread)
    await bot.settle()
    sent = await say_on(bot, "UB", "anything about Zelmanovich-77 or layoffs?", **where)
    assert "Zelmanovich-77 on it" not in sent


async def test_a_fact_of_one_discord_private_thread_stays_out_of_another(sq: Any) -> None:
    bot, _ = sq
    where: dict[str, Any] = {
        "platform": "discord",
        "team": "G1",
        "channel": "C100",
        "private": True,
        "thread_is_place": True,  # two private threads, as the Discord adapter hands them in
    }
    await say_on(bot, "UA", "please remember that I see a therapist-4471", **where, thread="T1")
    sent = await say_on(bot, "UA", "what do you know about me?", **where, thread="T2")
    assert "therapist-4471" not in sent


# --- races ----------------------------------------------------------------------------------


async def test_forget_all_does_not_undo_a_platform_delete_made_while_it_waited(sq: Any) -> None:
    """`Eraser._cut_copies` reads a page of the team's messages, then takes each session's lock
    and writes its cut copies of what it read. A platform delete that ran in between (it cut
    Carol's deleted words from the same bot reply) is overwritten with the stale copy: Carol's
    deleted words are back in the reply, and nothing passes again for them."""
    import asyncio

    from bot.keys import SessionKey
    from bot.messages import MessageRef

    bot, where = sq
    app = bot.app
    await bot.say("UC", "My badge number is Quixotic-5521 for the lab", C1_THREAD, "1700.61")
    await bot.say("UA", "My locker combination is 4471 and my cat is Mr Whiskerton", C1_THREAD)
    await bot.say("UB", "what did they both say?", C1_THREAD)  # the reply quotes both
    await bot.settle()
    session = SessionKey("slack", "T1", C1_THREAD.channel, C1_THREAD.thread)

    async with app.lock_session(session):  # a turn runs there
        delete = asyncio.create_task(
            app.message_deleted(MessageRef("slack", "T1", ("1700.61",), channel="C1"))
        )
        await _until(lambda: app.session_locks.users(session.id) >= 2)
        forget = asyncio.create_task(bot.command("UA", "forget all"))
        await _until(lambda: app.session_locks.users(session.id) >= 3)
    assert not (await delete).failed
    await forget
    await bot.settle()
    assert leftovers(where, "Quixotic-5521") == []


# --- the audience rule: Slack Connect -----------------------------------------------------------


async def test_a_slack_connect_channel_is_not_a_public_place_of_the_team() -> None:
    """`public` means "anyone in the team could read it" (bot/audience.py). A channel shared
    with another organisation (`is_ext_shared`) is read by people outside the team, who could
    not read the team's other public channels: Alice's fact said in #general must not be used
    there. `ChannelDirectory.is_private` looks at is_private / is_mpim / is_im only."""
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.slack.channels import ChannelDirectory
    from testkit.fakes.slack_api import FakeSlack

    fake = await FakeSlack().start()
    try:

        def shared(args: dict[str, Any], who: Any) -> dict[str, Any]:
            channel = {"id": str(args.get("channel")), "is_channel": True, "is_private": False}
            return {"ok": True, "channel": channel | {"is_ext_shared": True, "is_shared": True}}

        fake.api_conversations_info = shared  # type: ignore[method-assign]
        client = AsyncWebClient(token=fake.bot_token, base_url=fake.api_url)
        assert await ChannelDirectory().is_private(client, fake.team_id, "C0EXT") is True
    finally:
        await fake.close()


# --- forget all destroying someone else's words -------------------------------------------------


async def test_forget_all_keeps_words_bob_said_himself(sq: Any) -> None:
    """The cutter is built from Alice's words only; a record of Bob's conversation that repeats
    what Bob himself typed there is cut too when Alice happens to have typed the same six words
    somewhere else (a request many people type). Alice was never in C1; after her forget all,
    the bot's replies in Bob's channel read "[…]" where they repeated Bob."""
    from bot.keys import SessionKey

    bot, _ = sq
    request = "Can you summarize the meeting notes for the release please"
    await bot.say("UA", request, C2)
    await bot.say("UB", request, C1)
    session = SessionKey("slack", "T1", "C1")
    before = [m.content for m in await bot.app.store.between(session, after_seq=0, upto_seq=99)]
    await bot.command("UA", "forget all")
    after = [m.content for m in await bot.app.store.between(session, after_seq=0, upto_seq=99)]
    assert after == before


# --- the audit ----------------------------------------------------------------------------------


async def test_the_audit_finds_words_typed_with_a_curly_apostrophe(sq: Any) -> None:
    """Phones type `’` for an apostrophe; an operator at a keyboard types `'`. `bot.textfold`
    folds case and Unicode compatibility forms, not punctuation variants, so `bot memory audit`
    says "found nowhere" for a phrase that is stored (a false negative, the one thing the audit
    must not give). The erasure's cutter matches words only and is not affected."""
    bot, where = sq
    await bot.say("UA", "My landlord’s name is Gustavsson and he’s awful", C1)
    assert leftovers(where, "Gustavsson")  # stored
    found = await audit(
        phrase="landlord's name is Gustavsson",
        person=None,
        store=bot.app.store,
        cache=bot.app.cache,
    )
    assert found, "the audit says the phrase is nowhere"


# --- records written before this release --------------------------------------------------------


def test_a_discord_message_of_the_previous_release_is_not_settled_as_public() -> None:
    """Until 6e41315 (in this very issue) the Discord adapter never set `is_private`, so no
    stored Discord guild message carries `private_place`, private channel or not. The upgrade
    settles legacy facts (`sqlite_facts._settle_audiences`, Mongo's likewise) and index entries
    (`episodic.audiences.settle_audiences`) through `fact_common.message_audience`, which reads
    "no flag" as "said in a public channel": everything a person said in a Discord private
    channel before the upgrade becomes usable in that server's public channels."""
    from bot.audience import Audience
    from bot.stores.fact_common import message_audience

    # A user message of 6676e71 in a Discord private channel: `sent_at` only (turn.py then).
    legacy = {"message_id": "1234", "sent_at": "2026-12-20T10:00:00+00:00"}
    assert not Audience.parse(message_audience("discord:G1:C77:-", legacy)).public


# --- Slack: deleting a message that has a thread ------------------------------------------------


def test_deleting_a_slack_message_with_the_bots_thread_is_a_delete() -> None:
    """The bot answers a channel mention in a thread under it, so almost every message it
    answered in a channel is a thread parent. Deleting a thread parent in Slack does not send
    `message_deleted`: Slack sends `message_changed` whose `message` is a tombstone
    (`subtype: "tombstone"`, `user: "USLACKBOT"`, text "This message was deleted.", same
    `ts`). `route_change` makes it an edit: the stored words are replaced by Slack's
    placeholder, the facts drawn from it are kept (edits keep facts), and the bot's reply in
    the thread that quoted the message stays."""
    from adapters.slack.routing import route_change

    tombstone = {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "channel": "C1",
        "ts": "1700.99",
        "event_ts": "1700.99",
        "channel_type": "channel",
        "message": {
            "type": "message",
            "subtype": "tombstone",
            "text": "This message was deleted.",
            "user": "USLACKBOT",
            "hidden": True,
            "ts": "1700.5",
            "thread_ts": "1700.5",
            "reply_count": 1,
        },
        "previous_message": {
            "type": "message",
            "user": "UA",
            "text": "<@UBOT> My locker combination is 4471",
            "ts": "1700.5",
            "thread_ts": "1700.5",
        },
    }
    change = route_change(tombstone, team="T1", bot_user_id="UBOT", bot_id="BBOT")
    assert change is not None and change.kind == "deleted", change
