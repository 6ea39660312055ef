"""What was said before a mention, through the real Bolt path, the real core and the fake Slack:
the record of heard messages answers first (no `conversations.replies` / `.history` call); only
without coverage is Slack asked, once (`bot.memory.heard`)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from bot.app import BotApp
from bot.memory.audit import audit
from testkit.fakes.openai_server import FakeOpenAI, Step, default_brain, text
from testkit.fakes.slack_api import FakeSlack, message_changed_event, message_deleted_event
from testkit.slack_harness import HANDLED, SlackHarness, new_ts
from tests.slack.conftest import StartHarness


def asked_with(fake: FakeOpenAI, words: str) -> str:
    """The chat request that answered the user message with these words, as JSON text."""
    for request in reversed(fake.requests):
        last = request["messages"][-1]
        if last["role"] == "user" and words in str(last["content"]):
            return json.dumps(request, ensure_ascii=False)
    raise AssertionError(f"no request answered {words!r}")


async def bot_post(
    slack: SlackHarness, text: str, *, thread_ts: str | None = None, files: tuple[str, ...] = ()
) -> str:
    """Another app's post (`bot_message`), as Slack sends it to every app in the channel."""
    ts = new_ts()
    event: dict[str, Any] = {
        "type": "message",
        "subtype": "bot_message",
        "channel_type": "channel",
        "bot_id": "B0OTHER",
        "username": "Deploy Bot",
        "text": text,
        "ts": ts,
        "channel": "C1",
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    if files:
        event["files"] = [{"id": f"F{i}", "name": name} for i, name in enumerate(files)]
    await slack.send_event(event)
    return ts


async def start(start_harness: StartHarness, make_app: Any) -> tuple[BotApp, SlackHarness]:
    app: BotApp = await make_app()
    return app, await start_harness(app)


async def test_a_mention_partway_into_a_thread_sees_the_thread_without_asking_slack(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI, fake_slack: FakeSlack
) -> None:
    _app, slack = await start(start_harness, make_app)
    root = await slack.channel_message("where should the offsite be?", user="U2")
    await slack.channel_message("I vote for the lake house", user="U3", thread_ts=root)
    await bot_post(slack, "Budget approved: 4000 EUR", thread_ts=root, files=("quote.pdf",))
    asked = await slack.mention("so what did we pick?", user="U1", thread_ts=root)
    await slack.wait_done(asked, timeout=10)

    request = asked_with(fake_openai, "so what did we pick?")
    for said in ("where should the offsite be?", "I vote for the lake house", "4000 EUR"):
        assert said in request
    assert "quote.pdf" in request and "Deploy Bot (a bot)" in request
    assert fake_slack.calls_to("conversations.replies") == []  # the record covered the thread
    assert fake_slack.calls_to("conversations.history") == []


async def test_a_thread_the_record_never_heard_is_fetched_from_slack_once(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI, fake_slack: FakeSlack
) -> None:
    """The bot was added to the channel after the thread began (or restarted with an empty
    record): Slack is asked once; what it gave is kept, so the next mention asks nothing."""
    _app, slack = await start(start_harness, make_app)
    root, reply = new_ts(), new_ts()
    fake_slack.seed_message("C1", root, user="U2", text="which laptop should I buy?")
    fake_slack.seed_message("C1", reply, user="U3", text="the one with 32 GB", thread_ts=root)
    first = await slack.mention("what do you think?", user="U1", thread_ts=root)
    await slack.wait_done(first, timeout=10)
    request = asked_with(fake_openai, "what do you think?")
    assert "which laptop should I buy?" in request and "the one with 32 GB" in request
    assert len(fake_slack.calls_to("conversations.replies", ts=root)) == 1

    second = await slack.mention("and the battery?", user="U2", thread_ts=root)
    await slack.wait_done(second, timeout=10)
    assert "the one with 32 GB" in asked_with(fake_openai, "and the battery?")
    assert len(fake_slack.calls_to("conversations.replies")) == 1  # not asked again


async def test_a_mention_in_a_busy_channel_sees_the_recent_channel_messages(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI, fake_slack: FakeSlack
) -> None:
    _app, slack = await start(start_harness, make_app)
    for n in range(30):
        await slack.channel_message(f"status line {n}", user=f"U{n % 4 + 2}")
    asked = await slack.mention("summarise the status please", user="U1")
    await slack.wait_done(asked, timeout=10)
    request = asked_with(fake_openai, "summarise the status please")
    assert "status line 29" in request and "status line 0" in request
    assert fake_slack.calls_to("conversations.history") == []
    assert fake_slack.calls_to("conversations.replies") == []


async def test_a_top_level_mention_never_spends_slacks_history_budget(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI, fake_slack: FakeSlack
) -> None:
    """A channel the record has not heard (new to the bot, or a restart): the mention is
    answered from what the record holds, without `conversations.history` (one call a minute for
    apps outside the Marketplace, kept for thread checks)."""
    _app, slack = await start(start_harness, make_app)
    fake_slack.seed_message("C7", new_ts(), user="U2", text="the build is red again")
    asked = await slack.mention("why is it red?", user="U1", channel="C7")
    await slack.wait_done(asked, timeout=10)
    assert "the build is red again" not in asked_with(fake_openai, "why is it red?")
    await slack.channel_message("now it is green", user="U2", channel="C7")
    again = await slack.mention("and now?", user="U1", channel="C7")
    await slack.wait_done(again, timeout=10)
    assert "now it is green" in asked_with(fake_openai, "and now?")
    assert fake_slack.calls_to("conversations.history") == []


async def test_a_private_channels_messages_stay_in_it(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI, fake_slack: FakeSlack
) -> None:
    _app, slack = await start(start_harness, make_app)
    secret = new_ts()
    await slack.send_event(
        {
            "type": "message",
            "channel_type": "group",
            "user": "U2",
            "text": "layoffs planned for March",
            "ts": secret,
            "channel": "G1",
        }
    )
    public = await slack.mention("any news?", user="U2", channel="C1")
    await slack.wait_done(public, timeout=10)
    assert "layoffs" not in asked_with(fake_openai, "any news?")
    inside = await slack.mention("what is planned?", user="U3", channel="G1")
    await slack.wait_done(inside, timeout=10)
    assert "layoffs planned for March" in asked_with(fake_openai, "what is planned?")


async def test_forget_all_erases_the_persons_heard_messages_and_quotes_of_them(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI, fake_slack: FakeSlack
) -> None:
    app, slack = await start(start_harness, make_app)
    root = await slack.channel_message("lunch plans?", user="U2")
    await slack.channel_message(
        "my locker code is zebra-4417 and I keep snacks there", user="U3", thread_ts=root
    )
    await bot_post(
        slack, "Noted: my locker code is zebra-4417 and I keep snacks there", thread_ts=root
    )
    asked = await slack.mention("who brings food?", user="U1", thread_ts=root)
    await slack.wait_done(asked, timeout=10)
    assert "zebra-4417" in asked_with(fake_openai, "who brings food?")

    ack = await slack.command("/memory", "forget all", user="U3")
    assert ack.status == 200  # acked at once; the answer comes through the response_url
    url = slack.response_urls[-1]
    await slack.fake.wait_for(lambda: bool(slack.fake.answers_at(url)), timeout=30)
    [erased] = slack.fake.answers_at(url)
    assert erased["response_type"] == "ephemeral" and "erased" in erased["text"].lower()
    assert await audit(phrase="zebra-4417", store=app.store, cache=app.cache) == []
    conn = sqlite3.connect(app.settings.bot_data_dir / "heard.db")
    try:
        texts = [json.loads(r[0])["text"] for r in conn.execute("SELECT doc FROM heard")]
    finally:
        conn.close()
    assert "lunch plans?" in texts  # the others' records stay
    assert any(t.startswith("Noted:") for t in texts)  # the bot's post, its quote cut

    later = await slack.mention("anything else?", user="U1", thread_ts=root)
    await slack.wait_done(later, timeout=10)
    assert "zebra-4417" not in asked_with(fake_openai, "anything else?")


async def test_a_deleted_message_leaves_the_record_and_edits_change_it(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI, fake_slack: FakeSlack
) -> None:
    app, slack = await start(start_harness, make_app)
    root = await slack.channel_message("quarter numbers thread", user="U2")
    gone = await slack.channel_message("revenue was 31337 dollars", user="U3", thread_ts=root)
    edited = await slack.channel_message("costs were 100", user="U4", thread_ts=root)
    deletion = await slack.delete_message(
        gone, text="revenue was 31337 dollars", user="U3", thread_ts=root
    )
    change = await slack.edit_message(
        edited, "costs were 250", old_text="costs were 100", user="U4", thread_ts=root
    )
    outcomes = await HANDLED.wait([deletion, change], 2, timeout=10)
    assert sorted(outcomes) == ["deleted", "edited"]

    asked = await slack.mention("how did we do?", user="U1", thread_ts=root)
    await slack.wait_done(asked, timeout=10)
    request = asked_with(fake_openai, "how did we do?")
    assert "31337" not in request and "costs were 250" in request
    assert "costs were 100" not in request
    assert await audit(phrase="31337", store=app.store, cache=app.cache) == []


async def test_another_bots_deleted_post_leaves_the_record_at_once(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI, fake_slack: FakeSlack
) -> None:
    """The bot never answers other bots, so their deletes never reach a turn's inbox entry:
    the record applies them as they arrive."""
    app, slack = await start(start_harness, make_app)
    root = await slack.channel_message("incident channel", user="U2")
    posted = await bot_post(slack, "alert: db password leaked hunter2-77", thread_ts=root)
    kept = await bot_post(slack, "alert: disk at 91%", thread_ts=root)
    event = message_deleted_event(
        posted, channel="C1", user="U2", text="", event_ts=new_ts(), thread_ts=root
    )
    event["previous_message"] = {
        "type": "message",
        "subtype": "bot_message",
        "bot_id": "B0OTHER",
        "ts": posted,
        "thread_ts": root,
        "text": "alert: db password leaked hunter2-77",
    }
    await slack.send_event(event)
    edit = message_changed_event(
        kept,
        channel="C1",
        user="U2",
        old_text="alert: disk at 91%",
        new_text="alert: disk at 97%",
        event_ts=new_ts(),
        thread_ts=root,
    )
    for part in ("message", "previous_message"):  # another bot's post, as Slack shows one
        edit[part] = {**edit[part], "subtype": "bot_message", "bot_id": "B0OTHER"}
        edit[part].pop("user", None)
    await slack.send_event(edit)
    assert app.heard is not None
    await app.heard.settled()

    asked = await slack.mention("status?", user="U1", thread_ts=root)
    await slack.wait_done(asked, timeout=10)
    request = asked_with(fake_openai, "status?")
    assert "hunter2-77" not in request and "disk at 97%" in request
    assert "disk at 91%" not in request
    assert await audit(phrase="hunter2-77", store=app.store, cache=app.cache) == []


async def test_a_deleted_heard_message_is_cut_from_the_bots_reply_that_quoted_it(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI, fake_slack: FakeSlack
) -> None:
    """The model repeats what it was shown: a message the bot only heard, deleted later, is cut
    from the stored reply that quoted it (the rest kept), as a stored message's would be."""

    def quoting(request: dict[str, Any]) -> Step:
        heard = [
            str(m["content"])
            for m in request["messages"]
            if m["role"] == "system" and "Messages posted here before" in str(m["content"])
        ]
        if not heard:
            return default_brain(request)
        last = heard[-1].rsplit(": ", 1)[-1]
        return text(f"Earlier someone wrote: {last}. Anything else?")

    fake_openai.brain = quoting
    app, slack = await start(start_harness, make_app)
    root = await slack.channel_message("access thread", user="U2")
    secret = "the vault combination is orchid-5521 for the new office door"
    said = await slack.channel_message(secret, user="U3", thread_ts=root)
    asked = await slack.mention("what was that?", user="U1", thread_ts=root)
    await slack.wait_done(asked, timeout=10)
    assert any("orchid-5521" in r for r in slack.replies("C1", thread_ts=root))

    deletion = await slack.delete_message(said, text=secret, user="U3", thread_ts=root)
    assert await HANDLED.wait([deletion], 1, timeout=10) == ["deleted"]
    found = await audit(phrase="orchid-5521", store=app.store, cache=app.cache)
    assert found == [], [(f.where, f.detail) for f in found]
    conn = sqlite3.connect(app.settings.bot_data_dir / "bot.db")
    try:
        docs = [r[0] for r in conn.execute("SELECT doc FROM messages")]
    finally:
        conn.close()
    assert any("Earlier someone wrote:" in d and "Anything else?" in d for d in docs)
