"""The same flows against the real core: BotApp on SQLite and the in-process cache, FakeOpenAI.

FakeOpenAI's default brain answers "ok: <the user's text>" and calls `remember` when asked to
remember something, so replies are predictable.
"""

from __future__ import annotations

import asyncio
from typing import Any

from testkit.slack_harness import SlackHarness, new_ts


async def test_mention_then_follow_up_in_the_thread(slack_real: SlackHarness) -> None:
    root = await slack_real.mention("hello there", channel="C1")
    await slack_real.wait_done(root, timeout=10)
    follow = await slack_real.channel_message("and one more thing", thread_ts=root)
    await slack_real.wait_done(follow, timeout=10)
    assert slack_real.replies("C1", thread_ts=root) == ["ok: hello there", "ok: and one more thing"]
    assert slack_real.replies("C1") == slack_real.replies("C1", thread_ts=root)


async def test_dm_and_retry_answered_once(slack_real: SlackHarness) -> None:
    ts = new_ts()
    event = {
        "type": "message",
        "channel_type": "im",
        "user": "U1",
        "text": "just once",
        "ts": ts,
        "channel": "D1",
    }
    await slack_real.send_event(event, event_id="EvREAL1")
    await slack_real.send_event(event, event_id="EvREAL1", retry_num=1)
    await slack_real.wait_done(ts, timeout=10)
    assert sorted(await slack_real.wait_handled()) == ["answered", "duplicate"]
    assert slack_real.replies("D1") == ["ok: just once"]


async def test_concurrent_channels_each_answered_once(slack_real: SlackHarness) -> None:
    channels = [f"CR{n:02d}" for n in range(25)]
    stamps = await asyncio.gather(*(slack_real.mention(f"hi {c}", channel=c) for c in channels))
    await asyncio.gather(*(slack_real.wait_done(ts, timeout=20) for ts in stamps))
    for channel, ts in zip(channels, stamps, strict=True):
        assert slack_real.replies(channel, thread_ts=ts) == [f"ok: hi {channel}"]


async def test_remember_then_memory_commands(slack_real: SlackHarness) -> None:
    ts = await slack_real.dm("please remember that I like green tea", user="U1")
    await slack_real.wait_done(ts, timeout=10)
    shown = await slack_real.ask("/memory", "show", user="U1")
    assert shown["response_type"] == "ephemeral" and "I like green tea" in shown["text"]
    other = await slack_real.ask("/memory", "", user="U2")
    assert "green tea" not in other["text"]  # one person's facts never shown to another
    erased = await slack_real.ask("/memory", "forget all", user="U1")
    assert erased["response_type"] == "ephemeral"
    again = await slack_real.ask("/memory", "show", user="U1")
    assert "green tea" not in again["text"]


async def test_tools_install_needs_a_workspace_admin(slack_real: SlackHarness) -> None:
    refused = await slack_real.ask("/tools", "install weather", user="U1")
    allowed = await slack_real.ask("/tools", "install weather", user="UADMIN")
    listed = await slack_real.ask("/tools", "", user="U1")
    assert refused["text"].startswith("Sorry, only workspace admins")
    assert not allowed["text"].startswith("Sorry") and "weather" in listed["text"]
    assert all(r["response_type"] == "ephemeral" for r in (refused, allowed, listed))


async def test_bare_mention_gets_the_cores_friendly_reply(slack_real: SlackHarness) -> None:
    ts = await slack_real.mention("")
    [reply] = await slack_real.wait_replies("C1", thread_ts=ts)  # no working status: no model
    assert reply and not reply.startswith("ok:")


async def test_follow_up_reaching_another_process_before_the_first_reply(
    start_harness: Any, make_app: Any, fake_openai: Any
) -> None:
    """Two bot processes share one store. A mention is being answered slowly by the first; a
    follow-up in that thread reaches the second before any bot message exists in the thread.
    The second knows the thread from the shared store and answers without a mention."""
    first = await start_harness(await make_app())
    second = await start_harness(await make_app())
    fake_openai.latency = 0.8
    root = await first.mention("slow question", channel="CX")
    # the first turn is under way (its model request arrived and is held 0.8 s), not answered
    await first.fake.wait_for(lambda: bool(fake_openai.requests))
    assert first.replies("CX", thread_ts=root) == []
    follow = await second.channel_message("quick follow-up", channel="CX", thread_ts=root)
    await first.wait_done(root, timeout=10)
    await second.wait_done(follow, timeout=10)
    assert sorted(second.replies("CX", thread_ts=root)) == [
        "ok: quick follow-up",
        "ok: slow question",
    ]


async def test_two_processes_on_one_redis_answer_a_retried_event_once(
    start_harness: Any, make_app: Any, fake_slack: Any, redis_url: str, redis_prefix: str
) -> None:
    """The real path: adapter -> BotApp.first_delivery -> Redis SET NX, across two processes."""
    apps = [
        await start_harness(await make_app(redis_url=redis_url, bot_redis_prefix=redis_prefix))
        for _ in range(2)
    ]
    ts = new_ts()
    event = {"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": ts, "channel": "C3"}
    await asyncio.gather(
        apps[0].send_event(event, event_id="EvTWO-REAL"),
        apps[1].send_event(event, event_id="EvTWO-REAL", retry_num=1),
    )
    # both processes are done with their delivery: one answered it, the other dropped it
    assert sorted(await apps[0].wait_handled(2, timeout=10)) == ["answered", "duplicate"]
    assert [m.text for m in fake_slack.bot_messages("C3")] == ["ok: hi"]
