"""End to end through POST /slack/events: signed requests in, slack_sdk calls out to FakeSlack."""

from __future__ import annotations

import asyncio
import json
import time

from testkit.fakes.slack_api import FakeSlack
from testkit.slack_harness import HANDLED, SlackHarness, event_body, new_ts
from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore


async def test_mention_is_answered_in_a_thread(slack: SlackHarness, echo_core: EchoCore) -> None:
    ts = await slack.mention("hello there", channel="C1", user="U1")
    await slack.wait_done(ts)
    # the app_mention answered; its `message` copy dropped (the mention path answers it)
    assert sorted(await slack.wait_handled()) == ["answered", "ignored"]
    assert slack.replies("C1", thread_ts=ts) == ["echo: hello there"]
    assert slack.replies("C1") == ["echo: hello there"]  # nothing top-level, nothing twice
    [message] = echo_core.messages
    assert (message.platform, message.team, message.channel) == ("slack", "T0TEST", "C1")
    assert message.thread == ts and message.text == "hello there" and not message.is_dm
    assert message.user == "U1" and message.user_name == "Alice" and message.message_id == ts
    # working status: a reaction on the person's message, removed after the answer
    assert slack.fake.calls_to("reactions.add", timestamp=ts, name="eyes")
    assert slack.fake.calls_to("reactions.remove", timestamp=ts, name="eyes")
    # streamed with the streaming API, addressed to the asker
    [start] = slack.fake.calls_to("chat.startStream")
    assert start.args["thread_ts"] == ts and start.args["recipient_user_id"] == "U1"
    assert slack.fake.calls_to("chat.stopStream")


async def test_mention_inside_a_thread_replies_in_that_thread(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    parent = new_ts()
    ts = await slack.mention("in thread", thread_ts=parent)
    await slack.wait_done(ts)
    assert slack.replies("C1", thread_ts=parent) == ["echo: in thread"]
    assert echo_core.messages[0].thread == parent


async def test_thread_follow_up_needs_no_mention(slack: SlackHarness, echo_core: EchoCore) -> None:
    root = await slack.mention("first")
    await slack.wait_done(root)
    follow = await slack.channel_message("and a follow-up", thread_ts=root, user="U2")
    await slack.wait_done(follow)
    assert slack.replies("C1", thread_ts=root) == ["echo: first", "echo: and a follow-up"]
    assert [m.thread for m in echo_core.messages] == [root, root]  # one session
    assert echo_core.messages[1].user_name == "Bob"


async def test_thread_the_bot_is_not_in_is_ignored(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    other_root = new_ts()
    slack.fake.seed_message("C1", other_root, user="U2", text="people talking")
    await slack.channel_message("just chatting", thread_ts=other_root)
    await slack.channel_message("a plain channel message")
    assert sorted(await slack.wait_handled()) == ["ignored", "not_in_thread"]
    assert slack.fake.calls_to("conversations.replies")  # it looked before dropping it
    assert echo_core.messages == []
    assert slack.fake.bot_messages() == []


async def test_follow_up_in_a_thread_answered_by_another_process(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    """This process never saw the thread: conversations.replies shows the bot's reply there."""
    root = new_ts()
    slack.fake.seed_message("C1", root, user="U1", text="question")
    slack.fake.seed_message(
        "C1", new_ts(), user=slack.fake.bot_user_id, text="answer", thread_ts=root
    )
    follow = await slack.channel_message("thanks, and?", thread_ts=root)
    await slack.wait_done(follow)
    assert echo_core.messages[0].thread == root


async def test_dm_is_always_answered_top_level(slack: SlackHarness, echo_core: EchoCore) -> None:
    ts = await slack.dm("hi in private", channel="D1")
    await slack.wait_done(ts)
    [reply] = slack.fake.bot_messages("D1")
    assert reply.thread_ts is None and reply.text == "echo: hi in private"
    [message] = echo_core.messages
    assert message.is_dm and message.thread is None and message.channel == "D1"
    # no thread: post then chat.update (no streaming API without a thread)
    assert not slack.fake.calls_to("chat.startStream")


async def test_retried_event_is_answered_once(slack: SlackHarness, echo_core: EchoCore) -> None:
    ts = new_ts()
    event = {"type": "app_mention", "user": "U1", "text": "<@UBOT> once", "ts": ts, "channel": "C2"}
    first = await slack.send_event(event, event_id="EvRETRY1")
    retries = await asyncio.gather(
        *(slack.send_event(event, event_id="EvRETRY1", retry_num=n) for n in (1, 2, 3))
    )
    assert first.status == 200 and all(r.status == 200 for r in retries)
    await slack.wait_done(ts)
    assert sorted(await slack.wait_handled()) == ["answered", *["duplicate"] * 3]
    assert slack.replies("C2", thread_ts=ts) == ["echo: once"]
    assert len(echo_core.messages) == 1


async def test_event_delivered_to_two_processes_is_answered_once(
    start_harness: StartHarness, fake_slack: FakeSlack
) -> None:
    shared: set[str] = set()  # plays the shared cache's SET NX
    cores = [EchoCore(seen=shared), EchoCore(seen=shared)]
    apps = [await start_harness(core) for core in cores]
    ts = new_ts()
    event = {"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": ts, "channel": "C3"}
    await asyncio.gather(
        apps[0].send_event(event, event_id="EvTWO"),
        apps[1].send_event(event, event_id="EvTWO", retry_num=1),
    )
    # both processes are done with their delivery: one answered it, the other dropped it
    assert sorted(await apps[0].wait_handled(2)) == ["answered", "duplicate"]
    assert len(fake_slack.bot_messages("C3")) == 1
    assert sum(len(c.messages) for c in cores) == 1


async def test_concurrent_mentions_in_many_channels(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    echo_core.delay = 0.05
    channels = [f"C{n:03d}" for n in range(60)]
    stamps = await asyncio.gather(*(slack.mention(f"n{c}", channel=c) for c in channels))
    await asyncio.gather(*(slack.wait_done(ts, timeout=10) for ts in stamps))
    for channel, ts in zip(channels, stamps, strict=True):
        assert slack.replies(channel, thread_ts=ts) == [f"echo: n{channel}"]
    assert len(echo_core.messages) == len(channels)


async def test_bad_or_stale_signature_gets_401(slack: SlackHarness, echo_core: EchoCore) -> None:
    refused = event_body(
        {"type": "app_mention", "user": "U1", "text": "x", "ts": new_ts(), "channel": "C1"},
        team="T0TEST",
    )
    body = json.dumps(refused)
    bad = await slack.post_raw(body, secret="wrong-secret")
    stale = await slack.post_raw(body, timestamp=int(time.time()) - 600)
    unsigned = await slack.http.post(slack.url("/slack/events"), data=body)
    assert (bad.status, stale.status, unsigned.status) == (401, 401, 401)
    # a signed message sent after them is handled, and the refused event never was
    ts = await slack.dm("signed properly")
    assert await slack.wait_handled() == ["answered"]
    assert HANDLED.outcomes({refused["event_id"]}) == []
    assert [m.message_id for m in echo_core.messages] == [ts]


async def test_url_verification_challenge(slack: SlackHarness) -> None:
    body = json.dumps({"token": "x", "challenge": "abc123", "type": "url_verification"})
    resp = await slack.post_raw(body)
    assert resp.status == 200 and (await resp.json())["challenge"] == "abc123"


async def test_ack_is_fast_even_when_the_turn_is_slow(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    echo_core.delay = 1.0
    started = time.perf_counter()
    ts = await slack.mention("slow")
    acked = time.perf_counter() - started
    assert acked < 0.5  # both events acked long before the 1 s turn ends
    await slack.wait_done(ts)


async def test_own_and_other_bots_messages_are_ignored(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    own = {
        "type": "message",
        "channel_type": "im",
        "channel": "D1",
        "ts": new_ts(),
        "user": "UBOT",
        "bot_id": "BBOT",
        "text": "my own reply",
    }
    other = {
        "type": "message",
        "subtype": "bot_message",
        "channel_type": "im",
        "channel": "D1",
        "ts": new_ts(),
        "bot_id": "BOTHER",
        "text": "beep",
    }
    edited = {
        "type": "message",
        "subtype": "message_changed",
        "channel_type": "im",
        "channel": "D1",
        "ts": new_ts(),
        "message": {"user": "U1", "text": "edited"},
    }
    for event in (own, other, edited):
        assert (await slack.send_event(event)).status == 200
    # Bolt drops the bot's own message before any listener runs (nothing of ours logs it): a DM
    # sent after all three and answered is the signal that none of them will be.
    later = await slack.dm("after them")
    await slack.wait_done(later)
    assert sorted(await slack.wait_handled(3)) == ["answered", "ignored", "ignored"]
    assert [m.message_id for m in echo_core.messages] == [later]


async def test_other_bots_are_answered_when_configured(start_harness: StartHarness) -> None:
    core = EchoCore()
    slack = await start_harness(core, allow_bot_messages=True)
    ts = new_ts()
    other = {
        "type": "message",
        "subtype": "bot_message",
        "channel_type": "im",
        "channel": "D7",
        "ts": ts,
        "bot_id": "BOTHER",
        "text": "beep",
    }
    await slack.send_event(other)
    await slack.wait_done(ts)
    assert core.messages[0].user == "BOTHER"


async def test_text_is_normalised_for_the_core(slack: SlackHarness, echo_core: EchoCore) -> None:
    ts = new_ts()
    text = (
        "<@UBOT> ask <@U2> about <https://example.com/a|the doc> in <#C9|general> "
        "&lt;soon&gt; &amp; <!here>"
    )
    event = {
        "type": "app_mention",
        "user": "U1",
        "text": text,
        "ts": ts,
        "channel": "C1",
        "files": [
            {
                "name": "plan.pdf",
                "mimetype": "application/pdf",
                "size": 2048,
                "permalink": "https://files.example/plan.pdf",
            }
        ],
    }
    await slack.send_event(event)
    await slack.wait_done(ts)
    [message] = echo_core.messages
    assert (
        message.text == "ask @Bob about the doc (https://example.com/a) in #general <soon> & @here"
    )


async def test_turn_failure_apologises_and_clears_status(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    echo_core.fail = True
    ts = await slack.mention("break")
    await slack.wait_done(ts)
    [reply] = slack.replies("C1", thread_ts=ts)
    assert reply.startswith("Sorry")


async def test_core_that_never_finishes_still_gets_an_answer(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    echo_core.skip_finish = True
    ts = await slack.dm("hello")
    await slack.wait_done(ts)
    [reply] = slack.replies("D1")
    assert reply.startswith("Sorry")


async def test_rate_limited_calls_are_retried_after_retry_after(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    slack.fake.fail("chat.postMessage", retry_after=1)
    started = time.monotonic()
    ts = await slack.dm("are you there")
    await slack.wait_done(ts)
    assert slack.replies("D1") == ["echo: are you there"]
    posts = slack.fake.calls_to("chat.postMessage")
    assert len(posts) == 2 and posts[1].at - posts[0].at >= 0.9
    assert time.monotonic() - started >= 0.9


async def test_health_and_metrics(slack: SlackHarness, echo_core: EchoCore) -> None:
    ok = await slack.http.get(slack.url("/healthz"))
    assert ok.status == 200 and (await ok.json())["components"] == {"store": True, "cache": True}
    echo_core.health_status["cache"] = False
    down = await slack.http.get(slack.url("/healthz"))
    assert down.status == 503 and (await down.json())["ok"] is False

    from bot.metrics import REGISTRY

    def dedup_count() -> float:
        samples = [
            s.value
            for metric in REGISTRY.collect()
            if metric.name == "bot_deduplicated_events"
            for s in metric.samples
            if s.name == "bot_deduplicated_events_total"
        ]
        return sum(samples)

    before = dedup_count()
    ts = new_ts()
    event = {"type": "app_mention", "user": "U1", "text": "<@UBOT> m", "ts": ts, "channel": "C1"}
    await slack.send_event(event, event_id="EvMETRIC")
    await slack.send_event(event, event_id="EvMETRIC", retry_num=1)
    await slack.wait_done(ts)
    metrics = await slack.http.get(slack.url("/metrics"))
    text = await metrics.text()
    assert metrics.status == 200 and metrics.headers["Content-Type"].startswith("text/plain")
    for name in (
        "bot_turns_total",
        "bot_turn_latency_seconds",
        "bot_model_latency_seconds",
        "bot_model_tokens_total",
        "bot_tool_calls_total",
        "bot_errors_total",
        "bot_deduplicated_events_total",
        "bot_ack_latency_seconds_bucket",
    ):
        assert name in text
    assert 'bot_platform_events_total{kind="app_mention",platform="slack"}' in text
    assert dedup_count() >= before + 1  # the retry (and the message copy of the mention)


async def test_health_is_503_when_the_core_hangs_or_fails(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    async def broken() -> dict[str, bool]:
        raise RuntimeError("store down")

    echo_core.health = broken  # type: ignore[method-assign]
    resp = await slack.http.get(slack.url("/healthz"))
    assert resp.status == 503


async def test_cache_down_still_answers_once_per_process(start_harness: StartHarness) -> None:
    """Shared de-duplication unavailable: answer (fail open), and the local set stops repeats."""
    core = EchoCore()

    async def down(event_id: str) -> bool:
        raise ConnectionError("cache down")

    core.first_delivery = down  # type: ignore[method-assign]
    slack = await start_harness(core)
    ts = new_ts()
    event = {
        "type": "message",
        "channel_type": "im",
        "user": "U1",
        "text": "hi",
        "ts": ts,
        "channel": "D1",
    }
    await slack.send_event(event, event_id="EvDOWN")
    await slack.send_event(event, event_id="EvDOWN", retry_num=1)
    await slack.wait_done(ts)
    assert sorted(await slack.wait_handled()) == ["answered", "duplicate"]
    assert slack.replies("D1") == ["echo: hi"] and len(core.messages) == 1
