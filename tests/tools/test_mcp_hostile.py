"""A hostile MCP server (issue 20, round two): payloads far larger than any real tool sends, a
schema that points at a remote document or backtracks for ever, a tool with a non-object schema,
a server that hangs. The server is the SDK's own `MCPServer` in another process
(`tests/tools/hostile_mcp.py`), the client is the bot's (pool, pack, executor, the real SDK), and
each case checks the bot's event loop kept running (a ticker's lag) and what memory it took.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from bot.app import BotApp
from bot.core import CommandRequest
from testkit.fakes.openai_server import FakeOpenAI, text
from tests.helpers import say
from tools.executor import ExecutorConfig, ToolExecutor
from tools.mcp.connection import McpPool, ServerDown
from tools.mcp.pack import MCP_PACK
from tools.mcp.schema import checker
from tools.packs.base import PackEnv
from tools.registry import ToolRegistry
from tools.types import ToolCallRequest, ToolContext

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
# Generous (CI runs at load 6 on 2 cores); before the fix, with tracemalloc on as here: 6.8 s
# (100,000 parts), 6.6 s (20 MB structured), 1.5 s (5,000 tools), 2.3 s (pattern at 25 chars).
LAG_BOUND = 1.0
MEMORY_BOUND = 40 * 2**20  # bytes of Python allocations: the issue measured +150 to +400 MB


@dataclass
class Hostile:
    url: str
    control: str

    def set(self, **values: Any) -> dict[str, int]:
        reply = httpx.post(self.control, json=values, timeout=30)
        reply.raise_for_status()
        counts: dict[str, int] = reply.json()
        return counts

    def counts(self) -> dict[str, int]:
        reply = httpx.get(self.control, timeout=30)
        reply.raise_for_status()
        counts: dict[str, int] = reply.json()
        return counts


class Canary:
    """A loopback HTTP server that notes every request (the remote `$ref`'s target)."""

    def __init__(self) -> None:
        hits: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                body = b'{"type": "string"}'
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self.hits = hits
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/schema.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def canary() -> Iterator[Canary]:
    c = Canary()
    yield c
    c.close()


def _start(mode: list[str], canary: Canary) -> tuple[subprocess.Popen[bytes], Hostile]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.tools.hostile_mcp", *mode, "--ref", canary.url],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    assert line.startswith("PORT "), line
    base = f"http://127.0.0.1:{int(line.split()[1])}"
    return proc, Hostile(f"{base}/mcp", f"{base}/control")


@pytest.fixture(scope="module", params=["json", "sse"])
def hostile(request: pytest.FixtureRequest, canary: Canary) -> Iterator[Hostile]:
    """The hostile server, answering with JSON bodies or with server-sent events."""
    proc, server = _start(["--json"] if request.param == "json" else [], canary)
    yield server
    proc.kill()  # uvicorn's graceful stop would wait for the requests left hanging
    proc.wait(timeout=30)


@pytest.fixture
def fresh(hostile: Hostile) -> Hostile:
    hostile.set(filler=0, filler_bytes=100, hang=False, bad_schema=True)
    return hostile


@dataclass
class Bot:
    pool: McpPool
    env: PackEnv
    executor: ToolExecutor
    url: str
    calls: int = 0

    async def tools(self, name: str = "h") -> ToolRegistry:
        return ToolRegistry(
            await MCP_PACK.build_async({"name": name, "url": self.url}, self.env, name)
        )

    async def call(self, registry: ToolRegistry, tool: str, args: dict[str, Any]) -> Any:
        self.calls += 1
        ctx = ToolContext(session_id="slack:T1:C1:1.1", speaker_id="slack:T1:U1", team_id="T1")
        request = ToolCallRequest(f"c{self.calls}", tool, json.dumps(args))
        (record,) = await self.executor.execute([request], ctx, registry)
        return json.loads(record.content)


@pytest.fixture
async def bot(fresh: Hostile) -> AsyncIterator[Bot]:
    async with httpx.AsyncClient() as http:
        pool = McpPool(connect_timeout=30, call_timeout=60)
        executor = ToolExecutor(ExecutorConfig(backoff_base=0.0))
        yield Bot(pool, PackEnv(http=http, mcp=pool), executor, fresh.url)
        await pool.aclose()


@dataclass
class Cost:
    lag: float  # the longest the event loop was late for a 10 ms tick
    peak: int  # peak bytes of Python allocations while it ran
    seconds: float


async def costed(work: Callable[[], Awaitable[T]]) -> tuple[T, Cost]:
    """Run `work` while a ticker measures the loop's lag and tracemalloc the memory peak."""
    lags: list[float] = []

    async def tick() -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - t - 0.01)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        result = await work()
    finally:
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        await asyncio.sleep(0.05)  # the ticker notes a stall that ended with the work
        ticker.cancel()
    return result, Cost(max(lags), peak, seconds)


def _bounded(cost: Cost) -> None:
    assert cost.lag < LAG_BOUND, cost
    assert cost.peak < MEMORY_BOUND, cost


# --- payloads ---------------------------------------------------------------------------------


async def test_100000_content_parts(bot: Bot) -> None:
    tools = await bot.tools()
    result, cost = await costed(lambda: bot.call(tools, "h_parts", {"n": 100_000}))
    _bounded(cost)
    assert result["ok"], result
    shown = json.dumps(result["data"])
    assert "p0" in shown and "99900 more content parts not shown" in shown


async def test_20_mb_structured_result_is_refused_as_too_large(bot: Bot) -> None:
    tools = await bot.tools()
    result, cost = await costed(lambda: bot.call(tools, "h_blob", {"mb": 20}))
    _bounded(cost)
    assert not result["ok"] and result["error"]["type"] == "business_error", result
    assert "too large" in result["error"]["message"]
    # The session survived: the next call is answered.
    again = await bot.call(tools, "h_parts", {"n": 2})
    assert again["ok"] and "p1" in json.dumps(again["data"])


async def test_large_structured_result_under_the_cap_is_shrunk(bot: Bot) -> None:
    tools = await bot.tools()
    result, cost = await costed(lambda: bot.call(tools, "h_blob", {"mb": 1.5}))
    _bounded(cost)
    assert result["ok"], result
    assert result["truncated"] and len(json.dumps(result)) < 8_000


async def test_5000_tool_listing(fresh: Hostile, bot: Bot) -> None:
    fresh.set(filler=5000, filler_bytes=100)
    tools, cost = await costed(lambda: bot.tools("big"))
    _bounded(cost)
    assert 100 <= len(tools) <= 128  # the first tools the server listed, capped
    assert "big_parts" in tools.names()


async def test_80_mb_listing(fresh: Hostile, bot: Bot, caplog: pytest.LogCaptureFixture) -> None:
    fresh.set(filler=2000, filler_bytes=40_000)
    caplog.set_level(logging.WARNING, "tools.mcp")

    async def build() -> str:
        try:
            await bot.tools("huge")
        except Exception as exc:
            return str(exc)
        return "built"

    outcome, cost = await costed(build)
    _bounded(cost)
    assert "too large" in outcome
    assert any(r.getMessage() == "mcp_server_down" for r in caplog.records)


# --- schemas ----------------------------------------------------------------------------------


async def test_pattern_that_backtracks_is_bounded(bot: Bot) -> None:
    tools = await bot.tools()
    ok = await bot.call(tools, "h_echo", {"word": "aaaa"})
    assert ok["ok"], ok
    result, cost = await costed(lambda: bot.call(tools, "h_echo", {"word": "a" * 40 + "b"}))
    assert cost.lag < LAG_BOUND and cost.seconds < 5, cost  # `re` would take days at 40
    assert result["error"]["type"] == "bad_arguments"
    assert "word" in result["error"]["fields"]


async def test_remote_ref_is_never_fetched(
    bot: Bot, canary: Canary, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "tools.mcp")
    tools = await bot.tools()
    assert "h_fetch_ref" not in tools.names() and "h_parts" in tools.names()
    assert any(
        "another document" in str(getattr(r, "fields", {}).get("reason", ""))
        for r in caplog.records
    )
    # Even a schema that reached the validator with a remote reference fetches nothing.
    check = checker({"type": "object", "properties": {"doc": {"$ref": canary.url}}})
    _, problems = check({"doc": "x"})
    assert problems == {"arguments": "cannot be checked (the tool's schema has a broken $ref)"}
    # Positive signal first (the listing was built, the check answered); then: no request.
    assert canary.hits == []


async def test_non_object_schema_drops_only_that_tool(
    bot: Bot, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "tools.mcp")
    tools = await bot.tools()
    assert "h_not_an_object" not in tools.names()
    assert {"h_parts", "h_echo", "h_blob"} <= set(tools.names())
    skipped = [
        getattr(r, "fields", {}) for r in caplog.records if r.getMessage() == "mcp_tool_skipped"
    ]
    assert {
        "install": "h",
        "tool": "not_an_object",
        "reason": "input schema is not an object schema",
    } in skipped


# --- a hung server, through the whole bot -----------------------------------------------------


def _cmd(text: str) -> CommandRequest:
    return CommandRequest("test", "T1", "C1", "U1", "tools", text, is_platform_admin=True)


async def test_hung_server_costs_one_wait_not_every_turn(
    make_app: Any, fake_openai: FakeOpenAI, fresh: Hostile
) -> None:
    app: BotApp = await make_app()
    app.toolboxes.build_timeout = 3.0  # the turn's deadline comes before the connect timeout
    fresh.set(hang=True)
    before = fresh.counts()["hung"]
    forced = await app.handle_command(_cmd(f"install mcp name=hung url={fresh.url} force=yes"))
    assert forced.ok and "did not answer in time" in forced.text, forced.text
    tried = fresh.counts()["hung"]
    assert tried > before  # the install's probe did try the server (and waited 3 s)
    fake_openai.push(text("The ticket tools are down."))
    started = time.perf_counter()
    await say(app, "find tickets")
    took = time.perf_counter() - started
    # Positive signal: the turn was answered, telling the model the tools are unavailable...
    notes = [m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "system"]
    assert any("`hung` pack are unavailable" in n for n in notes)
    # ... and the hung server was not tried again, nor waited for.
    assert fresh.counts()["hung"] == tried
    assert took < app.toolboxes.build_timeout, took


async def test_descriptions_reach_the_model_marked_as_the_servers(
    make_app: Any, fake_openai: FakeOpenAI, fresh: Hostile
) -> None:
    app: BotApp = await make_app()
    installed = await app.handle_command(_cmd(f"install mcp name=hx url={fresh.url}"))
    assert installed.ok, installed.text
    fake_openai.push(text("ok"))
    await say(app, "echo some a's please")
    request = fake_openai.requests[-1]
    offered = {t["function"]["name"]: t["function"] for t in request.get("tools") or []}
    description = offered["hx_echo"]["description"]
    assert description == "Description from MCP server hx: “Echo a word of a's.”"


async def test_listing_that_hangs_marks_the_server_down(fresh: Hostile) -> None:
    pool = McpPool(ttl=0.0, connect_timeout=30)  # every build lists again
    try:
        conn = pool.connection("slow", fresh.url, None)
        assert {t.name for t in await conn.tools()} >= {"parts", "echo"}
        fresh.set(hang=True)
        tried = fresh.counts()["hung"]
        # A TTL alone runs out: the turn gets the list it has, the listing runs behind it.
        assert {t.name for t in await conn.tools()} >= {"parts", "echo"}
        conn.mark_stale()  # a listing the turn waits for (a change notice, a token to refresh)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1.0):  # the toolbox's deadline, before the list timeout
                await conn.tools()
        hung = fresh.counts()["hung"]
        assert hung > tried and conn.health == "down"
        with pytest.raises(ServerDown):
            async with asyncio.timeout(5.0):  # (before the fix: it waited on the server again)
                await conn.tools()  # at once: not tried again within the retry wait
        assert fresh.counts()["hung"] == hung
    finally:
        fresh.set(hang=False)
        await pool.aclose()
