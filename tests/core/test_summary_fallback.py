"""Summaries on servers without structured output: schema -> JSON mode -> plain, parsed leniently;
and a summariser that keeps failing never blocks or breaks the conversation."""

from __future__ import annotations

import json
from typing import Any

from bot.keys import SessionKey
from tests.fakes.openai_server import FakeOpenAI, Step, default_brain, status, text
from tests.helpers import say

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
    assert app.counter.messages(fake_openai.requests[-1]["messages"]) < 3000
