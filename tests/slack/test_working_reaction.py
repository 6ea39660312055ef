"""The :eyes: working reaction shows only on answers slower than about a second (issue 12).

A quick answer is one Web API call, the reply; a slow one (the model scripted to take ~2 s)
gets the reaction added, then removed after the reply. The real core on FakeOpenAI, with the
production delay (`working_reaction_delay=1.0`; the harness otherwise reacts at once).
"""

from __future__ import annotations

from typing import Any

from adapters.slack.config import SlackConfig
from testkit.fakes.openai_server import FakeOpenAI
from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore

# The defaults the harness changes for other tests: the reaction's delay, and the first-flush
# hold that makes a quick short answer one post.
PRODUCTION = {
    "working_reaction_delay": SlackConfig.working_reaction_delay,
    "first_flush_seconds": SlackConfig.first_flush_seconds,
}
assert PRODUCTION["working_reaction_delay"] == 1.0


async def test_quick_answer_is_one_call_and_a_slow_one_gets_the_reaction(
    start_harness: StartHarness, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    slack = await start_harness(await make_app(), **PRODUCTION)
    fake = slack.fake
    warm = await slack.mention("warm up", channel="C1")  # users.info / conversations.info
    await slack.wait_replies("C1", warm, timeout=10)

    start = len(fake.calls)
    quick = await slack.mention("quick one", channel="C1")
    await slack.wait_replies("C1", quick, timeout=10)

    fake_openai.latency = 2.0  # the next answer takes ~2 s
    slow = await slack.mention("slow one", channel="C1")
    # Positive signals, in this order: the slow turn's reaction (a second after its start, so
    # after the quick turn's timer would have fired had it not been cancelled), then its end.
    await fake.wait_for(lambda: bool(fake.calls_to("reactions.add", timestamp=slow)), 10)
    await slack.wait_done(slow, timeout=10)

    during_quick = [c.method for c in fake.calls[start:] if c.channel == "C1"]
    quick_calls = during_quick[: during_quick.index("chat.postMessage") + 1]
    assert quick_calls == ["chat.postMessage"]  # the reply, nothing else
    assert not fake.calls_to("reactions.add", timestamp=quick)
    assert not fake.calls_to("reactions.remove", timestamp=quick)
    assert slack.replies("C1", thread_ts=quick) == ["ok: quick one"]

    slow_calls = [
        c.method
        for c in fake.calls
        if c.channel == "C1"
        and (c.args.get("timestamp") == slow or c.args.get("thread_ts") == slow)
    ]
    assert slow_calls == ["reactions.add", "chat.postMessage", "reactions.remove"]
    assert slack.replies("C1", thread_ts=slow) == ["ok: slow one"]


async def test_assistant_threads_show_their_status_at_once_and_no_reaction(
    start_harness: StartHarness,
) -> None:
    core = EchoCore(delay=1.5)
    slack = await start_harness(core, **PRODUCTION)
    thread = "1700000000.000900"
    await slack.dm("hello", channel="D7", thread_ts=thread)
    await slack.wait_status_cleared(thread)
    statuses = [c.args["status"] for c in slack.fake.calls_to("assistant.threads.setStatus")]
    assert statuses == ["is thinking...", ""]
    assert not slack.fake.calls_to("reactions.add")  # slow, but the status is its indicator
    assert slack.replies("D7", thread_ts=thread) == ["echo: hello"]


async def test_a_slow_turn_cancelled_at_shutdown_still_clears_its_reaction(
    start_harness: StartHarness,
) -> None:
    core = EchoCore(delay=5.0)
    slack = await start_harness(core, working_reaction_delay=0.3, shutdown_grace_seconds=0.1)
    ts = await slack.mention("slow one")
    await slack.fake.wait_for(lambda: bool(slack.fake.calls_to("reactions.add", timestamp=ts)))
    await slack.runner.cleanup()  # drain (0.1 s), then cancel the turn: finish() runs
    await slack.wait_done(ts)
    [reply] = slack.replies("C1", thread_ts=ts)
    assert reply.startswith("Sorry, I was restarting")
