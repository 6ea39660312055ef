"""Messages deleted or edited in Slack, through the real Bolt path against the fake Slack: the
`message_deleted` / `message_changed` events Slack sends are applied to what the bot keeps and
never answered (`slack_event_handled` outcome `deleted` / `edited`)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from adapters.slack.routing import MAX_EDIT_CHARS, route_change
from bot.app import BotApp
from bot.keys import TeamKey
from bot.memory.audit import audit
from bot.stores.memory_index import MemoryScope
from testkit.fakes.openai_server import FakeOpenAI, text
from testkit.fakes.slack_api import FakeSlack, message_changed_event, message_deleted_event
from testkit.slack_harness import HANDLED, SlackHarness
from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore

TEAM = TeamKey("slack", "T0TEST")


def request_for(fake: FakeOpenAI, words: str) -> dict[str, Any]:
    """The chat request that answered the user message with these words."""
    for request in reversed(fake.requests):
        last = request["messages"][-1]
        if last["role"] == "user" and words in str(last["content"]):
            return request
    raise AssertionError(f"no request answered {words!r}")


async def index_text(app: BotApp) -> str:
    assert app.memory_index is not None
    changes = await app.memory_index.changes(MemoryScope(TEAM, ("slack:T0TEST:C1",)))
    return "\n".join(f"{e.text}\n{e.context}" for e in changes.entries)


async def start_real(start_harness: StartHarness, make_app: Any) -> tuple[BotApp, SlackHarness]:
    app: BotApp = await make_app(episodic=True)
    return app, await start_harness(app)


async def settled(app: BotApp) -> None:
    assert app.episodic is not None and await app.episodic.idle(20)


async def test_a_deleted_message_and_its_answer_leave_the_bots_memory(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app, slack = await start_real(start_harness, make_app)
    root = await slack.mention("let's plan the offsite", user="U2")
    await slack.wait_done(root, timeout=10)
    secret = "my bank PIN is 4417-zebra"
    said = await slack.channel_message(secret, user="U1", thread_ts=root)
    await slack.wait_done(said, timeout=10)
    assert "ok: Alice: my bank PIN is 4417-zebra" in slack.replies("C1", thread_ts=root)
    await settled(app)
    assert "4417-zebra" in await index_text(app)  # indexed: there is something to erase

    deletion = await slack.delete_message(said, text=secret, user="U1", thread_ts=root)
    assert await HANDLED.wait([deletion], 1, timeout=10) == ["deleted"]

    follow = await slack.channel_message("what time do we leave", user="U2", thread_ts=root)
    await slack.wait_done(follow, timeout=10)
    await settled(app)
    asked = json.dumps(request_for(fake_openai, "what time do we leave"))
    assert "let's plan the offsite" in asked  # the thread's history is there...
    assert "4417-zebra" not in asked  # ...without her message or the bot's answer to it
    # The store, read independently: every table's rows of the SQLite file.
    conn = sqlite3.connect(app.settings.bot_data_dir / "bot.db")
    try:
        docs = [row[0] for row in conn.execute("SELECT doc FROM messages")]
    finally:
        conn.close()
    assert docs and not any("4417-zebra" in d for d in docs)
    assert any("what time do we leave" in d for d in docs)
    # Every store's files (free pages and WALs too: the inbox's as well) and the cache.
    assert await audit(phrase="4417-zebra", store=app.store, cache=app.cache) == []
    assert "4417-zebra" not in await index_text(app)
    assert slack.replies("C1", thread_ts=root)[-1] == "ok: what time do we leave"
    assert len(slack.replies("C1", thread_ts=root)) == 3  # the deletion was not answered


async def test_deleting_the_mention_the_bot_answered_in_a_thread_erases_it(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    """The bot answers a channel mention in a thread under it; deleting that message, Slack
    leaves a tombstone in its place and says so with `message_changed` (the fake does as Slack
    does): it is a deletion, not an edit to "This message was deleted."."""
    app, slack = await start_real(start_harness, make_app)
    secret = "our acquisition target is Quillbrook-88"
    root = await slack.mention(secret, user="U1")
    await slack.wait_done(root, timeout=10)
    assert slack.replies("C1", thread_ts=root)  # answered in a thread under it

    deletion = await slack.delete_message(root, text=secret, user="U1")
    assert await HANDLED.wait([deletion], 1, timeout=10) == ["deleted"]

    follow = await slack.channel_message("any news?", user="U2", thread_ts=root)
    await slack.wait_done(follow, timeout=10)
    await settled(app)
    asked = json.dumps(request_for(fake_openai, "any news?"))
    assert "Quillbrook-88" not in asked and "This message was deleted" not in asked
    assert await audit(phrase="Quillbrook-88", store=app.store, cache=app.cache) == []


async def test_an_edit_changes_what_later_answers_see_and_is_not_answered(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app, slack = await start_real(start_harness, make_app)
    root = await slack.mention("where is the offsite", user="U2")
    await slack.wait_done(root, timeout=10)
    fake_openai.push(text("Noted."))  # the answer to the message about to be edited
    old = "the offsite is in Lisbon-aa"
    said = await slack.channel_message(old, user="U1", thread_ts=root)
    await slack.wait_done(said, timeout=10)
    await settled(app)

    edit = await slack.edit_message(
        said, "the offsite is in Porto-bb <@U2>", old_text=old, user="U1", thread_ts=root
    )
    assert await HANDLED.wait([edit], 1, timeout=10) == ["edited"]
    follow = await slack.channel_message("remind me where", user="U2", thread_ts=root)
    await slack.wait_done(follow, timeout=10)
    await settled(app)

    asked = request_for(fake_openai, "remind me where")
    users = [m["content"] for m in asked["messages"] if m["role"] == "user"]
    assert "Alice: the offsite is in Porto-bb @Bob" in users  # as the core saw the message itself
    assert "Lisbon-aa" not in json.dumps(asked)
    assert "Porto-bb" in await index_text(app) and "Lisbon-aa" not in await index_text(app)
    # Answered: the mention, the message before the edit, the follow-up; never the edit.
    assert slack.replies("C1", thread_ts=root) == [
        "ok: where is the offsite",
        "Noted.",
        "ok: Bob: remind me where",
    ]


async def test_changes_to_messages_the_bot_never_kept_change_nothing(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    ts = await slack.channel_message("people chatting without the bot", user="U1")
    deleted = await slack.delete_message(ts, text="people chatting without the bot")
    edited = await slack.edit_message(ts, "chatting, edited", old_text="x")
    # Slack's change to a thread parent when a reply goes: the text did not change.
    count = await slack.edit_message(ts, "same", old_text="same", edited=False)
    later = await slack.dm("after them")
    await slack.wait_done(later)
    outcomes = await HANDLED.wait([deleted, edited, count], 3)
    assert sorted(outcomes) == ["deleted", "edited", "ignored"]
    assert [m.message_id for m in echo_core.messages] == [later]  # nothing answered
    kinds = [(kind, ref.message_ids, ref.channel) for kind, ref, _ in echo_core.changes]
    assert kinds == [("deleted", (ts,), "C1"), ("edited", (ts,), "C1")]
    assert echo_core.changes[1][2] == "chatting, edited"


async def test_a_message_deleted_before_its_turn_ran_is_not_answered(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app, slack = await start_real(start_harness, make_app)
    root = await slack.mention("start", user="U2")
    await slack.wait_done(root, timeout=10)
    fake_openai.latency = 0.6  # the next turn holds the thread while the second one waits
    first = await slack.channel_message("first question", user="U2", thread_ts=root)
    await slack.fake.wait_for(lambda: "first question" in json.dumps(fake_openai.requests))
    second = await slack.channel_message("oops, a secret 88-omega", user="U1", thread_ts=root)
    deletion = await slack.delete_message(
        second, text="oops, a secret 88-omega", user="U1", thread_ts=root
    )
    await slack.wait_done(first, timeout=10)
    assert await HANDLED.wait([deletion], 1, timeout=10) == ["deleted"]
    assert HANDLED.outcomes([slack.sent[-2]]) == ["deleted"]  # the message itself: not run
    assert "88-omega" not in json.dumps(fake_openai.requests)
    assert slack.replies("C1", thread_ts=root) == ["ok: start", "ok: first question"]
    assert await audit(phrase="88-omega", store=app.store, cache=app.cache) == []


def test_route_change_reads_slacks_shapes() -> None:
    def change(event: dict[str, Any]) -> Any:
        return route_change(event, team="T1", bot_user_id="UBOT", bot_id="BBOT")

    deleted = message_deleted_event(
        "10.1", channel="C1", user="U1", text="hi", event_ts="11.1", thread_ts="9.1"
    )
    got = change(deleted)
    assert (got.kind, got.channel, got.message_ts, got.thread_ts) == (
        "deleted",
        "C1",
        "10.1",
        "9.1",
    )
    assert got.session_thread == "9.1" and got.text == ""
    top = change({**deleted, "previous_message": {"user": "U1", "text": "x", "ts": "10.1"}})
    assert top.session_thread == "10.1"  # a top-level mention: the thread opened under it
    dm = change({**deleted, "channel": "D1", "channel_type": "im", "previous_message": {}})
    assert dm.session_thread is None and dm.message_ts == "10.1"  # deleted_ts alone suffices

    edited = message_changed_event(
        "10.1", channel="C1", user="U1", old_text="a", new_text="b", event_ts="12.1"
    )
    got = change(edited)
    assert (got.kind, got.text, got.version) == ("edited", "b", "12.1")
    long = message_changed_event(
        "10.1", channel="C1", user="U1", old_text="a", new_text="x" * 50_000, event_ts="12.2"
    )
    assert len(change(long).text) == MAX_EDIT_CHARS

    own = message_changed_event(
        "10.1", channel="C1", user="UBOT", old_text="a", new_text="b", event_ts="12.3"
    )
    same = message_changed_event(
        "10.1", channel="C1", user="U1", old_text="a", new_text="a", event_ts="12.4", edited=False
    )
    assert change(own) is None and change(same) is None
    assert change({**edited, "message": {"user": "U1", "text": "edited"}}) is None  # no ts
    assert change({**deleted, "channel": "C:1"}) is None
    assert change({**deleted, "deleted_ts": None, "previous_message": {}}) is None
    assert change({**deleted, "subtype": "channel_join"}) is None
    other_bot = {**deleted, "previous_message": {"bot_id": "BX", "ts": "10.1"}}
    assert change(other_bot) is None
    assert route_change(other_bot, team="T1", bot_user_id="UBOT", bot_id="BBOT", allow_bots=True)


async def test_the_fake_sends_what_slack_documents(fake_slack: FakeSlack) -> None:
    event = message_deleted_event("1.1", channel="C1", user="U1", text="t", event_ts="2.2")
    assert {"type", "subtype", "hidden", "channel", "ts", "deleted_ts", "event_ts"} <= set(event)
    changed = message_changed_event(
        "1.1", channel="C1", user="U1", old_text="a", new_text="b", event_ts="2.3"
    )
    assert changed["message"]["edited"] == {"user": "U1", "ts": "2.3"}
    assert changed["previous_message"]["text"] == "a" and changed["message"]["ts"] == "1.1"
