"""The reference order service (`bot orders-demo --data PATH [--port N]`) over a JSON file.

It serves exactly the contract the `orders` pack calls: `GET /orders/{order_id}` (the id
URL-decoded, so `%23W2611340` is `#W2611340`) answers 200 with the order or 404
`{"error": "not found"}`; `GET /healthz` answers 200. When a token is configured (the `token`
argument, or the `ORDERS_DEMO_TOKEN` environment variable when `run` gets none), order requests
need `Authorization: Bearer <token>`, else 401.

The data file is a JSON object keyed by order id (like `../shared/data/retail/orders.json`);
a JSON list of orders each carrying `order_id` is accepted too.
"""

from __future__ import annotations

import hmac
import json
import os
from pathlib import Path
from typing import Any

from aiohttp import web

DEFAULT_PORT = 8081
TOKEN_ENV = "ORDERS_DEMO_TOKEN"

ORDERS_KEY = web.AppKey("orders", dict)
TOKEN_KEY = web.AppKey("token", str)


class OrdersDataError(Exception):
    """The orders file is missing or not valid orders JSON; the message is one line."""


def load_orders(path: str | Path) -> dict[str, dict[str, Any]]:
    """Orders by id from a JSON file. Raises OrdersDataError with a one-line reason."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OrdersDataError(f"orders file not found: {p}") from None
    except OSError as exc:
        raise OrdersDataError(f"cannot read orders file {p}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        reason = str(exc).splitlines()[0]
        raise OrdersDataError(f"orders file {p} is not valid JSON: {reason}") from None
    if isinstance(raw, list):
        if not all(isinstance(o, dict) and isinstance(o.get("order_id"), str) for o in raw):
            raise OrdersDataError(f"orders file {p}: every order in the list needs an order_id")
        return {o["order_id"]: o for o in raw}
    if not isinstance(raw, dict) or not all(isinstance(o, dict) for o in raw.values()):
        raise OrdersDataError(f"orders file {p} must hold a JSON object of orders keyed by id")
    return raw


def create_app(orders: dict[str, Any], token: str | None) -> web.Application:
    """The aiohttp app serving `orders`; `token` (if set) is required as a bearer token."""
    app = web.Application()
    app[ORDERS_KEY] = orders
    app[TOKEN_KEY] = token or ""
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/orders/{order_id}", _get_order)
    return app


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "orders": len(request.app[ORDERS_KEY])})


async def _get_order(request: web.Request) -> web.Response:
    token = request.app[TOKEN_KEY]
    if token:
        given = request.headers.get("Authorization", "")
        expected = f"Bearer {token}"
        if not hmac.compare_digest(
            given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
        ):
            return web.json_response(
                {"error": "unauthorized"},
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
    order = request.app[ORDERS_KEY].get(request.match_info["order_id"])
    if order is None:
        return web.json_response({"error": "not found"}, status=404)
    return web.json_response(order, dumps=_dumps)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def run(
    data_path: str, host: str = "127.0.0.1", port: int = DEFAULT_PORT, token: str | None = None
) -> None:
    """Serve until interrupted. Raises OrdersDataError (one line) if the data cannot be loaded."""
    orders = load_orders(data_path)
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    need = "required" if token else "not required"
    print(f"orders demo: {len(orders)} orders on http://{host}:{port} (token {need})", flush=True)
    web.run_app(create_app(orders, token), host=host, port=port, print=None)
