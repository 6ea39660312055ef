"""The core feeds the Prometheus metrics: turns, model latency/tokens, tools (bounded labels)."""

from __future__ import annotations

from typing import Any

from bot.metrics import REGISTRY
from testkit.fakes.openai_server import FakeOpenAI, status, text, tool_calls
from tests.helpers import say


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_turn_model_and_tool_metrics(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app(bot_model_retries=0)
    turns_ok = value("bot_turns_total", platform="test", outcome="ok")
    turns_err = value("bot_turns_total", platform="test", outcome="error")
    remember_ok = value("bot_tool_calls_total", tool="remember", outcome="ok")
    unknown = value("bot_tool_calls_total", tool="unknown", outcome="unknown_tool")
    prompt = value("bot_model_tokens_total", kind="chat", direction="prompt")
    model_errors = value("bot_errors_total", component="model", kind="unavailable")

    fake_openai.push(
        tool_calls([("remember", {"fact": "Likes tea."}), ("drop_table_users_x1", "{}")]),
        text("ok"),
        status(500),
    )
    await say(app, "remember I like tea")
    await say(app, "and now?")

    assert value("bot_turns_total", platform="test", outcome="ok") == turns_ok + 1
    assert value("bot_turns_total", platform="test", outcome="error") == turns_err + 1
    assert value("bot_tool_calls_total", tool="remember", outcome="ok") == remember_ok + 1
    assert value("bot_tool_calls_total", tool="unknown", outcome="unknown_tool") == unknown + 1
    assert value("bot_tool_calls_total", tool="drop_table_users_x1", outcome="unknown_tool") == 0
    assert value("bot_model_tokens_total", kind="chat", direction="prompt") > prompt
    assert value("bot_errors_total", component="model", kind="unavailable") == model_errors + 1
