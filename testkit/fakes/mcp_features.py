"""A real MCP server for the client-feature tests: the `mcp` SDK's own `MCPServer` over
streamable HTTP on loopback (uvicorn), with tools that exercise what a modern client must handle.

- `forecast` returns structured content only (no text), matching its declared output schema;
- `bad_forecast` declares the same schema and returns a value that breaks it;
- `no_structure` declares the schema and returns only text;
- `long_job(seconds, every)` reports progress every `every` seconds for `seconds` seconds;
- `silent_job(seconds)` says nothing for `seconds` seconds;
- `ask_size` asks the person for a value through form elicitation;
- `grow` adds a tool and announces that the tool list changed.

`listings` counts `tools/list` requests the server answered; `cache_ttl_ms` (when set) is the
`ttlMs` freshness hint the server puts on its tool listing (2026-07-28 caching).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, Tool, ToolAnnotations
from pydantic import BaseModel

from testkit.fakes.asgi_server import LoopbackAsgi

READ_ONLY = ToolAnnotations(read_only_hint=True)


class Size(BaseModel):
    size: str


FORECAST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "high": {"type": "integer", "description": "Degrees Celsius"},
        "sky": {"type": "string", "enum": ["sun", "cloud", "rain"]},
    },
    "required": ["city", "high", "sky"],
}


class _Declaring(MCPServer):
    """Lists the output schema of the tools that return `CallToolResult` themselves (the SDK
    advertises none for those): the server's contract, whether or not its answers keep it."""

    async def list_tools(self) -> list[Tool]:
        tools = await super().list_tools()
        schemas = {"forecast", "bad_forecast", "no_structure"}
        return [
            t.model_copy(update={"output_schema": FORECAST_SCHEMA}) if t.name in schemas else t
            for t in tools
        ]


@dataclass
class FeatureMcp:
    cache_ttl_ms: int | None = None
    port: int = 0
    calls: list[str] = field(default_factory=list)
    listings: int = 0
    progress_sent: int = 0
    job_started: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._serving = LoopbackAsgi()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def build(self) -> MCPServer:
        hints = {"tools/list": CacheHint(ttl_ms=self.cache_ttl_ms)} if self.cache_ttl_ms else None
        mcp = _Declaring("features", cache_hints=hints)  # type: ignore[arg-type]
        state = self

        @mcp.tool(annotations=READ_ONLY)
        def forecast(city: str) -> CallToolResult:
            """Tomorrow's weather for a city."""
            state.calls.append("forecast")
            return CallToolResult(
                content=[], structured_content={"city": city, "high": 21, "sky": "sun"}
            )

        @mcp.tool(annotations=READ_ONLY)
        def bad_forecast(city: str) -> CallToolResult:
            """Tomorrow's weather for a city (a broken server)."""
            state.calls.append("bad_forecast")
            return CallToolResult(
                content=[], structured_content={"city": city, "high": "warm", "sky": "snow"}
            )

        @mcp.tool(annotations=READ_ONLY)
        def no_structure(city: str) -> CallToolResult:
            """Tomorrow's weather for a city (text only)."""
            state.calls.append("no_structure")
            return CallToolResult(content=[TextContent(type="text", text=f"{city}: sunny, 21")])

        @mcp.tool(annotations=READ_ONLY)
        async def long_job(seconds: float, every: float, ctx: Context) -> str:
            """A long export that reports progress."""
            state.calls.append("long_job")
            state.job_started.set()
            loop = asyncio.get_running_loop()
            end = loop.time() + seconds
            step = 0
            while loop.time() < end:
                step += 1
                await ctx.report_progress(step, None, "exporting")
                state.progress_sent += 1
                await asyncio.sleep(every)
            return "export done"

        @mcp.tool(annotations=READ_ONLY)
        async def silent_job(seconds: float) -> str:
            """A long job that says nothing while it runs."""
            state.calls.append("silent_job")
            state.job_started.set()
            await asyncio.sleep(seconds)
            return "job done"

        @mcp.tool()
        async def ask_size(ctx: Context) -> str:
            """Asks the person for a T-shirt size (form elicitation), then orders it."""
            state.calls.append("ask_size")
            answer = await ctx.elicit("Which size?", Size)
            return f"ordered {answer.action}"

        @mcp.tool()
        async def grow(ctx: Context) -> str:
            """Adds a tool (the list changes)."""

            def grown(word: str) -> str:
                """A tool that appeared later."""
                return word.upper()

            if "grown" not in {t.name for t in await mcp.list_tools()}:
                mcp.add_tool(grown)
            await ctx.notify_tools_changed()
            return "added"

        return mcp

    def _asgi(self, mcp: MCPServer) -> Any:
        app = mcp.streamable_http_app()
        state = self

        async def counting(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["method"] != "POST":
                await app(scope, receive, send)
                return
            body = bytearray()
            more = True
            while more:
                message = await receive()
                body.extend(message.get("body", b""))
                more = message.get("more_body", False)
            if b'"tools/list"' in body:
                state.listings += 1
            sent = False

            async def replay() -> dict[str, Any]:
                nonlocal sent
                if sent:
                    return await receive()
                sent = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}

            await app(scope, replay, send)

        return counting

    async def start(self) -> FeatureMcp:
        self.port = self._serving.bind(self.port)
        await self._serving.serve(self._asgi(self.build()))
        return self

    async def stop(self) -> None:
        await self._serving.stop()

    async def __aenter__(self) -> FeatureMcp:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
