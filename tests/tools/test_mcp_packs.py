"""MCP servers as tool packs, through the whole bot (BotApp on the fake model server) against a
real MCP server (the SDK's MCPServer over streamable HTTP on loopback, testkit/fakes/mcp_server)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.app import BotApp
from bot.core import CommandRequest
from testkit.fakes.mcp_server import FakeMcp
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.helpers import say
from tools.breaker import BreakerBoard, BreakerConfig

TOKEN = "mcp-tok-7f3a9c1e5b"


def cmd(text: str, *, admin: bool = True, team: str = "T1", user: str = "U1") -> CommandRequest:
    return CommandRequest("test", team, "C1", user, "tools", text, is_platform_admin=admin)


@pytest.fixture
async def mcp() -> AsyncIterator[FakeMcp]:
    async with FakeMcp(token=TOKEN) as server:
        yield server


async def _app(make_app: Any, **overrides: Any) -> BotApp:
    app: BotApp = await make_app(**overrides)
    app.toolboxes.executor.config = type(app.toolboxes.executor.config)(backoff_base=0.0)
    return app


async def _install(app: BotApp, server: FakeMcp, name: str = "tix", team: str = "T1") -> str:
    reply = await app.handle_command(
        cmd(f"install mcp name={name} url={server.url} token={TOKEN}", team=team)
    )
    assert reply.ok, reply.text
    return reply.text


def _offered(fake: FakeOpenAI, n: int = -1) -> set[str]:
    return {t["function"]["name"] for t in fake.requests[n].get("tools") or []}


def _tool_results(fake: FakeOpenAI, n: int = -1) -> list[dict[str, Any]]:
    msgs = fake.requests[n]["messages"]
    return [json.loads(m["content"]) for m in msgs if m["role"] == "tool"]


async def test_install_list_remove_admin_only_per_team(
    make_app: Any, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    app = await _app(make_app)
    refused = await app.handle_command(
        cmd(f"install mcp name=tix url={mcp.url} token={TOKEN}", admin=False)
    )
    assert not refused.ok and "only workspace admins" in refused.text
    assert mcp.headers == []  # a refused install never contacts the server
    done = await _install(app, mcp)
    assert "as `tix`" in done and "`tix_search_tickets`" in done and TOKEN not in done
    assert "token=********" in done
    listed = await app.handle_command(cmd("list", admin=False))
    assert "`tix` (mcp)" in listed.text and "healthy" in listed.text
    assert "unhealthy" not in listed.text
    other = await app.handle_command(cmd("list", team="T2"))
    assert "tix" not in other.text
    clash = await app.handle_command(cmd(f"install mcp name=weather url={mcp.url}"))
    assert not clash.ok and "name of a tool pack" in clash.text
    bad = await app.handle_command(cmd(f"install mcp name=Tix! url={mcp.url}"))
    assert not bad.ok and "name:" in bad.text
    no_remove = await app.handle_command(cmd("remove tix", admin=False))
    assert not no_remove.ok
    gone = await app.handle_command(cmd("remove tix"))
    assert gone.ok and "Removed the `tix`" in gone.text
    assert app.toolboxes.mcp.get(app.toolboxes.provider(_team(), "tix")) is None
    fake_openai.push(text("ok"))
    await say(app, "hello")
    assert not any(n.startswith("tix_") for n in _offered(fake_openai))


def _team(team: str = "T1") -> Any:
    from bot.keys import TeamKey

    return TeamKey("test", team)


async def test_calls_end_to_end_with_schema_validation_and_write_rules(
    make_app: Any, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    app = await _app(make_app)
    await _install(app, mcp)
    fake_openai.push(
        tool_calls(
            [
                ("tix_search_tickets", {"query": "printer", "limit": "2"}),  # "2" coerced
                ("tix_search_tickets", {"limit": 99, "status": "pending", "color": "red"}),
            ]
        ),
        tool_calls([("tix_create_ticket", {"title": "Printer on fire", "priority": 1})]),
        tool_calls([("tix_create_ticket", {"title": "Printer on fire", "priority": 1})]),
        text("Done: two tickets found and T-101 opened."),
    )
    sink = await say(app, "find printer tickets and create one")
    assert sink.final == "Done: two tickets found and T-101 opened."
    offered = _offered(fake_openai, 0)
    assert {"tix_search_tickets", "tix_create_ticket", "remember"} <= offered
    good, bad = _tool_results(fake_openai, 1)
    assert good["ok"] and good["data"]["structured"]["total"] == 2
    assert not bad["ok"] and bad["error"]["type"] == "bad_arguments"
    assert bad["error"]["fields"] == {
        "query": "required",
        "limit": "must be <= 50",
        "status": "must be one of open, closed",
    }  # the server's schema does not forbid other fields: "color" is its business
    assert mcp.calls.count("search_tickets") == 1  # the invalid call never reached the server
    # The write ran once; the model's repeat got the same answer, replayed.
    assert mcp.created == [{"title": "Printer on fire", "priority": 1}]
    first, again = _tool_results(fake_openai, 2)[-1], _tool_results(fake_openai, 3)[-1]
    assert first == again and "T-101" in json.dumps(first)
    # The token reached the server on every request, and the model never saw it.
    assert all(h.get("authorization") == f"Bearer {TOKEN}" for h in mcp.headers)
    assert TOKEN not in json.dumps(fake_openai.requests)


async def test_errors_media_timeout_and_list_changed(
    make_app: Any, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    app = await _app(make_app)
    app.toolboxes.mcp.call_timeout = 0.5
    await _install(app, mcp)
    fake_openai.push(
        tool_calls([("tix_explode", {}), ("tix_chart", {}), ("tix_slow_report", {"seconds": 5})]),
        text("partly done"),
    )
    await say(app, "report please")
    boom, chart, slow = _tool_results(fake_openai, 1)
    assert boom["error"]["type"] == "business_error"
    assert "the ticket database is locked" in boom["error"]["message"]
    assert chart["data"]["text"] == "Open tickets per week"
    assert chart["data"]["attachments"] == [
        "image (image/png, 9 bytes, not shown)",
        "resource link raw.csv <https://t.example/r/1>",
    ]
    assert slow["error"]["type"] == "timeout" and slow["error"]["retryable"]
    assert mcp.calls.count("slow_report") == 3  # read-only: retried (twice) after timeouts

    # The server adds a tool and says so: the next turn offers it.
    fake_openai.push(tool_calls([("tix_add_tool", {})]), text("added"))
    await say(app, "add the tool")
    assert "tix_late_tool" not in _offered(fake_openai)
    fake_openai.push(text("ok"))
    await say(app, "what now?")
    assert "tix_late_tool" in _offered(fake_openai)


async def test_server_down_at_install_and_later(
    make_app: Any, fake_openai: FakeOpenAI, mcp: FakeMcp, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    app = await _app(make_app)
    app.toolboxes.mcp.retry_after = 0.0
    await mcp.stop()
    refused = await app.handle_command(cmd(f"install mcp name=tix url={mcp.url} token={TOKEN}"))
    assert not refused.ok and "could not be reached" in refused.text and "force=yes" in refused.text
    forced = await app.handle_command(
        cmd(f"install mcp name=tix url={mcp.url} token={TOKEN} force=yes")
    )
    assert forced.ok and "installed anyway" in forced.text
    listed = await app.handle_command(cmd("list"))
    assert "unhealthy: the server could not be reached" in listed.text
    fake_openai.push(text("The ticket tools are down right now."))
    await say(app, "find printer tickets")
    request = fake_openai.requests[-1]
    assert not any(n.startswith("tix_") for n in _offered(fake_openai))
    notes = [m["content"] for m in request["messages"] if m["role"] == "system"]
    assert any("`tix` pack are unavailable" in n for n in notes)
    # Back up: offered again and healthy.
    await mcp.start()
    fake_openai.push(text("ok"))
    await say(app, "find printer tickets")
    assert "tix_search_tickets" in _offered(fake_openai)
    assert "healthy" in (await app.handle_command(cmd("list"))).text
    # Down later: calls fail, the breaker opens, the turn after leaves the tools out.
    await mcp.stop()
    fake_openai.push(tool_calls([("tix_search_tickets", {"query": "x"})]), text("down"))
    await say(app, "find x")
    assert _tool_results(fake_openai)[-1]["error"]["type"] == "transient_error"
    listed = await app.handle_command(cmd("list"))
    assert "unhealthy" in listed.text
    logs = caplog.text
    assert TOKEN not in logs and TOKEN not in json.dumps(fake_openai.requests)


async def test_breaker_opens_and_half_opens_for_one_install(
    make_app: Any, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    app = await _app(make_app)
    now = [100.0]
    board = BreakerBoard(BreakerConfig(threshold=2, cooldown=30), clock=lambda: now[0])
    app.toolboxes.breakers = app.toolboxes.executor.breakers = board
    app.toolboxes.mcp.call_timeout = 0.3
    await _install(app, mcp)
    slow = ("tix_slow_report", {"seconds": 5})
    fake_openai.push(tool_calls([slow]), text("slow"))
    await say(app, "report")
    assert mcp.calls.count("slow_report") == 2
    provider = app.toolboxes.provider(_team(), "tix")
    assert board.state(provider) == "open"
    fake_openai.push(tool_calls([slow]), text("still"))
    await say(app, "report")
    assert mcp.calls.count("slow_report") == 2  # failed fast, the server was not called
    assert "temporarily unavailable" in _tool_results(fake_openai)[-1]["error"]["message"]
    assert "breaker open" in (await app.handle_command(cmd("list"))).text
    now[0] += 31  # cool-down over: one probe goes through, it succeeds, the breaker closes
    fake_openai.push(tool_calls([("tix_search_tickets", {"query": "x"})]), text("fine"))
    await say(app, "search")
    result = _tool_results(fake_openai)[-1]
    assert result["ok"], result
    assert board.state(provider) == "closed"


async def test_two_teams_never_see_each_others_servers(
    make_app: Any, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    app = await _app(make_app)
    async with FakeMcp() as other:
        await _install(app, mcp, name="tix", team="T1")
        done = await app.handle_command(cmd(f"install mcp name=ops url={other.url}", team="T2"))
        assert done.ok, done.text
        fake_openai.push(text("a"), text("b"))
        await say(app, "hi", team="T1")
        await say(app, "hi", team="T2")
        t1, t2 = _offered(fake_openai, 0), _offered(fake_openai, 1)
        assert "tix_search_tickets" in t1 and not any(n.startswith("ops_") for n in t1)
        assert "ops_search_tickets" in t2 and not any(n.startswith("tix_") for n in t2)
        # A call named after the other team's tool is unknown here.
        fake_openai.push(tool_calls([("ops_create_ticket", {"title": "x"})]), text("no"))
        await say(app, "open one", team="T1")
        assert _tool_results(fake_openai)[-1]["error"]["type"] == "unknown_tool"
        assert other.created == [] and other.calls == []


async def test_wrong_token_and_sealed_at_rest(
    make_app: Any, fake_openai: FakeOpenAI, mcp: FakeMcp, tmp_path: Any
) -> None:
    app = await _app(make_app, bot_secret_key="a passphrase of sixteen+ chars")
    wrong = await app.handle_command(cmd(f"install mcp name=tix url={mcp.url} token=nope"))
    assert not wrong.ok and "refused the bot's credentials (HTTP 401)" in wrong.text
    await _install(app, mcp)
    [install] = await app.store.installed(_team())
    assert install.config["token"].startswith("enc:v1:") and install.config["pack"] == "mcp"
    raw = b"".join(p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file())
    assert TOKEN.encode() not in raw
