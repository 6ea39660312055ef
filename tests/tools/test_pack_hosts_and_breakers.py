"""Through the whole bot: team-installed packs reach only the hosts the operator allows, and a
provider that keeps failing trips its breaker, visible in /metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from bot.core import CommandRequest
from bot.keys import TeamKey
from bot.metrics import render
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.helpers import say


def cmd(text: str, *, team: str = "T1") -> CommandRequest:
    return CommandRequest("test", team, "C1", "U1", "tools", text, is_platform_admin=True)


def _tool_result(fake: FakeOpenAI, request: int = 1) -> str:
    return next(m for m in fake.requests[request]["messages"] if m["role"] == "tool")["content"]


async def _orders_app(hits: list[str]) -> web.Application:
    async def order(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"order_id": "#W1", "status": "delivered"})

    app = web.Application()
    app.router.add_get("/orders/{oid}", order)
    return app


async def test_multi_workspace_bot_keeps_team_urls_off_private_addresses(
    make_app: Any,
    fake_openai: FakeOpenAI,
    serve_app: Callable[[web.Application], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hits: list[str] = []
    # Slack OAuth (Slack's own settings, read through its traits): several workspaces' admins
    # can install packs; BOT_TOOL_HOSTS unset.
    monkeypatch.setenv("SLACK_CLIENT_ID", "1.2")
    monkeypatch.setenv("SLACK_CLIENT_SECRET", "s")
    async with serve_app(await _orders_app(hits)) as base:
        app = await make_app()
        refused = await app.handle_command(cmd(f"install orders url={base} force=yes"))
        assert not refused.ok and "private and local addresses" in refused.text
        assert await app.store.installed(TeamKey("test", "T1")) == []
        # Installed before the operator restricted hosts: refused at call time as well.
        await app.store.install(TeamKey("test", "T1"), "orders", {"url": base}, by="U1")
        fake_openai.push(tool_calls([("get_order_status", {"order_id": "#W1"})]), text("sorry"))
        await say(app, "where is #W1?")
        result = _tool_result(fake_openai)
        assert '"business_error"' in result and "private and local addresses" in result
        assert hits == []  # the loopback service was never contacted

        # The operator allows that host: the same install now works.
        fake_openai.reset()
        app2 = await make_app(bot_tool_hosts="127.0.0.1")
        assert (await app2.handle_command(cmd(f"install orders url={base}", team="T2"))).ok
        fake_openai.push(tool_calls([("get_order_status", {"order_id": "#W1"})]), text("ok"))
        await say(app2, "where is #W1?", team="T2")
        assert '"status":"delivered"' in _tool_result(fake_openai)
        assert hits == ["/orders/#W1"]


async def test_a_dead_service_opens_its_breaker_per_install(
    make_app: Any, fake_openai: FakeOpenAI, closed_port_url: str
) -> None:
    app = await make_app()
    app.toolboxes.executor.config = type(app.toolboxes.executor.config)(backoff_base=0.0)
    assert (await app.handle_command(cmd(f"install orders url={closed_port_url}"))).ok
    for _ in range(2):  # 3 attempts each: the 5th consecutive failure opens it
        fake_openai.push(tool_calls([("get_order_status", {"order_id": "#W1"})]), text("down"))
        await say(app, "where is #W1?")
    board = app.toolboxes.breakers
    assert board.state("orders@test:T1") == "open"
    assert board.state("orders@test:T2") == "closed"
    fake_openai.reset()
    fake_openai.push(tool_calls([("get_order_status", {"order_id": "#W1"})]), text("down"))
    await say(app, "where is #W1?")
    assert "temporarily unavailable" in _tool_result(fake_openai)
    metrics = render()[0].decode()
    assert 'bot_tool_breaker_state{provider="orders@test:T1"} 2.0' in metrics
    assert 'bot_tool_breaker_opens_total{provider="orders@test:T1"}' in metrics
