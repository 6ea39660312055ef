"""The orders pack against the real orders_demo app serving the shared retail orders."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from aiohttp import web

from tools.executor import ToolExecutor
from tools.packs import PackEnv, parse_settings
from tools.packs.orders import ORDERS_PACK, summarize_order
from tools.registry import ToolRegistry
from tools.types import ToolCallRecord, ToolCallRequest, ToolContext

MakeExecutor = Callable[..., ToolExecutor]


@asynccontextmanager
async def installed(http: httpx.AsyncClient, words: str) -> AsyncIterator[ToolRegistry]:
    """What `/tools install orders <words>` leads to: parse, store as strings, build per turn."""
    stored = ORDERS_PACK.dump_config(ORDERS_PACK.load_config(parse_settings(words)))
    yield ToolRegistry(ORDERS_PACK.build(stored, PackEnv(http)))


async def lookup(
    executor: ToolExecutor, ctx: ToolContext, reg: ToolRegistry, args: dict[str, Any]
) -> tuple[ToolCallRecord, dict[str, Any]]:
    req = ToolCallRequest("c1", "get_order_status", json.dumps(args))
    [rec] = await executor.execute([req], ctx, reg)
    body: dict[str, Any] = json.loads(rec.content)
    return rec, body


def test_contract_schema() -> None:
    from tools.packs.orders import get_order_status

    p = get_order_status.parameters
    assert p["required"] == ["order_id"] and p["additionalProperties"] is False
    assert p["properties"]["order_id"]["type"] == "string"
    assert p["properties"]["include_logistics"] == {
        "default": True,
        "description": "Include shipments and their tracking ids.",
        "type": "boolean",
    }


async def test_order_status(
    make_executor: MakeExecutor,
    ctx: ToolContext,
    http: httpx.AsyncClient,
    orders_data: dict[str, Any],
    orders_server: Any,
) -> None:
    async with orders_server(orders_data, None) as srv, installed(http, f"url={srv.url}") as reg:
        rec, body = await lookup(make_executor(), ctx, reg, {"order_id": "#W2611340"})
    assert rec.outcome == "ok", body
    assert srv.raw_paths == ["/orders/%23W2611340"]
    assert body["data"] == {
        "order_id": "#W2611340",
        "status": "processed",
        "items": [
            {
                "name": "Water Bottle",
                "options": {"capacity": "1000ml", "material": "glass", "color": "blue"},
                "price": 47.84,
            },
            {
                "name": "Office Chair",
                "options": {
                    "material": "fabric",
                    "color": "black",
                    "armrest": "fixed",
                    "backrest height": "standard",
                },
                "price": 488.81,
            },
        ],
        "items_total": 536.65,
        "fulfillments": [
            {"tracking_ids": ["357962501027"], "items": ["Water Bottle", "Office Chair"]}
        ],
        "payment": {"paid": 536.65, "methods": ["gift card"]},
        "shipping_address": "215 River Road, Suite 991, New York, NY 10083, USA",
    }
    assert "user_id" not in rec.content and "gift_card_1725971" not in rec.content


async def test_without_logistics(
    make_executor: MakeExecutor,
    ctx: ToolContext,
    http: httpx.AsyncClient,
    orders_data: dict[str, Any],
    orders_server: Any,
) -> None:
    async with orders_server(orders_data, None) as srv, installed(http, f"url={srv.url}/") as reg:
        args = {"order_id": "#W2611340", "include_logistics": "false"}
        rec, body = await lookup(make_executor(), ctx, reg, args)
    assert rec.outcome == "ok"
    assert "fulfillments" not in body["data"] and "357962501027" not in rec.content
    assert body["data"]["status"] == "processed"


async def test_id_without_hash_is_found(
    make_executor: MakeExecutor,
    ctx: ToolContext,
    http: httpx.AsyncClient,
    orders_data: dict[str, Any],
    orders_server: Any,
) -> None:
    async with orders_server(orders_data, None) as srv, installed(http, f"url={srv.url}") as reg:
        rec, body = await lookup(make_executor(), ctx, reg, {"order_id": " W2611340 "})
    assert rec.outcome == "ok" and body["data"]["order_id"] == "#W2611340"
    assert srv.raw_paths == ["/orders/W2611340", "/orders/%23W2611340"]


async def test_missing_order_is_a_business_error(
    make_executor: MakeExecutor,
    ctx: ToolContext,
    http: httpx.AsyncClient,
    orders_data: dict[str, Any],
    orders_server: Any,
) -> None:
    async with orders_server(orders_data, None) as srv, installed(http, f"url={srv.url}") as reg:
        rec, body = await lookup(make_executor(), ctx, reg, {"order_id": "#W0000000"})
    assert rec.outcome == "business_error" and rec.attempts == 1
    assert body["error"]["message"].startswith("Order #W0000000 was not found")
    assert srv.raw_paths == ["/orders/%23W0000000"]  # starts with '#': no second try


async def test_token_is_sent_and_required(
    make_executor: MakeExecutor,
    ctx: ToolContext,
    http: httpx.AsyncClient,
    orders_data: dict[str, Any],
    orders_server: Any,
) -> None:
    ex = make_executor()
    async with orders_server(orders_data, "s3cret") as srv:
        async with installed(http, f"url={srv.url} token=s3cret") as reg:
            rec, _ = await lookup(ex, ctx, reg, {"order_id": "#W2611340"})
            assert rec.outcome == "ok"
        for words in (f"url={srv.url}", f"url={srv.url} token=wrong"):
            async with installed(http, words) as reg:
                rec, body = await lookup(ex, ctx, reg, {"order_id": "#W2611340"})
            assert rec.outcome == "business_error" and rec.attempts == 1
            message = body["error"]["message"]
            assert "rejected the bot's credentials" in message and "reinstall" in message
            assert "wrong" not in message and "s3cret" not in message


async def test_service_down_is_transient(
    make_executor: MakeExecutor, ctx: ToolContext, http: httpx.AsyncClient, closed_port_url: str
) -> None:
    async with installed(http, f"url={closed_port_url}") as reg:
        rec, body = await lookup(make_executor(), ctx, reg, {"order_id": "#W2611340"})
    assert rec.outcome == "transient_error" and rec.attempts == 3
    assert body["error"]["retryable"] is True


async def test_server_errors_are_transient(
    make_executor: MakeExecutor, ctx: ToolContext, http: httpx.AsyncClient, serve_app: Any
) -> None:
    hits = 0

    async def flaky(request: web.Request) -> web.Response:
        nonlocal hits
        hits += 1
        if hits == 1:
            return web.json_response({"error": "overloaded"}, status=502)
        return web.json_response({"order_id": "#W1", "status": "pending", "items": []})

    app = web.Application()
    app.router.add_get("/orders/{order_id}", flaky)
    async with serve_app(app) as url, installed(http, f"url={url}") as reg:
        rec, body = await lookup(make_executor(), ctx, reg, {"order_id": "#W1"})
    assert rec.outcome == "ok" and rec.attempts == 2 and body["data"]["status"] == "pending"


@pytest.mark.parametrize("order_id", ["", "   "])
async def test_empty_ids_are_bad_arguments(
    make_executor: MakeExecutor, ctx: ToolContext, http: httpx.AsyncClient, order_id: str
) -> None:
    async with installed(http, "url=http://127.0.0.1:9") as reg:
        rec, body = await lookup(make_executor(), ctx, reg, {"order_id": order_id})
    assert rec.outcome == "bad_arguments" and "order_id" in body["error"]["fields"]


def test_summary_tolerates_sparse_orders(orders_data: dict[str, Any]) -> None:
    assert summarize_order({}, include_logistics=True) == {
        "order_id": None,
        "status": None,
        "items": [],
        "fulfillments": [],
    }
    refunded = next(o for o in orders_data.values() if len(o["payment_history"]) > 1)
    payment = summarize_order(refunded, include_logistics=False)["payment"]
    assert payment["refunded"] > 0 and payment["paid"] > 0
    for order in orders_data.values():  # every real order summarises and stays small
        summary = summarize_order(order, include_logistics=True)
        assert summary["order_id"] == order["order_id"] and len(json.dumps(summary)) < 4000


async def test_dot_ids_stay_inside_the_orders_path(
    make_executor: MakeExecutor,
    ctx: ToolContext,
    http: httpx.AsyncClient,
    orders_data: dict[str, Any],
    orders_server: Any,
) -> None:
    """'.' or '..' must not be resolved as path segments (they would reach other URLs)."""
    async with orders_server(orders_data, None) as srv, installed(http, f"url={srv.url}") as reg:
        for dots in (".", ".."):
            rec, _ = await lookup(make_executor(), ctx, reg, {"order_id": dots})
            assert rec.outcome == "business_error"
    assert srv.raw_paths == ["/orders/%2E", "/orders/%23%2E", "/orders/%2E%2E", "/orders/%23%2E%2E"]
