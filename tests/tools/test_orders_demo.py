"""The reference order service: contract, token check, data loading errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tools.orders_demo import OrdersDataError, create_app, load_orders


async def test_contract(orders_data: dict[str, Any], serve_app: Any) -> None:
    async with serve_app(create_app(orders_data, None)) as url, httpx.AsyncClient() as c:
        ok = await c.get(f"{url}/orders/%23W2611340")
        assert ok.status_code == 200 and ok.json() == orders_data["#W2611340"]
        assert set(ok.json()) >= {"order_id", "user_id", "status", "items", "fulfillments"}
        missing = await c.get(f"{url}/orders/%23W0")
        assert missing.status_code == 404 and missing.json() == {"error": "not found"}
        health = await c.get(f"{url}/healthz")
        assert health.status_code == 200 and health.json() == {"ok": True, "orders": 1000}


async def test_bearer_token(serve_app: Any) -> None:
    orders = {"#W1": {"order_id": "#W1"}, "a/b": {"order_id": "a/b"}}
    async with serve_app(create_app(orders, "tok")) as url, httpx.AsyncClient() as c:
        assert (await c.get(f"{url}/orders/%23W1")).status_code == 401
        bad = await c.get(f"{url}/orders/%23W1", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401 and bad.headers["WWW-Authenticate"] == "Bearer"
        good = await c.get(f"{url}/orders/%23W1", headers={"Authorization": "Bearer tok"})
        assert good.status_code == 200 and good.json() == {"order_id": "#W1"}
        slash = await c.get(f"{url}/orders/a%2Fb", headers={"Authorization": "Bearer tok"})
        assert slash.status_code == 200
        assert (await c.get(f"{url}/healthz")).status_code == 200  # health needs no token


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(OrdersDataError, match="not found"):
        load_orders(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(OrdersDataError, match="not valid JSON"):
        load_orders(broken)
    shape = tmp_path / "shape.json"
    shape.write_text("[1, 2]")
    with pytest.raises(OrdersDataError, match="order_id"):
        load_orders(shape)
    scalar = tmp_path / "scalar.json"
    scalar.write_text('{"#W1": 3}')
    with pytest.raises(OrdersDataError, match="keyed by id"):
        load_orders(scalar)
    for exc_path in (broken, shape, scalar):
        with pytest.raises(OrdersDataError) as info:
            load_orders(exc_path)
        assert "\n" not in str(info.value)


def test_list_form_is_keyed_by_id(tmp_path: Path) -> None:
    p = tmp_path / "orders.json"
    p.write_text(json.dumps([{"order_id": "#W1", "status": "pending"}]))
    assert load_orders(p) == {"#W1": {"order_id": "#W1", "status": "pending"}}
