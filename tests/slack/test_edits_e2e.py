"""Edits that add the bot's first mention, through the real Bolt path against the fake Slack.

Slack sends two events for an edit of a channel message that mentions the bot: `app_mention`
with `edited` (the text now, not the text before) and `message_changed` (`message` now,
`previous_message` before). An edit that adds the bot's first mention is answered once, in the
message's thread, as if the message had been written so; any other edit is applied to what the
bot keeps and not answered (outcome `edited`)."""

from __future__ import annotations

from typing import Any

from adapters.slack.routing import first_mention_by_edit
from testkit.fakes.openai_server import FakeOpenAI
from testkit.fakes.slack_api import message_changed_event
from testkit.slack_harness import HANDLED, SlackHarness, new_ts
from tests.slack.echo_core import EchoCore

BOT = "<@UBOT>"


async def _edit(slack: SlackHarness, ts: str, new: str, old: str, **kw: Any) -> list[str]:
    """Edit, then wait until both of Slack's events for it are handled: their outcomes
    (`message_changed` first, then the `app_mention` copy when the new text mentions the bot)."""
    before = len(slack.mention_edit_ids)
    changed = await slack.edit_message(ts, new, old_text=old, **kw)
    ids = [changed, *slack.mention_edit_ids[before:]]
    await HANDLED.wait(ids, len(ids), timeout=10)
    return [HANDLED.outcomes([i])[-1] for i in ids]


async def test_an_edit_that_adds_the_first_mention_is_answered_once(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    ts = await slack.channel_message("can someone look at the deploy?")
    assert await slack.wait_handled() == ["ignored"]  # no mention: not for the bot

    first = await _edit(slack, ts, f"{BOT} can someone look at the deploy?", "can someone look")
    assert first == ["answered", "edited"]  # message_changed answers; app_mention copy dropped
    await slack.wait_done(ts)
    assert slack.replies("C1", thread_ts=ts) == ["echo: can someone look at the deploy?"]

    # A second edit (the mention was already there): applied, not answered again.
    again = await _edit(slack, ts, f"{BOT} can someone look at the deploy now?", f"{BOT} can")
    assert again == ["edited", "edited"]
    assert [m.text for m in echo_core.messages] == ["can someone look at the deploy?"]
    assert [(kind, text) for kind, _, text in echo_core.changes] == [
        ("edited", "can someone look at the deploy?"),
        ("edited", "can someone look at the deploy now?"),
    ]  # both edits reached the core's memory (bot/memory/deletion.py applies them)
    assert slack.replies("C1", thread_ts=ts) == ["echo: can someone look at the deploy?"]


async def test_removing_and_adding_the_mention_again_is_not_answered_again(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    ts = await slack.channel_message("question about lunch")
    added = await _edit(slack, ts, f"{BOT} question about lunch", "question about lunch")
    assert added == ["answered", "edited"]
    assert await _edit(slack, ts, "question about lunch", f"{BOT} question about lunch") == [
        "edited"
    ]
    readded = await _edit(slack, ts, f"{BOT} question about lunch!", "question about lunch")
    assert readded == ["edited", "edited"]  # the core keeps the message: it was answered
    assert len(echo_core.messages) == 1 and len(slack.replies("C1", thread_ts=ts)) == 1


async def test_a_thread_follow_up_the_bot_answered_is_not_answered_for_a_mention_edit(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    root = await slack.mention("start")
    await slack.wait_done(root)
    said = await slack.channel_message("and the follow-up", thread_ts=root)
    await slack.wait_done(said)  # answered without a mention: the bot is in the thread
    edit = await _edit(slack, said, f"and the follow-up {BOT}", "and the follow-up", thread_ts=root)
    assert edit == ["edited", "edited"]
    assert slack.replies("C1", thread_ts=root) == ["echo: start", "echo: and the follow-up"]


async def test_a_mention_edited_into_a_thread_the_bot_is_not_in_is_answered_there(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    root = new_ts()
    slack.fake.seed_message("C1", root, user="U2", text="people talking")
    said = await slack.channel_message("what do you think?", thread_ts=root)
    assert await slack.wait_handled() == ["not_in_thread"]
    edit = await _edit(
        slack,
        said,
        f"{BOT} what do you think?",
        "what do you think?",
        thread_ts=root,
        parent_user="U2",
    )
    assert edit[0] == "answered"
    await slack.wait_done(said)
    assert slack.replies("C1", thread_ts=root) == ["echo: what do you think?"]
    [message] = echo_core.messages
    assert (message.message_id, message.thread) == (said, root)


async def test_an_edit_in_a_dm_is_not_answered_again(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    ts = await slack.dm("hello")
    await slack.wait_done(ts)
    edit = await _edit(slack, ts, f"hello {BOT}", "hello", channel="D1", channel_type="im")
    assert edit == ["edited"]  # a DM was answered when sent; Slack sends no app_mention there
    assert slack.replies("D1") == ["echo: hello"]


async def test_a_mention_edit_reaches_the_real_core_with_the_edited_text(
    slack_real: SlackHarness, fake_openai: FakeOpenAI
) -> None:
    ts = await slack_real.channel_message("the budget is 40k for the offsite", user="U2")
    edited = f"{BOT} the budget is 40k for the offsite, is that enough?"
    outcomes = await _edit(slack_real, ts, edited, "the budget is 40k for the offsite", user="U2")
    assert outcomes == ["answered", "edited"]
    await slack_real.wait_done(ts, timeout=20)
    [reply] = slack_real.replies("C1", thread_ts=ts)
    assert "is that enough?" in reply
    asked = [r for r in fake_openai.requests if "is that enough?" in str(r["messages"][-1])]
    assert asked and "<@UBOT>" not in str(asked[-1]["messages"][-1]["content"])

    # The same message edited again: the real core keeps it (it was answered): not again.
    again = await _edit(slack_real, ts, f"{BOT} the budget is 45k, enough?", edited, user="U2")
    assert again == ["edited", "edited"]
    assert len(slack_real.replies("C1", thread_ts=ts)) == 1


def _changed(old: str, new: str, **kw: Any) -> dict[str, Any]:
    return message_changed_event(
        "10.1", channel="C1", user="U1", old_text=old, new_text=new, event_ts="12.1", **kw
    )


def test_first_mention_by_edit_reads_slacks_shapes() -> None:
    got = first_mention_by_edit(_changed("hi", "<@UBOT> hi", thread_ts="9.9"), bot_user_id="UBOT")
    assert got is not None
    assert {k: got[k] for k in ("type", "channel", "user", "ts", "thread_ts", "text")} == {
        "type": "app_mention",
        "channel": "C1",
        "user": "U1",
        "ts": "10.1",
        "thread_ts": "9.9",
        "text": "<@UBOT> hi",
    }
    assert got["edited"] == {"user": "U1", "ts": "12.1"}
    for event in (
        _changed("<@UBOT> hi", "<@UBOT> hi there"),  # already mentioned
        _changed("hi", "hi <@U2>"),  # someone else
        _changed("hi", "<@UBOT> hi", channel_type="im"),  # a DM
        {**_changed("hi", "<@UBOT> hi"), "previous_message": None},  # no text before
        {**_changed("hi", "<@UBOT> hi"), "previous_message": {"ts": "10.1"}},
        {**_changed("hi", "<@UBOT> hi"), "message": "<@UBOT> hi"},
        {**_changed("hi", "<@UBOT> hi"), "subtype": "message_deleted"},
    ):
        assert first_mention_by_edit(event, bot_user_id="UBOT") is None, event
    assert first_mention_by_edit(_changed("hi", "<@UBOT> hi"), bot_user_id=None) is None
    huge = first_mention_by_edit(_changed("a", "<@UBOT> " + "x" * 100_000), bot_user_id="UBOT")
    assert huge is not None and len(huge["text"]) == 40_000
