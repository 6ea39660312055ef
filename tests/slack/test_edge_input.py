"""Careless and hostile input through the real core: huge command words, lone surrogates."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest

from bot.core import CommandRequest
from bot.keys import PersonKey
from testkit.slack_harness import SlackHarness, event_body, new_ts
from tests.slack.conftest import StartHarness
from tests.slack.test_hostile import ACK_LIMIT, mention_acked_during, no_tracebacks

MEGA = "x" * 1_000_000


@pytest.mark.parametrize(
    ("command", "text"),
    [
        ("/tools", "install " + MEGA),
        ("/memory", "forget " + MEGA),
        ("/tools", "install a " * 120_000),
    ],
    ids=["tools_install_1MB_word", "memory_forget_1MB_id", "tools_install_many_words"],
)
async def test_huge_command_is_refused_fast_and_never_echoed(
    slack_real: SlackHarness, caplog: pytest.LogCaptureFixture, command: str, text: str
) -> None:
    caplog.set_level(logging.INFO)
    answers: list[dict[str, Any]] = []

    async def attack() -> None:
        answers.append(await slack_real.ask(command, text, user="U1", timeout=30))

    ack = await mention_acked_during(slack_real, attack, rounds=3)
    assert ack < ACK_LIMIT
    assert len(answers) == 3
    for body in answers:
        assert body["response_type"] == "ephemeral"
        assert "too long" in body["text"] or "too many words" in body["text"]
        assert len(body["text"]) < 300 and "xxxxxxxxxx" not in body["text"]
    assert len(slack_real.fake.responses) == 3  # one answer each, in one part
    no_tracebacks(caplog)


async def test_a_long_fact_id_is_not_echoed(slack_real: SlackHarness) -> None:
    body = await slack_real.ask("/memory", "forget " + "y" * 500)
    assert "I have no fact that about you" in body["text"] and "yyyy" not in body["text"]
    body = await slack_real.ask("/memory", "forget abc123")
    assert "`abc123`" in body["text"]  # a short id is shown as typed


async def test_lone_surrogate_in_a_mention_is_answered(
    slack_real: SlackHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    ts = new_ts()
    event = {
        "type": "app_mention",
        "user": "U1",
        "text": "<@UBOT> hello \ud800 there",
        "ts": ts,
        "channel": "C5",
    }
    body = json.dumps(event_body(event, team=slack_real.team))  # ensure_ascii: "\\ud800"
    assert "\\ud800" in body
    resp = await slack_real.post_raw(body)
    assert resp.status == 200
    await slack_real.wait_done(ts)
    [reply] = slack_real.replies("C5", thread_ts=ts)
    assert "went wrong" not in reply and "\ufffd" in reply  # the echo brain echoes it back
    no_tracebacks(caplog)


async def test_lone_surrogate_in_a_command_and_in_a_fact(
    slack_real: SlackHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    core: Any = slack_real.core
    # A form body cannot carry a lone surrogate (Socket Mode's JSON can): ask the core directly.
    reply = await core.handle_command(
        CommandRequest("slack", slack_real.team, "C1", "U1", "memory", "forget \udc00")
    )
    assert "I have no fact" in reply.text and "\udc00" not in reply.text
    ts = await slack_real.dm("please remember that I like \ud83d tea")
    await slack_real.wait_done(ts)
    [reply] = slack_real.replies("D1")
    assert "went wrong" not in reply
    facts = await core.store.list_facts(PersonKey("slack", slack_real.team, "U1"))
    assert all(f.text.encode("utf-8") for f in facts)
    no_tracebacks(caplog)


async def test_many_mentions_during_a_command_flood_are_all_acked(
    start_harness: StartHarness, make_app: Any
) -> None:
    slack = await start_harness(await make_app())

    async def flood() -> None:
        for _ in range(5):
            await slack.command("/tools", "install " + "z" * 500_000, user="U2")

    started = time.perf_counter()
    acks: list[float] = []

    async def mentions() -> None:
        for _ in range(5):
            t0 = time.perf_counter()
            await slack.send_event(
                {
                    "type": "app_mention",
                    "user": "U1",
                    "text": "<@UBOT> hi",
                    "ts": new_ts(),
                    "channel": "C6",
                }
            )
            acks.append(time.perf_counter() - t0)

    await asyncio.gather(flood(), flood(), mentions())
    assert max(acks) < ACK_LIMIT, acks
    assert time.perf_counter() - started < 30
