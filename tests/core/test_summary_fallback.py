"""Summaries on servers without structured output: schema -> JSON mode -> plain, parsed leniently;
and a summariser that keeps failing never blocks or breaks the conversation."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from bot.keys import SessionKey
from bot.metrics import REGISTRY
from bot.stores.records import utcnow
from testkit.fakes.openai_server import FakeOpenAI, Step, default_brain, status, text
from tests.helpers import say
from tests.support.token_oracle import request_tokens

SESSION = SessionKey("test", "T1", "C-sum")


def _is_summary(request: dict[str, Any]) -> bool:
    first = request["messages"][0].get("content") or ""
    return "running memory" in first


async def _chat_until_summarised(app: Any) -> None:
    for i in range(60):
        await say(app, f"turn {i}: " + "details " * 40, channel="C-sum")
    await app.drain(within=30)


async def test_plain_mode_server_still_gets_summaries(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    seen_formats: list[str] = []

    def brain(request: dict[str, Any]) -> Step:
        if not _is_summary(request):
            return default_brain(request)
        fmt = (request.get("response_format") or {}).get("type", "none")
        seen_formats.append(fmt)
        if fmt != "none":
            return status(400, message=f"response_format {fmt} is not supported")
        body = json.dumps({"summary": "They talked about many details.", "key_facts": []})
        return text(f"Sure! Here it is:\n```json\n{body}\n```")

    fake_openai.brain = brain
    app = await make_app(bot_context_tokens=3000, bot_model_retries=0)
    await _chat_until_summarised(app)
    state = await app.store.get_state(SESSION)
    assert state is not None and state.summary == "They talked about many details."
    assert seen_formats[:3] == ["json_schema", "json_object", "none"]
    assert len(seen_formats) > 3 and set(seen_formats[3:]) == {"none"}  # remembered


async def test_a_failing_summariser_never_breaks_replies(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    def brain(request: dict[str, Any]) -> Step:
        return status(500) if _is_summary(request) else default_brain(request)

    fake_openai.brain = brain
    app = await make_app(bot_context_tokens=3000, bot_model_retries=0)
    await _chat_until_summarised(app)
    sink = await say(app, "still fine?", channel="C-sum")
    assert sink.final == "ok: still fine?" and not sink.error
    state = await app.store.get_state(SESSION)
    assert state is None or state.summary == ""
    assert request_tokens(fake_openai.requests[-1]) <= 3000  # an independent count


async def test_failed_summaries_are_stored_back_off_and_are_counted(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    """`summary_failures` is persisted with the failure time; the session waits 30 s, then 60 s
    ... before the next attempt (one summary request per step, not one per turn), and
    `bot_summaries_total{outcome}` counts what happened."""
    summary_requests: list[bool] = []
    broken = [True]

    def brain(request: dict[str, Any]) -> Step:
        if not _is_summary(request):
            return default_brain(request)
        summary_requests.append(broken[0])
        if broken[0]:
            return status(500)
        return text(json.dumps({"summary": "Many details were discussed.", "key_facts": []}))

    fake_openai.brain = brain
    app = await make_app(bot_context_tokens=3000, bot_model_retries=0)
    failed, ok = _summaries("failed"), _summaries("ok")
    start = utcnow()
    app.memory.clock = lambda: start

    async def turns(n: int) -> None:
        for i in range(n):
            await say(app, f"turn {i}: " + "details " * 40, channel="C-sum")
            await app.drain(within=30)

    for _ in range(60):
        await turns(1)
        if summary_requests:
            break
    assert summary_requests == [True]
    state = await app.store.get_state(SESSION)
    assert state is not None and state.summary_failures == 1 and state.summary_failed_at
    assert _summaries("failed") == failed + 1

    await turns(5)  # inside the 30 s backoff: no new attempt
    assert summary_requests == [True]
    app.memory.clock = lambda: start + timedelta(seconds=31)
    await turns(1)
    assert summary_requests == [True, True]  # tried once more, failed again
    state = await app.store.get_state(SESSION)
    assert state is not None and state.summary_failures == 2
    app.memory.clock = lambda: start + timedelta(seconds=62)
    await turns(3)  # now 60 s from the second failure
    assert summary_requests == [True, True]

    broken[0] = False
    app.memory.clock = lambda: start + timedelta(seconds=200)
    await turns(1)
    assert summary_requests == [True, True, False]
    state = await app.store.get_state(SESSION)
    assert state is not None and state.summary == "Many details were discussed."
    assert state.summary_failures == 0 and state.summary_failed_at is None
    assert _summaries("failed") == failed + 2 and _summaries("ok") == ok + 1
    sink = await say(app, "still fine?", channel="C-sum")
    assert sink.final == "ok: still fine?"


def _summaries(outcome: str) -> float:
    return REGISTRY.get_sample_value("bot_summaries_total", {"outcome": outcome}) or 0.0
