"""Feedback buttons in Slack, end to end: the real core (SQLite, FakeOpenAI) behind the Bolt app
over signed HTTP, FakeSlack checking the blocks as Slack does and sending `block_actions` as
Slack does (form-encoded `payload=` JSON)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from bot.app import BotApp
from bot.keys import TeamKey
from bot.stores.feedback import Tally
from testkit.fakes.slack_api import FakeSlack, block_actions_payload, invalid_blocks
from testkit.slack_harness import SlackHarness, new_ts


def _buttons(fake: FakeSlack, channel: str, thread: str) -> tuple[str, dict[str, Any]]:
    """The bot's reply in the thread that carries the buttons, and their element."""
    for msg in fake.bot_messages(channel, thread):
        for block in msg.blocks:
            if block["type"] == "context_actions":
                return msg.ts, block["elements"][0]
    raise AssertionError("no feedback buttons on the reply")


async def _ephemerals(fake: FakeSlack, count: int) -> list[dict[str, Any]]:
    await fake.wait_for(lambda: len(fake.calls_to("chat.postEphemeral")) >= count, timeout=10)
    return [c.args for c in fake.calls_to("chat.postEphemeral")]


async def votes(core: BotApp, reply: str, team: str = "T0TEST") -> list[tuple[str, int]]:
    assert core.feedback_desk is not None
    kept = await core.feedback_desk.votes.votes_on(TeamKey("slack", team), reply)
    return [(v.person, v.vote) for v in kept]


@pytest.mark.parametrize("streaming", [True, False])
async def test_vote_change_two_people_forget_and_delete(
    slack_real: SlackHarness, streaming: bool
) -> None:
    fake, core = slack_real.fake, slack_real.core
    assert isinstance(core, BotApp)
    fake.streaming = streaming
    root = await slack_real.mention("what is two and two", channel="C1")
    await slack_real.wait_done(root, timeout=10)
    reply, element = _buttons(fake, "C1", root)
    assert element["type"] == "feedback_buttons" and element["action_id"] == "bot_feedback"
    assert slack_real.replies("C1", thread_ts=root) == ["ok: what is two and two"]

    up = fake.feedback_click(reply, "U1", positive=True)
    assert (await slack_real.interact(up)).status == 200
    (said,) = await _ephemerals(fake, 1)
    assert said["user"] == "U1" and said["thread_ts"] == root and "Thanks" in said["text"]
    assert await votes(core, reply) == [("slack:T0TEST:U1", 1)]

    await slack_real.interact(fake.feedback_click(reply, "U1", positive=False))
    assert "Changed your vote" in (await _ephemerals(fake, 2))[-1]["text"]
    await slack_real.interact(fake.feedback_click(reply, "U2", positive=False))
    await _ephemerals(fake, 3)
    assert sorted(await votes(core, reply)) == [("slack:T0TEST:U1", -1), ("slack:T0TEST:U2", -1)]
    assert core.feedback_desk is not None
    totals = await core.feedback_desk.votes.feedback_totals(TeamKey("slack", "T0TEST"))
    assert totals.total == Tally(0, 2) and totals.by_place == {"C1": Tally(0, 2)}
    (vote,) = [
        v
        for v in await core.feedback_desk.votes.votes_on(TeamKey("slack", "T0TEST"), reply)
        if v.person.endswith("U2")
    ]
    assert vote.session == f"slack:T0TEST:C1:{root}" and vote.seq >= 1
    assert vote.turn_id.startswith("t_") and vote.audience == "public" and vote.model

    await slack_real.ask("/memory", "forget all", user="U2")
    assert await votes(core, reply) == [("slack:T0TEST:U1", -1)]

    await slack_real.send_event(
        {
            "type": "message",
            "subtype": "message_deleted",
            "hidden": True,
            "channel": "C1",
            "ts": new_ts(),
            "deleted_ts": reply,
            "event_ts": new_ts(),
            "channel_type": "channel",
            "previous_message": {
                "type": "message",
                "user": fake.bot_user_id,
                "bot_id": fake.bot_id,
                "text": "ok",
                "ts": reply,
                "thread_ts": root,
            },
        }
    )
    for _ in range(250):  # the deletion is applied after the ack, in a tracked task
        if not await votes(core, reply):
            break
        await asyncio.sleep(0.02)
    assert await votes(core, reply) == []


async def test_refusals_and_hostile_payloads(
    slack_real: SlackHarness, caplog: pytest.LogCaptureFixture
) -> None:
    fake, core = slack_real.fake, slack_real.core
    assert isinstance(core, BotApp)
    root = await slack_real.mention("hello", channel="C1")
    await slack_real.wait_done(root, timeout=10)
    reply, element = _buttons(fake, "C1", root)
    token = element["positive_button"]["value"]

    def click(value: Any, *, team: str = "T0TEST", ts: str = reply, **over: Any) -> dict[str, Any]:
        action = {"type": "feedback_buttons", "action_id": "bot_feedback", "value": value}
        payload = block_actions_payload(
            team=team, user="U9", channel="C1", ts=ts, thread_ts=root, action=action
        )
        payload.update(over)
        return payload

    caplog.set_level(logging.INFO)
    # Another workspace pressing a copy of the button: that turn is not one of its own.
    await slack_real.interact(click(token, team="T0OTHER"))
    # A message that does not exist (a made-up turn in a real place).
    await slack_real.interact(click("fb:u:t_00000000deadbeef:1:C1:" + root, ts="999.000001"))
    said = await _ephemerals(fake, 2)
    assert all("can't find that reply" in s["text"] for s in said)
    # A value of 100,000 characters, a value of the wrong type, actions not a list, a payload
    # that is not JSON: answered (200 or 400), dropped with one line, never a traceback.
    for payload in (
        click("x" * 100_000),
        click({"nested": 1}),
        click(token, actions="nope"),
        click(token, user="not-a-dict"),
    ):
        resp = await slack_real.interact(payload)
        assert resp.status in (200, 400, 404)
    assert (await slack_real.interact("{not json")).status == 400
    assert await votes(core, reply) == []
    assert len(fake.calls_to("chat.postEphemeral")) == 2
    assert not [r for r in caplog.records if r.exc_info]
    assert "slack_feedback_dropped" in [r.msg for r in caplog.records]


def test_the_fake_checks_the_blocks_as_slack_does() -> None:
    good = {
        "type": "context_actions",
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": "a",
                "positive_button": {"text": {"type": "plain_text", "text": "👍"}, "value": "u"},
                "negative_button": {"text": {"type": "plain_text", "text": "👎"}, "value": "d"},
            }
        ],
    }
    assert not invalid_blocks([good])
    element = good["elements"][0]  # type: ignore[index]
    bad = [
        {**good, "elements": [{**element, "type": "thumbs"}]},  # unknown element type
        {**good, "elements": [{**element, "positive_button": None}]},  # missing button
        {**good, "elements": [{**element, "action_id": "x" * 256}]},
        {**good, "elements": [{**element, "negative_button": {"value": "d"}}]},  # no text
        {**good, "elements": [element] * 6},  # more than 5
        {**good, "type": "feedback"},  # unknown block type
        {**good, "type": "actions"},  # feedback buttons outside a context_actions block
        {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}},
    ]
    for block in bad:
        assert invalid_blocks([block]), json.dumps(block)[:200]


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_workspace_refusing_the_buttons_still_gets_the_answer(
    slack_real: SlackHarness, streaming: bool
) -> None:
    fake = slack_real.fake
    fake.streaming = streaming
    fake.refused_blocks = {"context_actions"}
    root = await slack_real.mention("still answered", channel="C1")
    await slack_real.wait_done(root, timeout=10)
    assert slack_real.replies("C1", thread_ts=root) == ["ok: still answered"]
    assert not any(m.blocks for m in fake.bot_messages("C1", root))


async def test_a_vote_in_a_dm(slack_real: SlackHarness) -> None:
    fake, core = slack_real.fake, slack_real.core
    assert isinstance(core, BotApp) and core.feedback_desk is not None
    ts = await slack_real.dm("hello in private", user="U1")
    await slack_real.wait_done(ts, timeout=10)
    (reply,) = [m for m in fake.bot_messages("D1") if m.blocks]
    await slack_real.interact(fake.feedback_click(reply.ts, "U1", positive=True))
    await _ephemerals(fake, 1)
    (vote,) = await core.feedback_desk.votes.votes_on(TeamKey("slack", "T0TEST"), reply.ts)
    assert vote.vote == 1 and vote.audience.startswith("dm:")
