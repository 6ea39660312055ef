"""A turn re-run long after its first attempt (past Discord's nonce window) continues the answer
that attempt posted instead of posting a second one: found through the notes kept with the
inbox entry, or, without notes, in the channel's history (the bot's reply to the message).
Real discord.py clients, the fake Discord (which de-duplicates nonces only within its window,
as Discord does), real cores on one SQLite file playing two processes."""

from __future__ import annotations

from typing import Any

import aiohttp

from adapters.discord.earlier_answer import as_notes
from adapters.discord.handlers import INBOX_KIND
from adapters.discord.sink import part_nonce
from bot.app import BotApp
from testkit.fakes.discord_api import NONCE_WINDOW, FakeDiscord
from testkit.fakes.openai_server import FakeOpenAI, text
from tests.discord.conftest import StartDiscord
from tests.discord.test_conversation import ask, first_channel
from tests.helpers import until


async def post_as_bot(fake: FakeDiscord, channel: str, body: dict[str, Any]) -> dict[str, Any]:
    """What a first attempt in another process posted (its own REST call)."""
    async with aiohttp.ClientSession() as http:
        resp = await http.post(
            f"{fake.api_url}/channels/{channel}/messages",
            json=body,
            headers={"Authorization": f"Bot {fake.token}"},
        )
        assert resp.status == 200, await resp.text()
        sent: dict[str, Any] = await resp.json()
        return sent


async def test_the_fake_checks_a_nonce_only_within_discords_window(
    fake_discord: FakeDiscord,
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    body = {"content": "hello", "nonce": "n-1", "enforce_nonce": True}
    first = await post_as_bot(fake_discord, dm, body)
    again = await post_as_bot(fake_discord, dm, body)
    assert again["id"] == first["id"]  # within the window: the earlier message comes back
    fake_discord.pass_time(NONCE_WINDOW + 1)
    later = await post_as_bot(fake_discord, dm, body)
    assert later["id"] != first["id"]  # past it: a second message
    assert len(fake_discord.bot_messages(dm)) == 2


async def take_as_dead_process(app: BotApp) -> Any:
    """A worker of another process takes the entry (and then dies)."""
    assert app.inbox is not None
    [entry] = await app.inbox.take(INBOX_KIND, "elsewhere:1:dead", count=1, wait=2.0)
    return entry


async def test_a_rerun_past_the_nonce_window_edits_the_reply_found_in_history(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    ada, bob = fake_discord.add_user("Ada"), fake_discord.add_user("Bob")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    app: BotApp = await make_app(bot_inbox_claim_seconds=0.5)
    h = await start_discord(app)
    await app.stop_inbox(0)
    asked = await ask(h, channel, ada, "what's new?")
    await until(lambda: int(asked["id"]) in h.runtime.handlers.accepted, what="accepted")
    await take_as_dead_process(app)
    # It posted a preview as a reply to the question (and died before noting it); people
    # went on talking; the outage outlasted Discord's nonce window.
    preview = await post_as_bot(
        fake_discord,
        channel,
        {
            "content": "Not much, th …",
            "nonce": part_nonce(asked["id"], 0),
            "enforce_nonce": True,
            "message_reference": {"message_id": asked["id"], "channel_id": channel},
        },
    )
    await fake_discord.user_says(channel, bob, "lunch anyone?")
    fake_discord.pass_time(NONCE_WINDOW * 4)

    fake_openai.push(text("Not much, the usual."))
    h.runtime.handlers.accepted.clear()
    survivor: BotApp = await make_app(bot_inbox_claim_seconds=0.5)
    await start_discord(survivor)  # takes the entry over once it is idle for 0.5 s
    await fake_discord.wait_for(
        lambda: (
            [m["content"] for m in fake_discord.bot_messages(channel)] == ["Not much, the usual."]
        ),
        timeout=15,
    )
    await until(lambda: survivor.worker.in_flight == 0, what="the entry is done")
    [answer] = fake_discord.bot_messages(channel)
    assert answer["id"] == preview["id"]  # the same message, edited
    assert fake_discord.calls_to("GET", rf"/channels/{channel}/messages$")  # history, once
    assert len(fake_discord.calls_to("POST", rf"/channels/{channel}/messages$")) == 1


async def test_a_rerun_in_a_dm_continues_the_parts_noted_with_its_entry(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    app: BotApp = await make_app(bot_inbox_claim_seconds=0.5)
    h = await start_discord(app)
    await app.stop_inbox(0)
    asked = await fake_discord.user_says(dm, ada, "tell me a long story")
    await until(lambda: int(asked["id"]) in h.runtime.handlers.accepted, what="accepted")
    entry = await take_as_dead_process(app)
    # Its first attempt posted two parts (no reply reference in a DM) and noted them.
    parts = [
        await post_as_bot(
            fake_discord,
            dm,
            {"content": words, "nonce": part_nonce(asked["id"], i), "enforce_nonce": True},
        )
        for i, words in enumerate(["Once upon a time …", "and then …"])
    ]
    assert app.inbox is not None
    await app.inbox.note(entry, as_notes(int(dm), [int(p["id"]) for p in parts]))
    fake_discord.pass_time(NONCE_WINDOW * 4)

    fake_openai.push(text("Once upon a time, the end."))  # shorter this time: one part
    h.runtime.handlers.accepted.clear()
    survivor: BotApp = await make_app(bot_inbox_claim_seconds=0.5)
    await start_discord(survivor)
    await fake_discord.wait_for(
        lambda: (
            [m["content"] for m in fake_discord.bot_messages(dm)] == ["Once upon a time, the end."]
        ),
        timeout=15,
    )
    await until(lambda: survivor.worker.in_flight == 0, what="the entry is done")
    [answer] = fake_discord.bot_messages(dm)
    assert answer["id"] == parts[0]["id"]  # edited; the stale second part deleted
    assert fake_discord.messages[parts[1]["id"]].get("deleted")
    assert len(fake_discord.calls_to("POST", rf"/channels/{dm}/messages$")) == 2  # the dead's


async def test_a_turn_cut_by_a_restart_is_finished_in_its_first_message_after_the_window(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    """The whole path through the adapter: the first process shows a preview (and notes it with
    the entry), is stopped before the answer is finished (its entry handed back), and the next
    process, started after Discord's nonce window, finishes the answer in that message."""
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    first: BotApp = await make_app()
    h1 = await start_discord(first, first_edit_chars=5, shutdown_grace_seconds=0.5)
    fake_openai.push(text("Chapter one begins. " * 5, stall=60, stall_after=1))
    await fake_discord.user_says(dm, ada, "tell me a story")
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(dm)), timeout=15)
    [preview] = fake_discord.bot_messages(dm)
    assert preview["content"].endswith(" …")
    h1.runtime.handlers.accepted.clear()  # it will not finish: do not wait for it at close
    await h1.close()  # the turn is cut; its entry goes back to the inbox with its notes
    fake_discord.pass_time(NONCE_WINDOW * 4)

    fake_openai.push(text("Chapter one begins, and ends."))
    second: BotApp = await make_app()
    await start_discord(second)
    await fake_discord.wait_for(
        lambda: (
            [m["content"] for m in fake_discord.bot_messages(dm)]
            == ["Chapter one begins, and ends."]
        ),
        timeout=15,
    )
    await until(lambda: second.worker.in_flight == 0, what="the entry is done")
    [answer] = fake_discord.bot_messages(dm)
    assert answer["id"] == preview["id"]
    assert len(fake_discord.calls_to("POST", rf"/channels/{dm}/messages$")) == 1
    assert not fake_discord.calls_to("GET", rf"/channels/{dm}/messages$")  # the notes sufficed


async def test_a_rerun_past_the_window_continues_the_thread_it_opened_on_the_question(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    ada = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    app: BotApp = await make_app(bot_inbox_claim_seconds=0.5)
    h = await start_discord(app, thread_guilds=frozenset({guild}))
    await app.stop_inbox(0)
    asked = await ask(h, channel, ada, "plan the offsite")
    await until(lambda: int(asked["id"]) in h.runtime.handlers.accepted, what="accepted")
    await take_as_dead_process(app)
    # The dead attempt opened the thread on the question and showed a preview in it.
    async with aiohttp.ClientSession() as http:
        resp = await http.post(
            f"{fake_discord.api_url}/channels/{channel}/messages/{asked['id']}/threads",
            json={"name": "plan the offsite", "auto_archive_duration": 1440},
            headers={"Authorization": f"Bot {fake_discord.token}"},
        )
        assert resp.status == 200
    thread = asked["id"]
    preview = await post_as_bot(
        fake_discord,
        thread,
        {"content": "Step one …", "nonce": part_nonce(asked["id"], 0), "enforce_nonce": True},
    )
    fake_discord.pass_time(NONCE_WINDOW * 4)

    fake_openai.push(text("Step one: book the venue."))
    h.runtime.handlers.accepted.clear()
    survivor: BotApp = await make_app(bot_inbox_claim_seconds=0.5)
    await start_discord(survivor, thread_guilds=frozenset({guild}))
    await fake_discord.wait_for(
        lambda: (
            [m["content"] for m in fake_discord.bot_messages(thread)]
            == ["Step one: book the venue."]
        ),
        timeout=15,
    )
    await until(lambda: survivor.worker.in_flight == 0, what="the entry is done")
    [answer] = fake_discord.bot_messages(thread)
    assert answer["id"] == preview["id"]
    assert len(fake_discord.calls_to("POST", r"/threads$")) == 1  # no second thread either
    assert fake_discord.bot_messages(channel) == []
