"""What a modern MCP client does with what servers now send, through the whole bot (BotApp on the
fake model server) against a real MCP server (the SDK's MCPServer over streamable HTTP on
loopback, `testkit/fakes/mcp_features`): structured results checked against the tool's output
schema, progress that keeps a long call alive up to a cap, tool-list changes and cache hints."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.app import BotApp
from bot.core import CommandRequest
from bot.keys import TeamKey
from testkit.fakes.mcp_features import FeatureMcp
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.helpers import say
from tools.mcp.connection import MIN_LIST_TTL, McpConnection
from tools.mcp.output import output_checker
from tools.mcp.schema import BadSchema


def cmd(text: str) -> CommandRequest:
    return CommandRequest("test", "T1", "C1", "U1", "tools", text, is_platform_admin=True)


@pytest.fixture
async def server() -> AsyncIterator[FeatureMcp]:
    async with FeatureMcp() as srv:
        yield srv


async def _app(make_app: Any, server: FeatureMcp) -> BotApp:
    app: BotApp = await make_app()
    app.toolboxes.executor.config = type(app.toolboxes.executor.config)(backoff_base=0.0)
    reply = await app.handle_command(cmd(f"install mcp name=wx url={server.url}"))
    assert reply.ok, reply.text
    return app


def _tool_results(fake: FakeOpenAI, n: int = -1) -> list[dict[str, Any]]:
    msgs = fake.requests[n]["messages"]
    return [json.loads(m["content"]) for m in msgs if m["role"] == "tool"]


async def test_structured_results_are_checked_against_the_declared_output_schema(
    make_app: Any, fake_openai: FakeOpenAI, server: FeatureMcp
) -> None:
    app = await _app(make_app, server)
    fake_openai.push(
        tool_calls(
            [
                ("wx_forecast", {"city": "Oslo"}),
                ("wx_bad_forecast", {"city": "Oslo"}),
                ("wx_no_structure", {"city": "Oslo"}),
            ]
        ),
        text("done"),
    )
    await say(app, "weather in Oslo tomorrow?")
    good, bad, missing = _tool_results(fake_openai, 1)
    # No text content: the model reads the structured data itself.
    assert good["ok"] and good["data"] == {"structured": {"city": "Oslo", "high": 21, "sky": "sun"}}
    # Data that breaks the schema never reaches the model as data: a clear tool error instead.
    assert not bad["ok"] and bad["error"]["type"] == "business_error"
    message = bad["error"]["message"]
    assert "does not match the output schema" in message
    assert "high must be an integer" in message and "sky must be one of sun, cloud, rain" in message
    assert "warm" not in json.dumps(bad)
    assert (
        not missing["ok"]
        and "declares structured output for it but sent none" in (missing["error"]["message"])
    )
    # Each ran once (the calls run concurrently: in any order); a broken answer is not retried.
    assert sorted(server.calls) == ["bad_forecast", "forecast", "no_structure"]


async def test_progress_extends_the_idle_timeout_up_to_the_cap(
    make_app: Any, fake_openai: FakeOpenAI, server: FeatureMcp
) -> None:
    app: BotApp = await make_app()
    app.toolboxes.executor.config = type(app.toolboxes.executor.config)(backoff_base=0.0)
    app.toolboxes.mcp.call_timeout = 2.0  # idle: no answer and no progress for 2 s
    app.toolboxes.mcp.call_cap = 8.0  # absolute
    assert (await app.handle_command(cmd(f"install mcp name=wx url={server.url}"))).ok
    fake_openai.push(
        tool_calls(
            [
                ("wx_long_job", {"seconds": 5, "every": 0.1}),  # past idle, under the cap
                ("wx_long_job", {"seconds": 60, "every": 0.1}),  # progress for ever
                ("wx_silent_job", {"seconds": 60}),  # silence
            ]
        ),
        text("done"),
    )
    await say(app, "run the jobs")
    done, capped, silent = _tool_results(fake_openai, 1)
    # Progress kept a 5 s call alive although the idle timeout is 2 s.
    assert done["ok"] and "export done" in json.dumps(done["data"])
    # Progress for ever: cut at the cap, not retried (it would run as long again).
    assert not capped["ok"] and capped["error"]["type"] == "business_error"
    assert "still working after 8 s" in capped["error"]["message"]
    # Silence: cut at the idle timeout; read-only, so retried like any timeout, then given up.
    assert not silent["ok"] and silent["error"]["type"] == "timeout"
    assert "sent no answer and no progress for 2 s" in silent["error"]["message"]
    assert server.calls.count("long_job") == 2 and server.calls.count("silent_job") == 3


async def test_list_changed_relists_once_per_burst_and_the_ttl_hint_is_honoured() -> None:
    """The connection against the real server: a burst of change notices costs one listing
    (debounced, bounded), a turn that comes while it is due waits for it, and the server's
    `ttlMs` freshness hint replaces the bot's own TTL (0, the SDK's default: re-listed each
    time, at most once per MIN_LIST_TTL), the re-listing after a TTL running behind the turn
    that found it stale, which gets the list it has at once."""
    now = [1000.0]
    async with FeatureMcp(cache_ttl_ms=60_000) as srv:
        conn = McpConnection("T1:wx", srv.url, None, ttl=300.0, clock=lambda: now[0])
        try:
            first = await conn.tools()
            assert "grown" not in {t.name for t in first} and srv.listings == 1
            assert conn.cache_scope == "private"  # the SDK's default scope for a hint
            now[0] += 59.0
            await conn.tools()
            assert srv.listings == 1  # still fresh by the server's 60 s
            now[0] += 2.0
            await conn.tools()  # the list it has, at once: the re-listing runs behind the turn
            assert srv.listings == 1
            await conn.relisted()
            assert srv.listings == 2  # stale by the server's 60 s, long before the bot's 300 s
            await conn.call("grow", {})
            for _ in range(20):  # a burst of notices (the server sent one as well)
                conn._changed()
            # The next turn's listing waits for the due re-listing: one listing, new tool there.
            again = await conn.tools()
            assert "grown" in {t.name for t in again}
            assert conn.relists == 1 and srv.listings == 3
        finally:
            await conn.close()
    async with FeatureMcp(cache_ttl_ms=3_600_000) as srv:  # longer than the bot's: not obeyed
        conn = McpConnection("T1:wx", srv.url, None, ttl=300.0, clock=lambda: now[0])
        try:
            await conn.tools()
            now[0] += 301.0
            await conn.tools()
            await conn.relisted()
            assert srv.listings == 2
        finally:
            await conn.close()
    async with FeatureMcp() as srv:  # no hint set: the SDK sends ttlMs 0, "immediately stale"
        conn = McpConnection("T1:wx", srv.url, None, ttl=300.0, clock=lambda: now[0])
        try:
            await conn.tools()
            await conn.tools()
            assert srv.listings == 1  # within MIN_LIST_TTL: shared
            now[0] += MIN_LIST_TTL
            await conn.tools()
            await conn.relisted()
            assert srv.listings == 2
        finally:
            await conn.close()


async def test_elicitation_is_not_advertised_and_a_server_that_asks_gets_a_clear_error(
    make_app: Any, fake_openai: FakeOpenAI, server: FeatureMcp
) -> None:
    """Form elicitation is not built yet: the bot does not advertise the capability, so a tool
    that asks anyway ends as a tool error the model can report, not a hang."""
    app = await _app(make_app, server)
    conn = app.toolboxes.mcp.get(app.toolboxes.provider(TeamKey("test", "T1"), "wx"))
    assert conn is not None
    client = await conn.client()
    assert client.session._build_capabilities(client.protocol_version).elicitation is None
    fake_openai.push(tool_calls([("wx_ask_size", {})]), text("could not ask"))
    sink = await say(app, "order me a shirt")
    assert sink.final == "could not ask"
    [result] = _tool_results(fake_openai, 1)
    assert result["error"]["type"] == "business_error" and server.calls == ["ask_size"]


def test_an_unusable_output_schema_drops_the_tool_and_says_which_schema() -> None:
    assert output_checker(None) is None
    with pytest.raises(BadSchema, match="output schema refers to another document"):
        output_checker({"type": "object", "properties": {"a": {"$ref": "https://x.example/s"}}})
    with pytest.raises(BadSchema, match="output schema is not valid JSON Schema"):
        output_checker({"type": "object", "properties": {"a": {"type": "nonsense"}}})
    with pytest.raises(BadSchema, match="output schema is larger than"):
        output_checker({"type": "object", "description": "x" * 20_000})
