"""Episodic recall through Slack (the real core with episodic memory, FakeSlack, FakeOpenAI):
a detail said in a January thread is recalled in March in a new thread of the channel and in a
DM with someone who took part; not in a DM with someone who did not, not in another channel;
a private channel's memories stay in it (its privacy comes from conversations.info)."""

from __future__ import annotations

from typing import Any

from bot.app import BotApp
from testkit.fakes.openai_server import FakeOpenAI
from testkit.fakes.slack_api import FakeSlack
from testkit.slack_harness import SlackHarness

HEADER = "Memories from earlier conversations"
JAN, MARCH = 1768384800, 1772442000  # 14 January 2026, 2 March 2026 (UTC)
_seq = iter(range(1, 10_000))


def ts(day: int) -> str:
    return f"{day}.{next(_seq):06d}"


def memories_of(fake: FakeOpenAI, text: str) -> str:
    """The recalled block of the chat request that answered `text`."""
    for request in reversed(fake.requests):
        last = request["messages"][-1]
        if last["role"] == "user" and text in str(last["content"]):
            return "\n".join(
                str(m["content"])
                for m in request["messages"][:-1]
                if m["role"] == "system" and HEADER in str(m["content"])
            )
    raise AssertionError(f"no request answered {text!r}")


async def test_lisbon_supplier_recalled_only_where_it_may_be(
    start_harness: Any, make_app: Any, fake_openai: FakeOpenAI, fake_slack: FakeSlack
) -> None:
    app: BotApp = await make_app(episodic=True)
    slack: SlackHarness = await start_harness(app)
    assert app.episodic is not None

    async def done(stamp: str) -> None:
        await slack.wait_done(stamp, timeout=20)
        assert app.episodic is not None and await app.episodic.idle(20)

    root = await slack.mention(
        "FYI the supplier for the Lisbon order is Ferreira & Filhos", user="U1", ts=ts(JAN)
    )
    await done(root)
    await done(await slack.channel_message("Thanks, noted", user="U2", thread_ts=root))
    secret = await slack.mention("The Porto budget is 40k euros", channel="G1", ts=ts(JAN))
    await done(secret)

    question = "Who is the supplier for the Lisbon order?"
    await done(await slack.mention(question, channel="C1", user="UADMIN", ts=ts(MARCH)))
    in_channel = memories_of(fake_openai, question)
    assert "Ferreira & Filhos" in in_channel and "14 January 2026" in in_channel

    await done(await slack.dm(question, channel="D2", user="U2"))
    assert "Ferreira & Filhos" in memories_of(fake_openai, question)  # Bob took part

    await done(await slack.dm(question, channel="D3", user="UOWNER"))
    assert memories_of(fake_openai, question) == ""  # Olga never posted there
    await done(await slack.mention(question, channel="C2", user="U1"))
    assert memories_of(fake_openai, question) == ""  # another channel

    budget = "What is the Porto budget?"
    await done(await slack.dm(budget, channel="D1", user="U1"))
    assert memories_of(fake_openai, budget) == ""  # G1 is private: it stays there
    await done(await slack.mention(budget, channel="G1", user="U2", ts=ts(MARCH)))
    assert "40k" in memories_of(fake_openai, budget)
    assert any(c.method == "conversations.info" for c in fake_slack.calls)
