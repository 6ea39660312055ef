"""Slack behaviours checked against Slack's own material: edited mentions, lifecycle events in
single-workspace mode, and the rate-limited thread lookup (1 call a minute, 15 messages)."""

from __future__ import annotations

import time

from bot import metrics
from testkit.slack_harness import SlackHarness, new_ts
from tests.slack.echo_core import EchoCore


def dropped(reason: str) -> float:
    return metrics.DROPPED_MESSAGES.labels("slack", reason)._value.get()


async def test_an_edited_mention_is_not_answered_again(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    before = dropped("edited")
    ts = await slack.mention("first version")
    await slack.wait_done(ts)
    edited = {
        "type": "app_mention",
        "user": "U1",
        "text": "<@UBOT> second version",
        "ts": ts,
        "channel": "C1",
        "edited": {"user": "U1", "ts": str(time.time())},
    }
    resp = await slack.send_event(edited)  # a new event id, as after the de-dup window
    assert resp.status == 200
    await slack.fake.wait_for(lambda: dropped("edited") > before)
    later = await slack.mention("something else")  # handled after the edit: a positive signal
    await slack.wait_done(later)
    assert [m.text for m in echo_core.messages] == ["first version", "something else"]


async def test_lifecycle_events_are_acknowledged_in_single_workspace_mode(
    slack: SlackHarness,
) -> None:
    for event in (
        {"type": "app_uninstalled"},
        {"type": "tokens_revoked", "tokens": {"oauth": [], "bot": ["UBOT"]}},
    ):
        resp = await slack.send_event(event)
        assert resp.status == 200, event  # Bolt answers 404 to an event without a listener


async def test_thread_lookup_is_one_small_call_and_never_waits_on_429(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    before = dropped("thread_lookup_failed")
    root = new_ts()
    slack.fake.seed_message("C1", root, user="U2", text="people talking")
    slack.fake.fail("conversations.replies", retry_after=60)
    started = time.perf_counter()
    await slack.channel_message("a follow-up", thread_ts=root)
    await slack.fake.wait_for(lambda: dropped("thread_lookup_failed") > before, timeout=5)
    assert time.perf_counter() - started < 5  # did not wait the 60 s Retry-After
    [call] = slack.fake.calls_to("conversations.replies")
    assert int(call.args["limit"]) == 15 and not call.args.get("cursor")
    assert echo_core.messages == []
