"""`/config set reply=…` through Slack end to end (real core, FakeSlack, FakeOpenAI): `mention`
answers no follow-up without a mention, `threads` (the default) follow-ups in its threads,
`all` every message of the channel in a thread under it; DMs are always answered. "Not
answered" is asserted after the adapter reports the event handled."""

from __future__ import annotations

from typing import Any

from testkit.slack_harness import SlackHarness, new_ts

ADMIN = "UADMIN"  # FakeSlack's workspace admin


async def configure(slack: SlackHarness, text: str, channel: str = "C1") -> str:
    answer = await slack.ask("/config", text, user=ADMIN, channel=channel)
    return str(answer.get("text"))


async def test_reply_mention_answers_no_follow_up_without_a_mention(
    slack_real: SlackHarness,
) -> None:
    assert "Set `reply`" in await configure(slack_real, "set reply=mention")
    root = await slack_real.mention("hello there", channel="C1")
    await slack_real.wait_done(root, timeout=10)
    await slack_real.channel_message("and one more thing", thread_ts=root)
    await slack_real.wait_handled(timeout=10)  # the positive signal: handled (dropped)
    again = await slack_real.mention("and this?", channel="C1", thread_ts=root)
    await slack_real.wait_done(again, timeout=10)
    assert slack_real.replies("C1", thread_ts=root) == ["ok: hello there", "ok: and this?"]


async def test_reply_all_answers_every_message_and_threads_does_not(
    slack_real: SlackHarness,
) -> None:
    plain = await slack_real.channel_message("is the build green?", channel="C2")
    await slack_real.wait_handled(timeout=10)
    assert slack_real.replies("C2") == []  # the default (`threads`): not addressed
    assert "Set `reply`" in await configure(slack_real, "set reply=all", channel="C2")
    asked = await slack_real.channel_message("is the deploy done?", channel="C2")
    await slack_real.wait_done(asked, timeout=10)
    assert slack_real.replies("C2", thread_ts=asked) == ["ok: is the deploy done?"]
    assert slack_real.replies("C2", thread_ts=plain) == []  # said before: not answered later
    # A mention there is still answered exactly once (its `message` copy is not a second one).
    mention = await slack_real.mention("and the tests?", channel="C2")
    await slack_real.wait_done(mention, timeout=10)
    await slack_real.wait_handled(timeout=10)
    assert slack_real.replies("C2", thread_ts=mention) == ["ok: and the tests?"]
    # Another channel keeps the default.
    other = await slack_real.channel_message("anyone?", channel="C3")
    await slack_real.wait_handled(timeout=10)
    assert slack_real.replies("C3", thread_ts=other) == []


async def test_dms_are_answered_whatever_the_setting(slack_real: SlackHarness) -> None:
    assert "Set `reply`" in await configure(slack_real, "set team reply=mention")
    ts = await slack_real.dm("hi in private", channel="D9")
    await slack_real.wait_done(ts, timeout=10)
    assert slack_real.replies("D9") == ["ok: hi in private"]


async def test_members_cannot_change_it(slack_real: Any) -> None:
    answer = await slack_real.ask("/config", "set reply=all", user="U1", channel="C1")
    assert "only admins" in str(answer.get("text"))


async def other_bot_mentions(slack: SlackHarness, text: str, channel: str) -> str:
    """Another app's bot mentions ours: Slack sends app_mention (with its bot_id) and the
    message copy (subtype bot_message)."""
    ts = new_ts()
    base = {
        "user": "UOTHERBOT",
        "bot_id": "BOTHER",
        "text": f"<@{slack.fake.bot_user_id}> {text}",
        "ts": ts,
        "channel": channel,
    }
    await slack.send_event({"type": "app_mention", **base})
    await slack.send_event(
        {"type": "message", "subtype": "bot_message", "channel_type": "channel", **base}
    )
    return ts


async def test_bots_mentions_answers_another_bot_within_the_budget(
    slack_real: SlackHarness,
) -> None:
    quiet = await other_bot_mentions(slack_real, "ping where bots are ignored", "C5")
    await slack_real.wait_handled(timeout=10)
    assert slack_real.replies("C5", thread_ts=quiet) == []  # the default: bots=ignore
    assert "Set `bots`" in await configure(slack_real, "set bots=mentions", channel="C5")
    asked = [await other_bot_mentions(slack_real, f"ping {i}", "C5") for i in range(7)]
    await slack_real.wait_handled(timeout=20)
    for ts in asked[:5]:
        await slack_real.wait_done(ts, timeout=10)
    answered = [slack_real.replies("C5", thread_ts=ts) for ts in asked]
    assert answered == [[f"ok: ping {i}"] for i in range(5)] + [[], []]


async def test_a_budget_alert_reaches_the_admin_who_set_it_by_dm(
    slack_real: SlackHarness,
) -> None:
    """Crossing 100 % of a channel's budget: the admin who set it gets one DM; the member who
    asked next is told the budget is used up, and no model request is made for them."""
    assert "Set `budget`" in await configure(slack_real, "set budget=50/day", channel="C7")
    first = await slack_real.mention("a question long enough to use the budget up", channel="C7")
    await slack_real.wait_done(first, timeout=10)
    dm = slack_real.fake.dm_of(ADMIN)
    await slack_real.fake.wait_for(lambda: bool(slack_real.replies(dm)), timeout=10)
    alerts = slack_real.replies(dm)
    assert len(alerts) == 1 and "Budget alert: <#C7>" in alerts[0]
    assert "refused until it resets at midnight UTC" in alerts[0]
    second = await slack_real.mention("and another", channel="C7")
    await slack_real.fake.wait_for(lambda: bool(slack_real.replies("C7", second)), timeout=10)
    await slack_real.wait_handled(timeout=10)
    (refusal,) = slack_real.replies("C7", thread_ts=second)
    assert "this channel's budget (50 tokens a day) is used up" in refusal
    assert slack_real.replies(dm) == alerts  # no second alert in the period


async def test_each_key_changes_what_the_model_receives(
    start_harness: Any, make_app: Any, fake_openai: Any
) -> None:
    """instructions, language, model, tools and memory, set through Slack's /config, reach the
    model request of the next mention there (and only there)."""
    slack = await start_harness(await make_app(bot_models="gpt-4o"))
    for text in (
        'set team instructions="Answer like a ship captain"',
        "set language=de",
        "set model=gpt-4o tools=none memory=off",
    ):
        assert "Set `" in await configure(slack, text, channel="C5")
    asked = await slack.mention("what is the plan?", channel="C5")
    await slack.wait_done(asked, timeout=10)
    here = fake_openai.requests[-1]
    system = here["messages"][0]["content"]
    assert "Answer like a ship captain" in system and "language: de" in system
    assert here["model"] == "gpt-4o"
    assert not here.get("tools")  # not even the built-in remember: memory is off
    other = await slack.mention("and elsewhere?", channel="C6")
    await slack.wait_done(other, timeout=10)
    there = fake_openai.requests[-1]
    assert "Answer like a ship captain" in there["messages"][0]["content"]  # the team's
    assert "language: de" not in there["messages"][0]["content"]  # C5's own
    assert there["model"] == "gpt-4o-mini"
    assert {t["function"]["name"] for t in there.get("tools") or []} >= {"remember"}
