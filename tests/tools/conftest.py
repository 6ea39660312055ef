"""Fixtures for the tool engine tests: context, a no-wait executor, real local HTTP servers.

Servers are real aiohttp apps on loopback and clients are real httpx clients, so the packs'
HTTP code runs exactly as in production. The orders data is read from the shared data folder
(`retail/orders.json`, found by `tests.support.shared_data`), never copied into the repo.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.support.shared_data import shared_data_file
from tools.executor import ExecutorConfig, ToolExecutor
from tools.orders_demo import create_app, load_orders
from tools.types import ToolContext


@pytest.fixture
def ctx() -> ToolContext:
    return ToolContext(
        session_id="slack:T1:C1:1700000000.1", speaker_id="slack:T1:U1", team_id="T1"
    )


@pytest.fixture
def make_executor() -> Callable[..., ToolExecutor]:
    """An executor that retries without waiting; keyword args override config fields."""

    def make(**kwargs: Any) -> ToolExecutor:
        idem = kwargs.pop("idempotency", None)
        on_record = kwargs.pop("on_record", None)
        config = ExecutorConfig(**{"backoff_base": 0.0, **kwargs})
        return ToolExecutor(config, idempotency=idem, on_record=on_record)

    return make


@asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Run `app` on 127.0.0.1 on a free port; yields its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as client:
        yield client


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- orders ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def orders_data() -> dict[str, Any]:
    return load_orders(shared_data_file("retail/orders.json"))


@dataclass
class OrdersServer:
    url: str
    raw_paths: list[str] = field(default_factory=list)


@asynccontextmanager
async def orders_service(orders: dict[str, Any], token: str | None) -> AsyncIterator[OrdersServer]:
    """The real orders_demo app, plus a middleware noting the raw (still encoded) paths."""
    app = create_app(orders, token)
    seen: list[str] = []

    @web.middleware
    async def note(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append(request.raw_path)
        resp: web.StreamResponse = await handler(request)
        return resp

    app.middlewares.append(note)
    async with serve(app) as url:
        yield OrdersServer(url, seen)


# --- a local server speaking Open-Meteo's geocoding and forecast shapes ----------------------

PLACES: dict[str, list[dict[str, Any]]] = {
    "berlin": [
        {
            "name": "Berlin",
            "latitude": 52.52437,
            "longitude": 13.41053,
            "country": "Germany",
            "country_code": "DE",
            "admin1": "Land Berlin",
            "timezone": "Europe/Berlin",
        }
    ],
    "paris": [
        {
            "name": "Paris",
            "latitude": 33.66094,
            "longitude": -95.55551,
            "country": "United States",
            "country_code": "US",
            "admin1": "Texas",
            "timezone": "America/Chicago",
        },
        {
            "name": "Paris",
            "latitude": 48.85341,
            "longitude": 2.3488,
            "country": "France",
            "country_code": "FR",
            "admin1": "Île-de-France",
            "timezone": "Europe/Paris",
        },
    ],
    "北京": [
        {
            "name": "北京市",
            "latitude": 39.9075,
            "longitude": 116.39723,
            "country": "中国",
            "country_code": "CN",
            "admin1": "北京市",
            "timezone": "Asia/Shanghai",
        }
    ],
}


@dataclass
class FakeMeteo:
    """Knobs and a request log for the fake Open-Meteo server."""

    base: str = ""
    geocoding_requests: list[dict[str, str]] = field(default_factory=list)
    forecast_requests: list[dict[str, str]] = field(default_factory=list)
    fail_forecast: int = 0  # answer the next N forecast requests with 503

    @property
    def forecast_url(self) -> str:
        return self.base + "/v1/forecast"

    @property
    def geocoding_url(self) -> str:
        return self.base + "/v1/search"


def meteo_app(state: FakeMeteo) -> web.Application:
    async def search(request: web.Request) -> web.Response:
        q = dict(request.query)
        state.geocoding_requests.append(q)
        results = PLACES.get(q.get("name", "").lower(), [])[: int(q.get("count", "10"))]
        body: dict[str, Any] = {"generationtime_ms": 0.5}
        if results:
            body["results"] = results
        return web.json_response(body)

    async def forecast(request: web.Request) -> web.Response:
        q = dict(request.query)
        state.forecast_requests.append(q)
        if state.fail_forecast > 0:
            state.fail_forecast -= 1
            return web.json_response({"error": True, "reason": "busy"}, status=503)
        if "latitude" not in q or "longitude" not in q:
            return web.json_response({"error": True, "reason": "latitude required"}, status=400)
        f = q.get("temperature_unit") == "fahrenheit"
        t_unit = "°F" if f else "°C"
        body: dict[str, Any] = {"latitude": float(q["latitude"]), "timezone": q.get("timezone")}
        if "current" in q:
            body["current_units"] = {
                "time": "iso8601",
                "temperature_2m": t_unit,
                "apparent_temperature": t_unit,
                "relative_humidity_2m": "%",
                "weather_code": "wmo code",
                "wind_speed_10m": "mp/h" if q.get("wind_speed_unit") == "mph" else "km/h",
            }
            body["current"] = {
                "time": "2025-06-01T14:00",
                "interval": 900,
                "temperature_2m": 71.2 if f else 21.8,
                "apparent_temperature": 70.0 if f else 21.1,
                "relative_humidity_2m": 48,
                "weather_code": 2,
                "wind_speed_10m": 7.4 if f else 11.9,
            }
        if "daily" in q:
            start = dt.date.fromisoformat(q["start_date"])
            end = dt.date.fromisoformat(q["end_date"])
            days = [
                (start + dt.timedelta(days=i)).isoformat() for i in range((end - start).days + 1)
            ]
            body["daily_units"] = {
                "temperature_2m_max": t_unit,
                "temperature_2m_min": t_unit,
                "precipitation_probability_max": "%",
            }
            body["daily"] = {
                "time": days,
                "weather_code": [61 for _ in days],
                "temperature_2m_max": [75.0 if f else 24.0 for _ in days],
                "temperature_2m_min": [55.4 if f else 13.0 for _ in days],
                "precipitation_probability_max": [80 for _ in days],
            }
        return web.json_response(body)

    app = web.Application()
    app.router.add_get("/v1/search", search)
    app.router.add_get("/v1/forecast", forecast)
    return app


@pytest.fixture
async def meteo() -> AsyncIterator[FakeMeteo]:
    state = FakeMeteo()
    async with serve(meteo_app(state)) as url:
        state.base = url
        yield state


@pytest.fixture
def serve_app() -> Callable[[web.Application], Any]:
    """`async with serve_app(app) as base_url:` (test modules cannot import conftest)."""
    return serve


@pytest.fixture
def orders_server() -> Callable[..., Any]:
    """`async with orders_server(orders, token) as srv:` -> OrdersServer(url, raw_paths)."""
    return orders_service
