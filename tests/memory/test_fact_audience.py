"""The audience rule for facts (DESIGN, conversation behaviour), through real turns: a reply is
read by everyone in its place, so a person's fact is only in its context when everyone there
could have read what it was drawn from. Said in a DM: in their DMs only; in a private channel:
there and in their DMs; in a public channel: anywhere in the team. `remember` and the nightly
consolidation both keep to it; `/memory show` lists every fact and says where it is used."""

from __future__ import annotations

from typing import Any

from bot.app import BotApp
from bot.core import CommandRequest
from bot.keys import PersonKey
from bot.memory.consolidation import Consolidator
from bot.memory.reconcile import Reconciler
from bot.memory.structured import JsonAsker
from bot.messages import IncomingMessage
from bot.model import ModelClient
from testkit.fakes.openai_server import FakeOpenAI, message_text
from tests.helpers import CollectingSink

TEAM = "T1"
ALICE = PersonKey("slack", TEAM, "W42")


def said(
    text: str,
    channel: str,
    *,
    thread: str | None = None,
    dm: bool = False,
    private: bool = False,
    user: str = "W42",
) -> IncomingMessage:
    return IncomingMessage(
        "slack", TEAM, channel, thread, user, text, is_dm=dm, is_private=private or dm
    )


def in_dm(text: str, thread: str | None = None) -> IncomingMessage:
    return said(text, "D1", thread=thread, dm=True)


def in_public(text: str, channel: str = "C1", thread: str | None = None) -> IncomingMessage:
    return said(text, channel, thread=thread)


def in_private(text: str, channel: str = "G1", thread: str | None = None) -> IncomingMessage:
    return said(text, channel, thread=thread, private=True)


async def request_text(app: BotApp, openai: FakeOpenAI, msg: IncomingMessage) -> str:
    """Everything the model was sent for this turn (the memory note included)."""
    openai.reset()
    sink = CollectingSink()
    await app.handle_message(msg, sink)
    assert sink.final and not sink.error, sink.final
    return "\n".join(message_text(m) for r in openai.requests for m in r["messages"])


async def remembered(app: BotApp, openai: FakeOpenAI, msg: IncomingMessage) -> None:
    await request_text(app, openai, msg)
    assert any(
        c["function"]["name"] == "remember"
        for r in openai.requests
        for m in r["messages"]
        for c in m.get("tool_calls") or []
    )


async def test_a_fact_remembered_in_a_dm_stays_out_of_a_public_channel(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    await remembered(app, fake_openai, in_dm("remember that I am allergic to cashews"))
    # The same person's next turn, in a public channel: not in the model's request at all.
    public = await request_text(app, fake_openai, in_public("what should I eat?"))
    assert "cashews" not in public
    private = await request_text(app, fake_openai, in_private("what should I eat?"))
    assert "cashews" not in private
    # In their DM (a new thread, so only the memory note can carry it) it is used.
    dm = await request_text(app, fake_openai, in_dm("what should I eat?", thread="t2"))
    assert "- I am allergic to cashews\n" in dm


async def test_a_private_channel_fact_is_used_there_and_in_the_dm_only(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    await remembered(app, fake_openai, in_private("remember that I prefer tabs over spaces"))
    fact = "- I prefer tabs over spaces\n"
    # A new thread of the same private channel: only the memory note can carry it.
    assert fact in await request_text(app, fake_openai, in_private("style?", thread="t2"))
    assert fact in await request_text(app, fake_openai, in_dm("style?"))
    assert "tabs" not in await request_text(app, fake_openai, in_public("style?"))
    assert "tabs" not in await request_text(app, fake_openai, in_private("style?", "G2"))


async def test_a_public_channel_fact_is_used_everywhere_in_the_team(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    await remembered(app, fake_openai, in_public("remember that I prefer celsius"))
    fact = "- I prefer celsius\n"
    for msg in (
        in_public("weather?", "C2"),
        in_private("weather?", "G2"),
        in_dm("weather?"),
    ):
        assert fact in await request_text(app, fake_openai, msg), msg.channel
    # Nobody else's turn, anywhere.
    bob = said("weather?", "C3", user="W7")
    assert "celsius" not in await request_text(app, fake_openai, bob)


async def test_memory_show_lists_every_fact_and_where_it_is_used(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    await remembered(app, fake_openai, in_dm("remember that I am allergic to cashews"))
    await remembered(app, fake_openai, in_private("remember that I prefer tabs over spaces"))
    await remembered(app, fake_openai, in_public("remember that I prefer celsius"))
    reply = await app.handle_command(CommandRequest("slack", TEAM, "C9", "W42", "memory", "show"))
    lines = {line.split("`")[1]: line for line in reply.text.splitlines() if "`" in line[:4]}
    by_text = {
        next(t for t in ("cashews", "tabs", "celsius") if t in line): line
        for line in lines.values()
        if any(t in line for t in ("cashews", "tabs", "celsius"))
    }
    assert "used only in your DMs with me" in by_text["cashews"]
    assert "used only in the private channel G1 and your DMs" in by_text["tabs"]
    assert "used in any channel of this workspace" in by_text["celsius"]


async def test_consolidated_private_and_dm_facts_never_reach_a_public_channel(
    make_app: Any, fake_openai: FakeOpenAI, model: ModelClient
) -> None:
    """What a person says in a private channel or a DM (not asking to remember) becomes a fact
    at night that keeps the audience of those messages."""
    app = await make_app()
    await request_text(app, fake_openai, in_private("I am allergic to cashews."))
    await request_text(app, fake_openai, in_dm("I live in Tromso."))
    await request_text(app, fake_openai, in_public("I prefer celsius.", "C2"))
    asker = JsonAsker(model)
    report = await Consolidator(app.store, Reconciler(app.store, asker), asker, holder="test").run()
    assert report.failures == 0 and report.outcomes["ADD"] == 3, report
    facts = {f.text: f.audience for f in await app.store.list_facts(ALICE)}
    assert facts == {
        "Is allergic to cashews": "private:slack:T1:G1",
        "Lives in Tromso": "dm:slack:T1:D1",
        "Prefers celsius": "public",
    }
    public = await request_text(app, fake_openai, in_public("hello", "C3"))
    assert "celsius" in public and "cashews" not in public and "Tromso" not in public
    other_private = await request_text(app, fake_openai, in_private("hello", "G2"))
    assert "celsius" in other_private and "cashews" not in other_private
    assert "Tromso" not in other_private
    own_private = await request_text(app, fake_openai, in_private("hello", thread="t9"))
    assert "- Is allergic to cashews\n" in own_private and "Tromso" not in own_private
    dm = await request_text(app, fake_openai, in_dm("hello", thread="t9"))
    assert all(f"- {text}\n" in dm for text in facts)


async def test_remember_in_public_never_quotes_the_dm_fact_it_replaces(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    await remembered(app, fake_openai, in_dm("remember that I live in Tromso"))
    await request_text(app, fake_openai, in_public("remember that I live in Bergen"))
    # The reply's requests (not the internal reconciliation, which weighs every fact).
    replying = [r for r in fake_openai.requests if "response_format" not in r]
    tool_results = [message_text(m) for r in replying for m in r["messages"] if m["role"] == "tool"]
    assert tool_results and all('"stored":true' in t for t in tool_results), tool_results
    seen = "\n".join(message_text(m) for r in replying for m in r["messages"])
    assert "Tromso" not in seen  # neither the tool's answer nor anything else said it
    (live,) = await app.store.list_facts(ALICE)
    assert "Bergen" in live.text and live.audience == "public"
    # In the DM, where the old fact could be used, the tool may say what it replaced.
    await request_text(app, fake_openai, in_dm("remember that I live in Oslo", thread="t3"))
    said = [message_text(m) for r in fake_openai.requests for m in r["messages"]]
    assert any('"replaced":"Lives in Bergen"' in t for t in said), said


async def test_one_fact_said_in_two_private_channels_is_given_once_in_the_dm(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    await remembered(app, fake_openai, in_private("remember that I like green tea", "G1"))
    await remembered(app, fake_openai, in_private("remember that I like green tea", "G2"))
    assert len(await app.store.list_facts(ALICE)) == 2  # one for each channel's members
    dm = await request_text(app, fake_openai, in_dm("drink?"))
    assert dm.count("- I like green tea\n") == 1
    reply = await app.handle_command(CommandRequest("slack", TEAM, "D1", "W42", "memory", "show"))
    assert "private channel G1" in reply.text and "private channel G2" in reply.text
