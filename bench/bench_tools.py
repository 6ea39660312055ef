"""Tool packs II figures: the executor's overhead on an MCP call, and tool-selection recall.

1. MCP overhead. A real MCP server (the SDK's MCPServer over streamable HTTP, uvicorn on
   loopback) with one read-only tool; calls go through the bot's executor and pooled session
   (tools.mcp). For each call, the time spent inside the SDK's `call_tool` (the HTTP round trip
   plus everything the server does) is subtracted from the executor's whole call time: what is
   left is our own overhead (argument check against the server's schema, breaker, dispatch,
   result rendering, envelope, trimming). Prints p50/p99 of both.
2. Selection. `bench/tool_selection_set.py` (44 tools, 66 requests, written before tuning):
   how often the needed tool is among those offered (and, separately, on the 30 requests of
   `bench/tool_selection_fresh.py`, written after the related-words vocabulary and never tuned
   on), lexical only and with the local embedder
   (BOT_EMBEDDING_MODEL=local, the `embeddings` extra) when installed, and the tokens of the
   offered schemas against offering all 44 (counted with tiktoken).

Run: python bench/bench_tools.py [--calls N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

from bench.report import (
    Figure,
    add_json_option,
    at_least,
    info,
    print_figures,
    skipped,
    write_json,
)
from bench.tool_selection_fresh import FRESH_REQUESTS
from bench.tool_selection_set import REQUESTS, TOOLS
from bot.tokens import TokenCounter
from tools.executor import ExecutorConfig, ToolExecutor
from tools.mcp import connection as mcp_connection
from tools.mcp.connection import McpPool
from tools.mcp.pack import MCP_PACK
from tools.packs import PackEnv
from tools.registry import ToolRegistry
from tools.selection import SelectionConfig, ToolSelector
from tools.types import ToolCallRequest, ToolContext


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def bench_mcp(calls: int) -> dict[str, float]:
    server = MCPServer("bench", log_level="CRITICAL")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup(order_id: str, include_items: bool = True, limit: int = 5) -> dict[str, Any]:
        """Look up an order."""
        return {"order_id": order_id, "status": "shipped", "items": list(range(limit))}

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = server.streamable_http_app()
    srv = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="on"))
    task = asyncio.create_task(srv.serve(sockets=[sock]))
    while not srv.started:  # noqa: ASYNC110 (uvicorn offers no event for it)
        await asyncio.sleep(0.01)

    inner: list[float] = []
    original = mcp_connection.McpConnection.call

    async def timed(self: Any, name: str, arguments: dict[str, Any]) -> Any:
        started = time.perf_counter()
        try:
            return await original(self, name, arguments)
        finally:
            inner.append(time.perf_counter() - started)

    mcp_connection.McpConnection.call = timed  # type: ignore[method-assign]
    pool = McpPool()
    async with httpx.AsyncClient() as http:
        env = PackEnv(http=http, mcp=pool)
        config = {"name": "shop", "url": f"http://127.0.0.1:{port}/mcp"}
        tools = await MCP_PACK.build_async(config, env, "bench/shop")
        registry = ToolRegistry(tools)
        executor = ToolExecutor(ExecutorConfig())
        ctx = ToolContext(session_id="bench:s", speaker_id="bench:u", team_id="bench")
        args = json.dumps({"order_id": "#W1", "include_items": "true", "limit": "3"})
        totals: list[float] = []
        for n in range(calls + 20):
            request = [ToolCallRequest(f"c{n}", "shop_lookup", args)]
            started = time.perf_counter()
            [record] = await executor.execute(request, ctx, registry)
            elapsed = time.perf_counter() - started
            assert record.outcome == "ok", record.content
            if n >= 20:  # warm-up: the first calls open the session
                totals.append(elapsed)
        inner = inner[20:]
        await pool.aclose()
    mcp_connection.McpConnection.call = original  # type: ignore[method-assign]
    srv.should_exit = True
    await task
    overhead = [(t - i) * 1000 for t, i in zip(totals, inner, strict=True)]
    round_trip = [i * 1000 for i in inner]
    return {
        "calls": len(overhead),
        "overhead_p50_ms": round(statistics.median(overhead), 3),
        "overhead_p99_ms": round(_pct(overhead, 99), 3),
        "sdk_round_trip_p50_ms": round(statistics.median(round_trip), 3),
        "sdk_round_trip_p99_ms": round(_pct(round_trip, 99), 3),
    }


async def bench_selection(offer: int) -> dict[str, Any]:
    counter = TokenCounter("gpt-4o-mini")
    all_tokens = counter.tools(TOOLS)
    by_name = {t["function"]["name"]: t for t in TOOLS}
    embedders: list[tuple[str, Any]] = [("lexical", None)]
    out: dict[str, Any] = {"tools": len(TOOLS), "requests": len(REQUESTS), "offer": offer}
    try:
        from bot.embeddings.local import LocalEmbedder, model_files

        model_files()  # raises, saying what is missing, without the `embeddings` extra
        embedders.append(("lexical+local embedder", LocalEmbedder()))
    except Exception as exc:
        out["embedder_unavailable"] = str(exc) or type(exc).__name__
    for label, embedder in embedders:
        selector = ToolSelector(
            SelectionConfig(offer=offer), embed=embedder.embed if embedder is not None else None
        )
        hits, tokens, misses, took = 0, [], [], []
        for text, needed, earlier in REQUESTS:
            started = time.perf_counter()
            names = await selector.choose(TOOLS, text, earlier, always={"remember"})
            took.append((time.perf_counter() - started) * 1000)
            hits += needed in names
            if needed not in names:
                misses.append(f"{text!r} -> {needed}")
            tokens.append(counter.tools([by_name[n] for n in names]))
        out[label] = {
            "recall": round(hits / len(REQUESTS), 4),
            "offered_tokens_mean": round(statistics.mean(tokens), 1),
            "all_tools_tokens": all_tokens,
            "token_saving": round(1 - statistics.mean(tokens) / all_tokens, 4),
            "select_ms_p50": round(statistics.median(took), 3),
            "misses": misses,
        }
        fresh_hits = 0
        for text, needed, earlier in FRESH_REQUESTS:
            names = await selector.choose(TOOLS, text, earlier, always={"remember"})
            fresh_hits += needed in names
            if needed not in names:
                misses.append(f"(held-out) {text!r} -> {needed}")
        out[label]["held_out_recall"] = round(fresh_hits / len(FRESH_REQUESTS), 4)
    return out


RECALL_TARGET = 95.0  # % of requests whose needed tool is offered (issue 11)


def figures(mcp: dict[str, float], selection: dict[str, Any]) -> list[Figure]:
    out = [
        info("MCP call: executor overhead p50", mcp["overhead_p50_ms"], "ms"),
        info("MCP call: executor overhead p99", mcp["overhead_p99_ms"], "ms"),
        info("MCP call: SDK call_tool round trip p50", mcp["sdk_round_trip_p50_ms"], "ms"),
    ]
    for label in ("lexical", "lexical+local embedder"):
        name = f"tool selection recall, {label}"
        if label not in selection:
            why = selection.get("embedder_unavailable", "not run")
            out.append(skipped(name, f"≥ {RECALL_TARGET:g} %", why))
            continue
        r = selection[label]
        out.append(at_least(name, round(r["recall"] * 100, 1), RECALL_TARGET, "%"))
        out.append(info(f"{name}, held-out set", round(r["held_out_recall"] * 100, 1), "%"))
        out.append(info(f"schema tokens saved, {label}", round(r["token_saving"] * 100, 1), "%"))
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--offer", type=int, default=8)
    add_json_option(parser)
    args = parser.parse_args()
    mcp = await bench_mcp(args.calls)
    selection = await bench_selection(args.offer)
    found = figures(mcp, selection)
    write_json(args.json, "tools", found, {"mcp": mcp, "selection": selection})
    print(f"MCP call through the executor ({mcp['calls']} calls, loopback server):")
    print(
        f"  executor overhead per call: p50 {mcp['overhead_p50_ms']} ms, "
        f"p99 {mcp['overhead_p99_ms']} ms"
    )
    print(
        f"  SDK call_tool round trip (server included): p50 {mcp['sdk_round_trip_p50_ms']} ms, "
        f"p99 {mcp['sdk_round_trip_p99_ms']} ms"
    )
    print(
        f"Tool selection: {selection['requests']} requests over {selection['tools']} tools, "
        f"{selection['offer']} offered + always-included"
    )
    for label in ("lexical", "lexical+local embedder"):
        if label not in selection:
            continue
        r = selection[label]
        print(
            f"  {label}: recall {r['recall'] * 100:.1f}%, offered {r['offered_tokens_mean']} of "
            f"{r['all_tools_tokens']} schema tokens (-{r['token_saving'] * 100:.1f}%), "
            f"select p50 {r['select_ms_p50']} ms; held-out set ({len(FRESH_REQUESTS)} requests "
            f"never tuned on) {r['held_out_recall'] * 100:.1f}%"
        )
        for miss in r["misses"]:
            print(f"    missed: {miss}")
    print_figures("tools", found)


if __name__ == "__main__":
    asyncio.run(main())
