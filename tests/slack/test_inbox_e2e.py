"""The durable inbox behind the Slack adapter, with two real cores in one test playing two
replicas (one SQLite file, one Redis prefix), the real slack_sdk against the fake Web API and the
real openai client against the fake model. Multi-process kills are in tests/scale/."""

from __future__ import annotations

import asyncio
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.app import BotApp
from bot.stores.inbox import InboxItem
from testkit.fakes.openai_server import FakeOpenAI, hang, message_text, text
from testkit.slack_harness import SlackHarness, new_ts
from tests.helpers import until
from tests.slack.conftest import StartHarness
from tests.support.tcp_proxy import TcpProxy

KIND = "slack.message"


async def replicas(make_app: Any, start_harness: StartHarness, redis: dict[str, Any], n: int = 2):
    apps: list[BotApp] = [await make_app(**redis) for _ in range(n)]
    return apps, [await start_harness(app) for app in apps]


def shared(redis_url: str, redis_prefix: str, **more: Any) -> dict[str, Any]:
    return {"redis_url": redis_url, "bot_redis_prefix": redis_prefix, **more}


async def test_an_acked_event_is_answered_by_another_replica_when_its_own_stops(
    make_app: Any,
    start_harness: StartHarness,
    fake_openai: FakeOpenAI,
    redis_url: str,
    redis_prefix: str,
) -> None:
    (a, b), (slack_a, slack_b) = await replicas(
        make_app, start_harness, shared(redis_url, redis_prefix)
    )
    await b.stop_inbox(0)  # b only acks: it takes nothing
    await a.stop_inbox(0)
    fake_openai.push(text("Answered from the inbox."))
    ts = await slack_b.mention("are you there?")
    assert (await b.inbox.stats(KIND)).depth == 1  # stored before the ack, nobody took it
    c = await make_app(**shared(redis_url, redis_prefix))
    await start_harness(c)  # a third replica starts serving
    assert await slack_b.wait_replies("C1", ts) == ["Answered from the inbox."]
    await until(lambda: c.worker.in_flight == 0, what="the entry is done")
    # A re-delivery of the same event to yet another replica is dropped at its ack.
    event = {"type": "app_mention", "user": "U1", "text": "<@UBOT> are you there?", "ts": ts}
    resp = await slack_a.send_event({**event, "channel": "C1"}, retry_num=1)
    assert resp.status == 200  # acked after the inbox refused it: nothing more will run
    assert c.worker.in_flight == 0
    assert slack_b.replies("C1", ts) == ["Answered from the inbox."]
    assert len(fake_openai.requests) == 1
    assert (await c.inbox.stats(KIND)).depth == 0


async def test_a_taken_over_entry_updates_the_reply_its_first_attempt_posted(
    make_app: Any,
    start_harness: StartHarness,
    fake_openai: FakeOpenAI,
    redis_url: str,
    redis_prefix: str,
) -> None:
    app = await make_app(**shared(redis_url, redis_prefix, bot_inbox_claim_seconds=0.5))
    slack = await start_harness(app)
    await app.stop_inbox(0)
    ts = await slack.mention("cancel my order")
    assert app.inbox is not None
    # A worker of a replica that then died took it and posted a first part of the answer.
    (entry,) = await app.inbox.take(KIND, "elsewhere:1:dead", count=1, wait=2.0)
    first_try = AsyncWebClient(token=slack.fake.bot_token, base_url=slack.fake.api_url)
    resp = await first_try.chat_postMessage(channel="C1", thread_ts=ts, text="Looking at your ord")
    posted = str(resp["ts"])
    await app.inbox.note(entry, {"reply_ts": [posted], "reply_streamed": False})

    fake_openai.push(text("Your order is cancelled."))
    survivor = await make_app(**shared(redis_url, redis_prefix, bot_inbox_claim_seconds=0.5))
    await start_harness(survivor)
    await until(
        lambda: slack.replies("C1", ts) == ["Your order is cancelled."],
        timeout=10,
        what="the taken-over entry's answer",
    )
    assert [m.ts for m in slack.fake.bot_messages("C1", ts)] == [posted]  # updated, not reposted
    await until(lambda: survivor.worker.in_flight == 0, what="the worker is idle")
    assert (await survivor.inbox.stats(KIND)).depth == 0


async def test_a_reply_posted_but_not_noted_before_the_crash_is_found_and_updated(
    make_app: Any,
    start_harness: StartHarness,
    fake_openai: FakeOpenAI,
    redis_url: str,
    redis_prefix: str,
) -> None:
    """The first attempt died after Slack took its message and before it could note the ts."""
    app = await make_app(**shared(redis_url, redis_prefix, bot_inbox_claim_seconds=0.5))
    slack = await start_harness(app)
    await app.stop_inbox(0)
    await slack.dm("what's the weather?")
    assert app.inbox is not None
    assert await app.inbox.take(KIND, "elsewhere:1:dead", count=1, wait=2.0)  # then it died
    first_try = AsyncWebClient(token=slack.fake.bot_token, base_url=slack.fake.api_url)
    resp = await first_try.chat_postMessage(channel="D1", text="Let me ch")
    posted = str(resp["ts"])

    fake_openai.push(text("Sunny, 21 °C."))
    survivor = await make_app(**shared(redis_url, redis_prefix, bot_inbox_claim_seconds=0.5))
    await start_harness(survivor)
    await until(lambda: slack.replies("D1") == ["Sunny, 21 °C."], timeout=10, what="the answer")
    assert [m.ts for m in slack.fake.bot_messages("D1")] == [posted]  # updated, not reposted
    assert slack.fake.calls_to("conversations.history")  # asked Slack once, on the re-run


async def test_follow_ups_in_a_thread_are_answered_in_order_each_seeing_the_last_answer(
    slack_real: SlackHarness, fake_openai: FakeOpenAI
) -> None:
    fake_openai.latency = 0.3  # each answer is still being written when the next message comes

    def brain(body: dict[str, Any]) -> Any:
        last = [m for m in body["messages"] if m["role"] == "user"][-1]
        return text(f"answer to {message_text(last)}")

    fake_openai.brain = brain
    first = await slack_real.mention("question 1")
    for n in (2, 3):
        await slack_real.channel_message(f"question {n}", thread_ts=first)
    replies = await slack_real.wait_replies("C1", first, count=3, timeout=15)
    assert replies == [f"answer to question {n}" for n in (1, 2, 3)]
    seen = [[message_text(m) for m in r["messages"]] for r in fake_openai.requests]
    assert "answer to question 1" in seen[1] and "answer to question 2" in seen[2]


async def test_with_redis_cut_an_event_is_still_answered_in_process(
    make_app: Any,
    start_harness: StartHarness,
    fake_openai: FakeOpenAI,
    redis_proxy: TcpProxy,
    redis_url: str,
    redis_prefix: str,
) -> None:
    via = f"redis://127.0.0.1:{redis_proxy.port}/0"
    app = await make_app(redis_url=via, bot_redis_prefix=redis_prefix)
    slack = await start_harness(app)
    await redis_proxy.stop()
    fake_openai.push(text("Still here."))
    ts = await slack.mention("hello?")
    assert await slack.wait_replies("C1", ts, timeout=10) == ["Still here."]
    await redis_proxy.start()


async def test_healthz_fails_while_the_oldest_entry_is_too_old(
    make_app: Any, start_harness: StartHarness, fake_openai: FakeOpenAI
) -> None:
    app = await make_app(bot_inbox_max_age_seconds=0.3)
    slack = await start_harness(app)
    assert (await app.health())["inbox"] is True
    fake_openai.push(hang(3), text("late"))
    ts = await slack.mention("slow one")
    await until(lambda: len(fake_openai.requests) == 1, what="the turn started")
    await asyncio.sleep(0.4)  # older than the bound, still in flight
    resp = await slack.http.get(slack.url("/healthz"))
    body = await resp.json()
    assert resp.status == 503 and body["components"]["inbox"] is False
    await slack.wait_replies("C1", ts, timeout=10)
    resp = await slack.http.get(slack.url("/healthz"))
    assert resp.status == 200


async def test_an_oversized_event_is_handled_in_process(
    slack_real: SlackHarness, fake_openai: FakeOpenAI
) -> None:
    core = slack_real.core
    assert isinstance(core, BotApp) and core.inbox is not None
    fake_openai.push(text("Got the big one."))
    ts = new_ts()
    files = [
        {"id": f"F{i}", "name": "x" * 900, "mimetype": "text/plain", "size": 1} for i in range(400)
    ]  # ~400 kB of file metadata: over the inbox's body bound
    await slack_real.send_event(
        {
            "type": "app_mention",
            "user": "U1",
            "text": "<@UBOT> big",
            "ts": ts,
            "channel": "C1",
            "files": files,
        }
    )
    replies = await slack_real.wait_replies("C1", ts, timeout=10)
    assert len(replies) == 1
    assert (await core.inbox.stats(KIND)).depth == 0


async def test_an_item_is_refused_by_both_replicas_after_the_first(
    make_app: Any, redis_url: str, redis_prefix: str
) -> None:
    a = await make_app(**shared(redis_url, redis_prefix))
    b = await make_app(**shared(redis_url, redis_prefix))
    item = InboxItem(kind=KIND, session="slack:T:C:-", body={}, dedup=("slack:T:event:Ev1",))
    assert await a.enqueue(item) is True
    assert await b.enqueue(item) is False


async def test_a_handed_back_turn_leaves_no_working_reaction_after_a_quick_re_run(
    make_app: Any,
    start_harness: StartHarness,
    fake_openai: FakeOpenAI,
    redis_url: str,
    redis_prefix: str,
) -> None:
    """The first replica showed :eyes: on a slow answer and stopped before answering (its entry
    handed back, or the process killed); the replica that answers it quickly adds no reaction of
    its own (the production delay), but must still take the first one's away."""
    first = await make_app(**shared(redis_url, redis_prefix))
    slack_1 = await start_harness(first, shutdown_grace_seconds=0.2)  # reacts at once
    fake_openai.push(hang(30))
    ts = await slack_1.mention("slow one")
    fake = slack_1.fake
    await fake.wait_for(lambda: fake.reactions_on("C1", ts) == {"eyes"}, 10)
    await slack_1.close()  # stop: the turn is cut and its durable entry handed back
    assert fake.reactions_on("C1", ts) == {"eyes"}
    assert slack_1.replies("C1", ts) == []

    fake_openai.push(text("Here it is."))
    second = await make_app(**shared(redis_url, redis_prefix))
    slack_2 = await start_harness(second, working_reaction_delay=1.0)
    assert await slack_2.wait_replies("C1", ts, timeout=10) == ["Here it is."]
    await until(lambda: second.worker.in_flight == 0, what="the re-run is done")
    assert fake.reactions_on("C1", ts) == set()
