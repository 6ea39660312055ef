"""The `orders` pack: order status from the team's own order service.

Installed with `url=<base URL>` and optionally `token=<bearer token>` (a secret: kept in a
`SecretStr`, masked by `redacted`, sent only as `Authorization: Bearer ...`). The service
contract is `GET {url}/orders/{order_id}` with the id URL-encoded (`#W2611340` -> `%23W2611340`),
answering 200 with the order or 404; `tools.orders_demo` serves it over a JSON file.

Ids as users type them: the id is tried as given (trimmed); if that is not found and it does
not start with '#', it is tried again with a '#' prefix ("W2611340" finds "#W2611340").

The answer is trimmed to what a support reply needs: status, items (name, options, price),
shipments with tracking ids (when `include_logistics`), a payment summary and the address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from tools.declare import Injected, Tool, tool
from tools.errors import ToolArgumentError, ToolBusinessError, ToolTransientError
from tools.packs.base import PackEnv, ToolPack


class OrdersConfig(BaseModel):
    """Install settings of the orders pack."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    url: Annotated[str, Field(description="Base URL of the order service (http or https).")]
    token: Annotated[
        SecretStr | None, Field(description="Bearer token, if the service needs one.")
    ] = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.strip()
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("token")
    @classmethod
    def _blank_is_none(cls, value: SecretStr | None) -> SecretStr | None:
        return value if value is not None and value.get_secret_value().strip() else None


@dataclass(frozen=True, slots=True)
class OrdersClient:
    http: httpx.AsyncClient
    base_url: str
    token: SecretStr | None = None

    async def fetch(self, order_id: str) -> dict[str, Any] | None:
        """The order as JSON, or None when the service answers 404."""
        headers = {"Accept": "application/json"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token.get_secret_value()}"
        # Dots are encoded too: an id of "." or ".." would otherwise be resolved as a path
        # segment by the HTTP client and reach another URL of the service, with the token.
        url = f"{self.base_url}/orders/{quote(order_id, safe='').replace('.', '%2E')}"
        resp = await self.http.get(url, headers=headers)
        status = resp.status_code
        if status == 404:
            return None
        if status in (401, 403):
            raise ToolBusinessError(
                f"The order service rejected the bot's credentials (HTTP {status}). Tell the user "
                "an admin needs to reinstall the orders pack with a valid token "
                "(/tools install orders url=... token=...)."
            )
        if status == 429 or status >= 500:
            raise ToolTransientError(f"order service answered HTTP {status}")
        if status != 200:
            raise ToolBusinessError(f"The order service refused the request (HTTP {status}).")
        order = resp.json()
        if not isinstance(order, dict):
            raise RuntimeError("order service answered with a non-object JSON body")
        return order


@tool(timeout=10.0)
async def get_order_status(
    order_id: Annotated[
        str,
        Field(
            description="The order id as the customer gives it, e.g. '#W2611340'.",
            min_length=1,
            max_length=64,
        ),
    ],
    include_logistics: Annotated[
        bool, Field(description="Include shipments and their tracking ids.")
    ] = True,
    *,
    client: Injected[OrdersClient],
) -> dict[str, Any]:
    """Look up an order: its status, items, payment, shipping address and (optionally) tracking
    ids. Use it when the user asks where an order is or what it contains."""
    wanted = order_id.strip()
    if not wanted:
        raise ToolArgumentError("order_id", "must not be empty")
    order = await client.fetch(wanted)
    if order is None and not wanted.startswith("#"):
        order = await client.fetch("#" + wanted)
    if order is None:
        raise ToolBusinessError(f"Order {wanted} was not found. Check the order id with the user.")
    return summarize_order(order, include_logistics=include_logistics)


def summarize_order(order: dict[str, Any], *, include_logistics: bool) -> dict[str, Any]:
    """The parts of an order a support answer needs; tolerant of missing fields."""
    raw_items = [i for i in _list(order.get("items")) if isinstance(i, dict)]
    items = [
        {k: i[k] for k in ("name", "options", "price") if i.get(k) is not None} for i in raw_items
    ]
    out: dict[str, Any] = {"order_id": order.get("order_id"), "status": order.get("status")}
    out["items"] = items
    prices = [i["price"] for i in items if isinstance(i.get("price"), int | float)]
    if prices:
        out["items_total"] = round(sum(prices), 2)
    if include_logistics:
        names = {str(i.get("item_id")): i.get("name") for i in raw_items}
        out["fulfillments"] = [
            {
                "tracking_ids": [str(t) for t in _list(f.get("tracking_id"))],
                "items": [names.get(str(x)) or str(x) for x in _list(f.get("item_ids"))],
            }
            for f in _list(order.get("fulfillments"))
            if isinstance(f, dict)
        ]
    payment = _payment(_list(order.get("payment_history")))
    if payment:
        out["payment"] = payment
    address = _address(order.get("address"))
    if address:
        out["shipping_address"] = address
    return out


def _list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    return [] if value is None else [value]


def _payment(history: list[Any]) -> dict[str, Any]:
    totals: dict[str, float] = {}
    methods: list[str] = []
    for entry in history:
        if not isinstance(entry, dict):
            continue
        kind = str(entry.get("transaction_type", "payment"))
        amount = entry.get("amount")
        if isinstance(amount, int | float):
            totals[kind] = round(totals.get(kind, 0.0) + amount, 2)
        method = _method_kind(entry.get("payment_method_id"))
        if method and method not in methods:
            methods.append(method)
    summary: dict[str, Any] = {"paid": totals.pop("payment", 0.0)}
    if "refund" in totals:
        summary["refunded"] = totals.pop("refund")
    summary.update(totals)
    if methods:
        summary["methods"] = methods
    return summary if history else {}


def _method_kind(method_id: Any) -> str:
    """'gift_card_1725971' -> 'gift card': the kind, not the instrument's id."""
    if not isinstance(method_id, str):
        return ""
    return re.sub(r"_?\d+$", "", method_id).replace("_", " ").strip()


def _address(address: Any) -> str:
    if isinstance(address, str):
        return address
    if not isinstance(address, dict):
        return ""
    state_zip = " ".join(str(address[k]) for k in ("state", "zip") if address.get(k))
    parts = [address.get("address1"), address.get("address2"), address.get("city"), state_zip]
    parts.append(address.get("country"))
    return ", ".join(str(p) for p in parts if p)


def _build(config: OrdersConfig, env: PackEnv) -> list[Tool]:
    client = OrdersClient(env.guarded_http, config.url, config.token)
    return [get_order_status.bind(client=client)]


ORDERS_PACK = ToolPack(
    name="orders",
    description="Order status, items, payment and tracking from your order service.",
    config_model=OrdersConfig,
    builder=_build,
    tool_names=(get_order_status.name,),
    secret_keys=frozenset({"token"}),
)
