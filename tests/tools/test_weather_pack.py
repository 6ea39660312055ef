"""The weather pack over real HTTP against a local server speaking Open-Meteo's shapes."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from tools.executor import ToolExecutor
from tools.packs import PackEnv
from tools.packs.weather import WEATHER_PACK, describe_code
from tools.registry import ToolRegistry
from tools.types import ToolCallRecord, ToolCallRequest, ToolContext

MakeExecutor = Callable[..., ToolExecutor]


@pytest.fixture
def weather_registry(meteo: Any, http: httpx.AsyncClient) -> ToolRegistry:
    env = PackEnv(http, weather_api_url=meteo.forecast_url, geocoding_api_url=meteo.geocoding_url)
    return ToolRegistry(WEATHER_PACK.build({}, env))


async def one(
    executor: ToolExecutor, ctx: ToolContext, reg: ToolRegistry, name: str, args: dict[str, Any]
) -> tuple[ToolCallRecord, dict[str, Any]]:
    [rec] = await executor.execute([ToolCallRequest("c1", name, json.dumps(args))], ctx, reg)
    body: dict[str, Any] = json.loads(rec.content)
    return rec, body


def test_contract_schemas(weather_registry: ToolRegistry) -> None:
    current = weather_registry.get("get_current_weather")
    forecast = weather_registry.get("get_weather_forecast")
    assert current is not None and forecast is not None
    p = current.parameters
    assert p["required"] == ["location"] and p["additionalProperties"] is False
    assert p["properties"]["location"]["type"] == "string"
    assert "city" in p["properties"]["location"]["description"]
    assert p["properties"]["unit"]["enum"] == ["celsius", "fahrenheit"]
    assert p["properties"]["unit"]["default"] == "celsius"
    f = forecast.parameters
    assert f["required"] == ["location", "date"]
    assert f["properties"]["date"]["format"] == "date"
    assert "YYYY-MM-DD" in f["properties"]["date"]["description"]


async def test_current_weather(
    make_executor: MakeExecutor, ctx: ToolContext, weather_registry: ToolRegistry, meteo: Any
) -> None:
    rec, body = await one(
        make_executor(), ctx, weather_registry, "get_current_weather", {"location": "Berlin"}
    )
    assert rec.outcome == "ok", body
    assert body["data"] == {
        "location": "Berlin, Germany",
        "local_time": "2025-06-01T14:00",
        "conditions": "partly cloudy",
        "temperature": "21.8 °C",
        "feels_like": "21.1 °C",
        "humidity": "48%",
        "wind": "11.9 km/h",
    }
    assert meteo.geocoding_requests == [
        {"name": "Berlin", "count": "1", "language": "en", "format": "json"}
    ]
    [q] = meteo.forecast_requests
    assert (q["latitude"], q["longitude"], q["timezone"]) == (
        "52.52437",
        "13.41053",
        "Europe/Berlin",
    )
    assert set(q["current"].split(",")) >= {"temperature_2m", "weather_code", "wind_speed_10m"}
    assert "temperature_unit" not in q


async def test_fahrenheit_is_passed_through(
    make_executor: MakeExecutor, ctx: ToolContext, weather_registry: ToolRegistry, meteo: Any
) -> None:
    args = {"location": "Berlin", "unit": "fahrenheit"}
    _rec, body = await one(make_executor(), ctx, weather_registry, "get_current_weather", args)
    assert body["data"]["temperature"] == "71.2 °F" and body["data"]["wind"] == "7.4 mp/h"
    assert meteo.forecast_requests[0]["temperature_unit"] == "fahrenheit"


async def test_qualifier_picks_the_right_place(
    make_executor: MakeExecutor, ctx: ToolContext, weather_registry: ToolRegistry, meteo: Any
) -> None:
    args = {"location": "Paris, France"}
    _rec, body = await one(make_executor(), ctx, weather_registry, "get_current_weather", args)
    assert body["data"]["location"] == "Paris, Île-de-France, France"
    assert meteo.geocoding_requests[0]["name"] == "Paris"
    assert meteo.forecast_requests[0]["timezone"] == "Europe/Paris"


async def test_chinese_place_names(
    make_executor: MakeExecutor, ctx: ToolContext, weather_registry: ToolRegistry, meteo: Any
) -> None:
    rec, body = await one(
        make_executor(), ctx, weather_registry, "get_current_weather", {"location": "北京"}
    )
    assert meteo.geocoding_requests[0]["name"] == "北京"
    assert body["data"]["location"] == "北京市, 中国" and "北京市" in rec.content


async def test_unknown_place_is_a_business_error(
    make_executor: MakeExecutor, ctx: ToolContext, weather_registry: ToolRegistry, meteo: Any
) -> None:
    rec, body = await one(
        make_executor(), ctx, weather_registry, "get_current_weather", {"location": "Atlantis"}
    )
    assert rec.outcome == "business_error" and rec.attempts == 1
    assert "no place called 'Atlantis'" in body["error"]["message"]
    assert meteo.forecast_requests == []


async def test_upstream_503_is_retried(
    make_executor: MakeExecutor, ctx: ToolContext, weather_registry: ToolRegistry, meteo: Any
) -> None:
    meteo.fail_forecast = 1
    rec, body = await one(
        make_executor(), ctx, weather_registry, "get_current_weather", {"location": "Berlin"}
    )
    assert rec.outcome == "ok" and rec.attempts == 2
    meteo.fail_forecast = 10
    rec, body = await one(
        make_executor(), ctx, weather_registry, "get_current_weather", {"location": "Berlin"}
    )
    assert rec.outcome == "transient_error" and rec.attempts == 3
    assert body["error"]["retryable"] is True


async def test_service_down_is_transient(
    make_executor: MakeExecutor, ctx: ToolContext, http: httpx.AsyncClient, closed_port_url: str
) -> None:
    env = PackEnv(http, closed_port_url + "/v1/forecast", closed_port_url + "/v1/search")
    reg = ToolRegistry(WEATHER_PACK.build({}, env))
    rec, body = await one(make_executor(), ctx, reg, "get_current_weather", {"location": "Berlin"})
    assert rec.outcome == "transient_error"
    assert "temporarily unavailable" in body["error"]["message"]


def berlin_today() -> dt.date:
    return dt.datetime.now(ZoneInfo("Europe/Berlin")).date()


async def test_forecast(
    make_executor: MakeExecutor, ctx: ToolContext, weather_registry: ToolRegistry, meteo: Any
) -> None:
    day = (berlin_today() + dt.timedelta(days=2)).isoformat()
    args = {"location": "Berlin", "date": day}
    rec, body = await one(make_executor(), ctx, weather_registry, "get_weather_forecast", args)
    assert rec.outcome == "ok", body
    assert body["data"] == {
        "location": "Berlin, Germany",
        "date": day,
        "conditions": "slight rain",
        "high": "24.0 °C",
        "low": "13.0 °C",
        "chance_of_precipitation": "80%",
    }
    [q] = meteo.forecast_requests
    assert q["start_date"] == q["end_date"] == day
    assert set(q["daily"].split(",")) == {
        "temperature_2m_max",
        "temperature_2m_min",
        "precipitation_probability_max",
        "weather_code",
    }


@pytest.mark.parametrize(
    ("date", "message"),
    [
        ("tomorrow", "must be a date as YYYY-MM-DD"),
        ("2020-01-01", "must be within the next 7 days"),
        ((dt.date.today() + dt.timedelta(days=30)).isoformat(), "must be within the next 7 days"),
    ],
)
async def test_forecast_date_is_validated(
    make_executor: MakeExecutor,
    ctx: ToolContext,
    weather_registry: ToolRegistry,
    meteo: Any,
    date: str,
    message: str,
) -> None:
    args = {"location": "Berlin", "date": date}
    rec, body = await one(make_executor(), ctx, weather_registry, "get_weather_forecast", args)
    assert rec.outcome == "bad_arguments"
    assert body["error"]["fields"]["date"].startswith(message)
    assert meteo.geocoding_requests == []  # rejected before any HTTP request


async def test_forecast_window_uses_the_place_timezone(
    make_executor: MakeExecutor, ctx: ToolContext, weather_registry: ToolRegistry, meteo: Any
) -> None:
    # Yesterday in Berlin passes the coarse UTC check but not the exact local one.
    day = (berlin_today() - dt.timedelta(days=1)).isoformat()
    args = {"location": "Berlin", "date": day}
    rec, body = await one(make_executor(), ctx, weather_registry, "get_weather_forecast", args)
    assert rec.outcome == "bad_arguments"
    assert "in Berlin" in body["error"]["fields"]["date"]
    assert meteo.forecast_requests == []


def test_wmo_codes_in_words() -> None:
    assert describe_code(0) == "clear sky"
    assert describe_code(95) == "thunderstorm"
    assert describe_code(42) == "weather code 42"
    assert describe_code(None) == "unknown"
