"""The per-team, per-method Web API budget of a reply's progress calls (issue 7, section 4).

Through the real slack_sdk client against FakeSlack, which enforces Slack's per-method limits
(`rate_limit`: a 60-second window per workspace, then 429 + Retry-After) or answers scripted
429s (`fail`). Progress is skipped under a spent budget or a 429; the final text always arrives,
once and complete.
"""

from __future__ import annotations

from typing import Any

from adapters.slack.budget import DEFAULT_PER_MINUTE, WebApiBudget
from bot import metrics
from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore

WORDS = [f"word{n} " for n in range(60)]
ANSWER = "".join(WORDS)


def _skipped(method: str, reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "bot_platform_api_skipped_total",
        {"platform": "slack", "method": method, "reason": reason},
    )
    return value or 0.0


def _streaming_core(pause: float = 0.04) -> EchoCore:
    """60 deltas over ~2.4 s: with a 0.05 s stream interval, ~40 progress flushes wanted."""
    return EchoCore(draft=WORDS, reply=ANSWER, delta_pause=pause)


async def test_long_streamed_answers_stay_within_the_team_budget(
    start_harness: StartHarness,
) -> None:
    # Slack's limit for the team, scaled down so a few seconds of streaming would exceed it.
    limits = {"chat.appendStream": 12, "chat.startStream": 20}
    core = _streaming_core()
    slack = await start_harness(
        core,
        progress_per_minute=tuple((m, float(n)) for m, n in limits.items()),
        stream_interval=0.05,
    )
    for method, per_minute in limits.items():
        slack.fake.rate_limit(method, per_minute)
    # Three long answers at once in one team share its budget.
    roots = [await slack.mention(f"long {n}", channel=f"CB{n}") for n in range(3)]
    for n, root in enumerate(roots):
        await slack.wait_done(root, timeout=15)
        assert slack.replies(f"CB{n}", thread_ts=root) == [ANSWER]  # once, complete
    appends = slack.fake.calls_to("chat.appendStream")
    assert slack.fake.rate_limited == [], "the bot went over Slack's limit"
    assert 1 <= len(appends) <= limits["chat.appendStream"]
    # Without the budget the flusher would have asked for far more (one per 0.05 s each).
    assert _skipped("chat.appendStream", "budget") > 0
    assert len(slack.fake.calls_to("chat.stopStream")) == 3


async def test_unbudgeted_streaming_would_exceed_that_limit(start_harness: StartHarness) -> None:
    """The oracle of the test above: the same answers without the budget get 429s."""
    core = _streaming_core()
    slack = await start_harness(core, progress_per_minute=(), stream_interval=0.05)
    slack.fake.rate_limit("chat.appendStream", 12)
    roots = [await slack.mention(f"long {n}", channel=f"CU{n}") for n in range(3)]
    for n, root in enumerate(roots):
        await slack.wait_done(root, timeout=15)
        assert slack.replies(f"CU{n}", thread_ts=root) == [ANSWER]  # final text still whole
    assert slack.fake.rate_limited  # Slack had to refuse some


async def test_a_429_skips_progress_and_the_final_text_arrives_once(
    start_harness: StartHarness,
) -> None:
    core = _streaming_core(pause=0.03)
    slack = await start_harness(core, stream_interval=0.05)
    # Slack refuses the first append and asks for 30 s: waiting would hold the answer 30 s.
    slack.fake.fail("chat.appendStream", retry_after=30)
    before = _skipped("chat.appendStream", "rate_limited")
    root = await slack.mention("long one")
    await slack.wait_done(root, timeout=10)  # well before the 30 s Retry-After
    [message] = slack.fake.bot_messages("C1", root)
    assert message.text == ANSWER and not message.stream_open
    assert len(slack.fake.calls_to("chat.appendStream")) == 1  # the refused one, no retry
    assert len(slack.fake.calls_to("chat.startStream")) == 1
    [stop] = slack.fake.calls_to("chat.stopStream")
    assert ANSWER.endswith(stop.args["markdown_text"])  # the rest went out with the final
    assert _skipped("chat.appendStream", "rate_limited") > before


async def test_a_429_on_previews_then_the_final_update_waits_its_retry_after(
    start_harness: StartHarness,
) -> None:
    """A DM (post, then chat.update): a preview update is refused with Retry-After 3 s, longer
    than the rest of the answer takes; no preview is tried meanwhile, and the final chat.update
    waits out the Retry-After instead of failing or posting a second message."""
    core = _streaming_core(pause=0.02)
    slack = await start_harness(core, update_interval=0.05)
    slack.fake.fail("chat.update", retry_after=3)
    ts = await slack.dm("long one")
    await slack.wait_done(ts, timeout=15)
    assert slack.replies("D1") == [ANSWER]
    updates = slack.fake.calls_to("chat.update")
    assert len(updates) == 2  # the refused preview, then the final one after Retry-After
    assert updates[1].at - updates[0].at >= 3.0
    assert updates[1].args["text"] == ANSWER
    assert len(slack.fake.calls_to("chat.postMessage")) == 1


async def test_a_429_on_the_final_post_is_retried_after_its_retry_after(
    start_harness: StartHarness,
) -> None:
    slack = await start_harness(EchoCore(reply="short and final"))
    slack.fake.fail("chat.postMessage", retry_after=1)
    ts = await slack.dm("hi")
    await slack.wait_done(ts, timeout=10)
    assert slack.replies("D1") == ["short and final"]
    assert len(slack.fake.calls_to("chat.postMessage")) == 2


async def test_a_final_retry_after_beyond_the_bound_is_not_waited_for(
    start_harness: StartHarness,
) -> None:
    """Retry-After 120 s against final_wait_seconds 30: the reply is given up (logged and
    counted as reply_failed), the turn ends; it never hangs on Slack's word."""
    slack = await start_harness(EchoCore(reply="never sent"))
    # Both the preview post and the final post are refused (the final is tried once at once:
    # a known Retry-After longer than the bound is not waited for).
    slack.fake.fail("chat.postMessage", retry_after=120, times=2)
    labels = {"component": "slack", "kind": "reply_failed"}
    before = metrics.REGISTRY.get_sample_value("bot_errors_total", labels) or 0.0
    ts = await slack.dm("hi")
    await slack.wait_done(ts, timeout=10)
    assert slack.replies("D1") == []
    assert len(slack.fake.calls_to("chat.postMessage")) == 2
    assert metrics.REGISTRY.get_sample_value("bot_errors_total", labels) == before + 1


# -- the budget itself -----------------------------------------------------------------------


async def test_buckets_are_per_team_and_method_and_hold_a_sixth_of_a_minute() -> None:
    budget = WebApiBudget()
    taken = [await budget.try_spend("T1", "chat.update", 60.0) for _ in range(12)]
    assert taken == [True] * 10 + [False] * 2  # burst: 60 / 6
    assert await budget.try_spend("T2", "chat.update", 60.0)  # another team: its own
    assert await budget.try_spend("T1", "chat.appendStream", 60.0)  # another method: its own
    assert await budget.try_spend("T1", "chat.postMessage", None)  # unbudgeted
    await budget.spend("T1", "chat.update", 60.0)  # a final call over budget is not refused


async def test_a_429_holds_back_only_that_team_and_method_for_its_retry_after() -> None:
    budget = WebApiBudget()
    budget.rate_limited("T1", "chat.appendStream", 30.0)
    assert 29.0 < budget.blocked_for("T1", "chat.appendStream") <= 30.0
    assert not await budget.try_spend("T1", "chat.appendStream", None)
    assert await budget.try_spend("T1", "chat.update", None)
    assert await budget.try_spend("T2", "chat.appendStream", None)
    budget.rate_limited("T1", "chat.appendStream", 1.0)  # a shorter one does not cut it
    assert budget.blocked_for("T1", "chat.appendStream") > 29.0


def test_default_rates_are_slacks_documented_tier_floors() -> None:
    tiers: dict[str, Any] = dict(DEFAULT_PER_MINUTE)
    assert tiers["chat.appendStream"] == 100  # Tier 4
    assert tiers["chat.update"] == 50 and tiers["reactions.add"] == 50  # Tier 3
    assert tiers["chat.startStream"] == tiers["chat.stopStream"] == 20  # Tier 2
    assert tiers["reactions.remove"] == 20  # Tier 2
