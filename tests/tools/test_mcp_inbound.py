"""The layer under the MCP SDK (`tools.mcp.inbound`, `tools.mcp.trim`): byte caps, trimming and
server-sent-event framing, through a real httpx2 client against real loopback servers that
answer the way a broken or hostile MCP server might."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from aiohttp import web

from tools.mcp import inbound
from tools.mcp.inbound import TOO_LARGE, BoundedTransport
from tools.mcp.trim import MAX_PARTS, MAX_TOOLS, trim_message

REQUEST = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "x"}}


def _client(cap: int = 4096) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=BoundedTransport(httpx2.AsyncHTTPTransport(), "t", cap=cap))


def test_output_schemas_are_kept_bounded_and_the_servers_own_markers_dropped() -> None:
    """A server cannot plant the bot's markers: its `_meta` copies are removed, an over-large
    output schema is not kept (one log line), and only the trimming marks a shortened result."""
    tools: list[Any] = [
        {
            "name": "sly",
            "inputSchema": {"type": "object"},
            "_meta": {"bot.local/outputSchema": {"type": "object"}, "x": 1},
        },
        {
            "name": "huge",
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object", "description": "x" * 20_000},
        },
    ]
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}).encode()
    out, notes = trim_message(body)
    sly, huge = json.loads(out)["result"]["tools"]
    assert sly["_meta"] == {"x": 1} and "_meta" not in huge and "outputSchema" not in huge
    assert (
        "mcp_output_schema_unchecked",
        {"tool": "huge", "reason": "output schema too large"},
    ) in notes
    small = {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {
            "content": [],
            "structuredContent": {"a": 1},
            "_meta": {"bot.local/shrunk": True},
        },
    }
    result = json.loads(trim_message(json.dumps(small).encode())[0])["result"]
    assert result["_meta"] == {}
    big = {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"content": [], "structuredContent": {"rows": ["r" * 100] * 1000}},
    }
    result = json.loads(trim_message(json.dumps(big).encode())[0])["result"]
    assert result["_meta"] == {"bot.local/shrunk": True}


def test_listing_drops_bad_tools_alone_and_caps_the_count() -> None:
    tools: list[Any] = [
        {"name": "ok", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}},
        {"name": "str", "inputSchema": {"type": "string"}},
        {"name": "list", "inputSchema": [1, 2]},
        {"inputSchema": {"type": "object"}},
        {"name": "fat", "inputSchema": {"type": "object", "description": "x" * 20_000}},
        *({"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(500)),
    ]
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}).encode()
    out, notes = trim_message(body)
    kept = json.loads(out)["result"]["tools"]
    assert len(kept) == MAX_TOOLS
    # The output schema is out of the SDK's sight, kept where only the bot's check reads it.
    assert kept[0] == {
        "name": "ok",
        "inputSchema": {"type": "object"},
        "_meta": {"bot.local/outputSchema": {"type": "object"}},
    }
    assert [t["name"] for t in kept[1:3]] == ["t0", "t1"]
    skipped = {f["tool"] for e, f in notes if e == "mcp_tool_skipped"}
    assert skipped == {"str", "list", "None", "fat"}
    assert ("mcp_listing_trimmed", {"listed": len(tools), "kept": MAX_TOOLS}) in notes


def test_result_keeps_the_first_parts_and_shrinks_large_structured_content() -> None:
    rows = [{"id": i, "name": "n" * 3000} for i in range(200)]
    result = {
        "content": [
            {"type": "text", "text": json.dumps({"rows": rows})},
            *({"type": "text", "text": f"p{i}"} for i in range(1000)),
        ],
        "structuredContent": {"rows": rows},
    }
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode()
    out, _ = trim_message(body)
    trimmed = json.loads(out)["result"]
    texts = [p["text"] for p in trimmed["content"]]
    assert texts[0] == "p0"  # the server's JSON copy of the structured data: not twice
    assert len(texts) == MAX_PARTS
    assert texts[-1] == f"({1001 - MAX_PARTS} more content parts not shown)"
    shown = trimmed["structuredContent"]["rows"]
    assert len(shown) == 65 and shown[-1] == "… 136 more items omitted"
    assert len(out) < 300_000


def test_not_json_passes_unchanged() -> None:
    assert trim_message(b"{not json") == (b"{not json", [])


async def test_json_body_over_the_cap_is_not_read(serve_app: Callable[..., Any]) -> None:
    sent: list[int] = []

    async def big(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "application/json"})
        await resp.prepare(request)
        try:
            for _ in range(100_000):  # 100 MB, undeclared
                await resp.write(b" " * 1024)
                sent.append(1)
        except (ConnectionError, RuntimeError):
            pass
        return resp

    app = web.Application()
    app.router.add_post("/mcp", big)
    async with serve_app(app) as base, _client() as client:
        reply = await client.post(f"{base}/mcp", json=REQUEST)
    error = reply.json()
    assert reply.status_code == 200
    assert error["id"] == 7 and error["error"]["code"] == TOO_LARGE
    assert "too large" in error["error"]["message"]
    assert len(sent) < 100_000  # the bot hung up instead of reading it all


async def test_compressed_body_is_refused(serve_app: Callable[..., Any]) -> None:
    async def bomb(request: web.Request) -> web.Response:
        body = gzip.compress(b'{"jsonrpc":"2.0","id":7,"result":{"content":[]}}' + b" " * 10**6)
        return web.Response(
            body=body,
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )

    app = web.Application()
    app.router.add_post("/mcp", bomb)
    async with serve_app(app) as base, _client(cap=10**7) as client:
        reply = await client.post(f"{base}/mcp", json=REQUEST)
    assert reply.json()["error"]["code"] == TOO_LARGE


async def test_server_sent_events_are_reframed_and_bounded(serve_app: Callable[..., Any]) -> None:
    parts = [{"type": "text", "text": f"p{i}"} for i in range(1000)]  # ~30 KB
    event = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": parts}}).encode()
    stream = (
        b": a comment\r\nevent: message\r\nid: 1\r\ndata: "
        + event
        + b"\r\n\r\n"
        + b"event: message\ndata: "
        + b"x" * 100_000  # one event over the cap: not read
        + b"\n\n"
    )

    async def sse(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(0, len(stream), 7):  # chunk boundaries anywhere, even inside "\r\n"
            await resp.write(stream[i : i + 7])
        return resp

    app = web.Application()
    app.router.add_post("/mcp", sse)
    async with serve_app(app) as base, _client(cap=60_000) as client:
        reply = await client.post(f"{base}/mcp", json=REQUEST)
    events = [e for e in reply.text.split("\n\n") if e]
    first = dict(line.split(": ", 1) for line in events[0].split("\n"))
    assert first["event"] == "message" and first["id"] == "1"
    assert len(json.loads(first["data"])["result"]["content"]) == MAX_PARTS + 1
    last = json.loads(events[1].split("data: ", 1)[1])
    assert last["id"] == 7 and last["error"]["code"] == TOO_LARGE
    assert len(events) == 2


async def test_large_message_is_trimmed_in_a_worker_process_and_refused_if_it_dies(
    serve_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = [{"type": "text", "text": f"p{i}"} for i in range(20_000)]  # ~600 KB
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": parts}}).encode()
    assert len(body) > inbound.PROCESS_ABOVE

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/mcp", answer)
    async with serve_app(app) as base, _client(cap=10**7) as client:
        reply = await client.post(f"{base}/mcp", json=REQUEST)
        assert len(reply.json()["result"]["content"]) == MAX_PARTS + 1
        monkeypatch.setattr(inbound, "WORKER_MEMORY", 8 * 2**20)  # too little to even start
        refused = await client.post(f"{base}/mcp", json=REQUEST)
    assert refused.json()["error"]["code"] == TOO_LARGE
    assert "could not be read" in refused.json()["error"]["message"]
