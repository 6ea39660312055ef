"""A real MCP server for the tests: the `mcp` SDK's own `MCPServer` over streamable HTTP on
loopback (uvicorn), with the kinds of tools a team's ticket system would expose.

- `search_tickets` (read-only, typed inputs with an enum and a bounded integer),
- `create_ticket` (a write: counts how often it really ran; calls whose title is in
  `held_titles` wait for `writes_released` first, so a test can kill a client mid-write),
- `slow_report` (sleeps as long as asked),
- `explode` (fails: an error result),
- `chart` (returns an image and a resource link),
- `add_tool` (adds `late_tool` and announces that the tool list changed).

With `token=...` every HTTP request must carry `Authorization: Bearer <token>` or gets 401 (an
ASGI layer in front of the SDK's app). `stop()` and `start()` take the server down and back up
on the same port; `headers` records what each request carried (to check the token was sent, and
sent nowhere else).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent, ResourceLink, TextContent, ToolAnnotations
from pydantic import Field

from testkit.fakes.asgi_server import LoopbackAsgi

READ_ONLY = ToolAnnotations(read_only_hint=True)


@dataclass
class FakeMcp:
    token: str | None = None
    port: int = 0
    created: list[dict[str, Any]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    report_started: asyncio.Event = field(default_factory=asyncio.Event)
    held_titles: set[str] = field(default_factory=set)
    writes_released: asyncio.Event = field(default_factory=asyncio.Event)
    started: list[dict[str, Any]] = field(default_factory=list)  # create_ticket calls begun

    def __post_init__(self) -> None:
        self._serving = LoopbackAsgi()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def build(self) -> MCPServer:
        mcp = MCPServer("tickets")
        state = self

        @mcp.tool(annotations=READ_ONLY)
        def search_tickets(
            query: Annotated[str, Field(description="Words to look for", min_length=1)],
            status: Literal["open", "closed"] = "open",
            limit: Annotated[int, Field(ge=1, le=50)] = 5,
        ) -> dict[str, Any]:
            """Search the team's support tickets by text and status."""
            state.calls.append("search_tickets")
            hits = [
                {"id": f"T-{i}", "title": f"{query} #{i}", "status": status} for i in range(limit)
            ]
            return {"tickets": hits, "total": limit}

        @mcp.tool()
        async def create_ticket(
            title: Annotated[str, Field(description="One-line summary")],
            priority: Annotated[int, Field(ge=1, le=4, description="1 urgent .. 4 low")] = 3,
        ) -> str:
            """Open a new support ticket."""
            state.calls.append("create_ticket")
            state.started.append({"title": title, "priority": priority})
            if title in state.held_titles:
                await state.writes_released.wait()
            state.created.append({"title": title, "priority": priority})
            return f"Created ticket T-{100 + len(state.created)}"

        @mcp.tool(annotations=READ_ONLY)
        async def slow_report(seconds: float) -> str:
            """Build the weekly report (slow)."""
            state.calls.append("slow_report")
            state.report_started.set()
            await asyncio.sleep(seconds)
            return "report ready"

        @mcp.tool(annotations=READ_ONLY)
        def explode() -> str:
            """Always fails."""
            state.calls.append("explode")
            raise ToolError("the ticket database is locked")

        @mcp.tool(annotations=READ_ONLY, structured_output=False)
        def chart() -> list[Any]:
            """A chart of open tickets."""
            return [
                TextContent(type="text", text="Open tickets per week"),
                ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png"),
                ResourceLink(type="resource_link", uri="https://t.example/r/1", name="raw.csv"),
            ]

        @mcp.tool()
        async def add_tool(ctx: Context) -> str:
            """Adds another tool (the list changes)."""

            def late_tool(word: str) -> str:
                """A tool that appeared later."""
                return word.upper()

            if "late_tool" not in {t.name for t in await mcp.list_tools()}:
                mcp.add_tool(late_tool)
            await ctx.notify_tools_changed()
            try:
                await ctx.request_context.session.send_tool_list_changed()
            except Exception:
                pass  # 2026-era connection: the listen stream above carries it
            return "added"

        return mcp

    def _asgi(self, mcp: MCPServer) -> Any:
        app = mcp.streamable_http_app()
        token = self.token
        seen = self.headers

        async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
                seen.append(headers)
                if token is not None and headers.get("authorization") != f"Bearer {token}":
                    await send({"type": "http.response.start", "status": 401, "headers": []})
                    await send({"type": "http.response.body", "body": b"unauthorized"})
                    return
            await app(scope, receive, send)

        return guarded

    async def start(self) -> FakeMcp:
        self.port = self._serving.bind(self.port)
        await self._serving.serve(self._asgi(self.build()))
        return self

    async def stop(self) -> None:
        await self._serving.stop()

    async def __aenter__(self) -> FakeMcp:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
