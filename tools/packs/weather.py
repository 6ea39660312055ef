"""The `weather` pack: current conditions and a one-day forecast from Open-Meteo-shaped APIs.

A location is geocoded first (`GEOCODING_API_URL`, `?name=...&count=...`); "Paris, France" is
searched as "Paris" and the qualifier picks among the matches, since Open-Meteo matches names
only. Answers are small dicts with units and WMO weather codes in words, which the model can
quote directly. Upstream 5xx/429 are transient (retried by the executor); an unknown place is a
business error the model can relay.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import httpx
from pydantic import AfterValidator, Field

from tools.declare import Injected, Tool, tool
from tools.errors import ToolArgumentError, ToolBusinessError, ToolTransientError
from tools.packs.base import NoConfig, PackEnv, ToolPack

FORECAST_DAYS = 7

WMO_CODES: dict[int, str] = {
    0: "clear sky",
    1: "mainly clear",
    2: "partly cloudy",
    3: "overcast",
    45: "fog",
    48: "depositing rime fog",
    51: "light drizzle",
    53: "moderate drizzle",
    55: "dense drizzle",
    56: "light freezing drizzle",
    57: "dense freezing drizzle",
    61: "slight rain",
    63: "moderate rain",
    65: "heavy rain",
    66: "light freezing rain",
    67: "heavy freezing rain",
    71: "slight snowfall",
    73: "moderate snowfall",
    75: "heavy snowfall",
    77: "snow grains",
    80: "slight rain showers",
    81: "moderate rain showers",
    82: "violent rain showers",
    85: "slight snow showers",
    86: "heavy snow showers",
    95: "thunderstorm",
    96: "thunderstorm with slight hail",
    99: "thunderstorm with heavy hail",
}


def describe_code(code: Any) -> str:
    try:
        return WMO_CODES.get(int(code), f"weather code {int(code)}")
    except (TypeError, ValueError):
        return "unknown"


@dataclass(frozen=True, slots=True)
class Place:
    name: str
    latitude: float
    longitude: float
    country: str = ""
    admin1: str = ""
    timezone: str = ""

    @property
    def label(self) -> str:
        return ", ".join(p for p in (self.name, self.admin1, self.country) if p)


@dataclass(frozen=True, slots=True)
class WeatherApi:
    http: httpx.AsyncClient
    forecast_url: str
    geocoding_url: str

    async def _get(self, url: str, params: dict[str, Any]) -> dict[str, Any]:
        resp = await self.http.get(url, params=params)
        if resp.status_code == 429 or resp.status_code >= 500:
            raise ToolTransientError(f"weather service answered HTTP {resp.status_code}")
        if resp.status_code >= 400:
            raise ToolBusinessError(
                f"The weather service rejected the request: {_reason(resp)[:200]}"
            )
        data = resp.json()
        if not isinstance(data, dict):
            raise RuntimeError("weather service answered with a non-object JSON body")
        return data

    async def geocode(self, location: str) -> Place:
        name, _, rest = location.partition(",")
        name = name.strip()
        qualifiers = [q.strip().lower() for q in rest.split(",") if q.strip()]
        results: list[Any] = []
        if name:
            params = {"name": name, "count": 10 if qualifiers else 1, "language": "en"}
            data = await self._get(self.geocoding_url, {**params, "format": "json"})
            results = [r for r in data.get("results") or [] if isinstance(r, dict)]
        if not results:
            raise ToolBusinessError(
                f"There is no place called {location.strip()[:100]!r}. Check the spelling or "
                "ask the user for a nearby larger city."
            )
        best = next((r for r in results if _matches(r, qualifiers)), results[0])
        return Place(
            name=str(best.get("name", name)),
            latitude=float(best["latitude"]),
            longitude=float(best["longitude"]),
            country=str(best.get("country", "")),
            admin1=str(best.get("admin1", "")) if qualifiers else "",
            timezone=str(best.get("timezone", "")),
        )

    async def forecast(self, place: Place, unit: str, params: dict[str, Any]) -> dict[str, Any]:
        query: dict[str, Any] = {
            "latitude": place.latitude,
            "longitude": place.longitude,
            "timezone": place.timezone or "auto",
            **params,
        }
        if unit == "fahrenheit":
            query |= {"temperature_unit": "fahrenheit", "wind_speed_unit": "mph"}
        return await self._get(self.forecast_url, query)


def _reason(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return f"HTTP {resp.status_code}"
    return str(body.get("reason", f"HTTP {resp.status_code}")) if isinstance(body, dict) else ""


def _matches(result: dict[str, Any], qualifiers: list[str]) -> bool:
    if not qualifiers:
        return True
    keys = ("country", "country_code", "admin1", "admin2", "admin3", "admin4")
    names = [str(result.get(k, "")).lower() for k in keys]
    return all(any(n and (n == q or n.startswith(q)) for n in names) for q in qualifiers)


def _window(today: dt.date) -> str:
    return f"{today} to {today + dt.timedelta(days=FORECAST_DAYS)}"


def _near_future(value: dt.date) -> dt.date:
    """A first check in UTC with a day of slack each side; the exact one uses the place's zone."""
    today = dt.datetime.now(dt.UTC).date()
    if not today - dt.timedelta(days=1) <= value <= today + dt.timedelta(days=FORECAST_DAYS + 1):
        raise ValueError(f"must be within the next {FORECAST_DAYS} days ({_window(today)})")
    return value


Location = Annotated[
    str,
    Field(
        description="The full city name, e.g. 'San Francisco' or 'Paris, France' "
        "(add the region or country when the name is ambiguous).",
        min_length=1,
        max_length=200,
    ),
]
Unit = Annotated[Literal["celsius", "fahrenheit"], Field(description="Temperature unit.")]
ForecastDate = Annotated[
    dt.date,
    AfterValidator(_near_future),
    Field(description=f"The day, as YYYY-MM-DD, today or within the next {FORECAST_DAYS} days."),
]


def _fmt(value: Any, unit: str) -> str | None:
    if value is None:
        return None
    return f"{value}{unit}" if unit == "%" else f"{value} {unit}".strip()


@tool(timeout=10.0)
async def get_current_weather(
    location: Location,
    unit: Unit = "celsius",
    *,
    api: Injected[WeatherApi],
) -> dict[str, Any]:
    """Get the weather right now in a city: conditions, temperature, feels-like, humidity, wind."""
    place = await api.geocode(location)
    fields = "temperature_2m,apparent_temperature,relative_humidity_2m,weather_code,wind_speed_10m"
    data = await api.forecast(place, unit, {"current": fields})
    now = data.get("current") or {}
    units = data.get("current_units") or {}
    temp_unit = units.get("temperature_2m", "°F" if unit == "fahrenheit" else "°C")
    answer = {
        "location": place.label,
        "local_time": now.get("time"),
        "conditions": describe_code(now.get("weather_code")),
        "temperature": _fmt(now.get("temperature_2m"), temp_unit),
        "feels_like": _fmt(now.get("apparent_temperature"), temp_unit),
        "humidity": _fmt(now.get("relative_humidity_2m"), units.get("relative_humidity_2m", "%")),
        "wind": _fmt(now.get("wind_speed_10m"), units.get("wind_speed_10m", "")),
    }
    return {k: v for k, v in answer.items() if v is not None}


@tool(timeout=10.0)
async def get_weather_forecast(
    location: Location,
    date: ForecastDate,
    unit: Unit = "celsius",
    *,
    api: Injected[WeatherApi],
) -> dict[str, Any]:
    """Get the forecast for a city on one day within the next 7 days: conditions, high and low
    temperature, and the chance of precipitation."""
    place = await api.geocode(location)
    today = _local_today(place.timezone)
    if not today <= date <= today + dt.timedelta(days=FORECAST_DAYS):
        raise ToolArgumentError(
            "date",
            f"must be within the next {FORECAST_DAYS} days in {place.name} ({_window(today)})",
        )
    daily_fields = (
        "weather_code,temperature_2m_max,temperature_2m_min,precipitation_probability_max"
    )
    day = date.isoformat()
    data = await api.forecast(
        place, unit, {"daily": daily_fields, "start_date": day, "end_date": day}
    )
    daily = data.get("daily") or {}
    units = data.get("daily_units") or {}
    times = daily.get("time") or []
    if day not in times:
        raise ToolBusinessError(f"The weather service has no forecast for {place.name} on {day}.")
    i = times.index(day)

    def pick(key: str) -> Any:
        values = daily.get(key) or []
        return values[i] if i < len(values) else None

    temp_unit = units.get("temperature_2m_max", "°F" if unit == "fahrenheit" else "°C")
    answer = {
        "location": place.label,
        "date": day,
        "conditions": describe_code(pick("weather_code")),
        "high": _fmt(pick("temperature_2m_max"), temp_unit),
        "low": _fmt(pick("temperature_2m_min"), temp_unit),
        "chance_of_precipitation": _fmt(pick("precipitation_probability_max"), "%"),
    }
    return {k: v for k, v in answer.items() if v is not None}


def _local_today(timezone: str) -> dt.date:
    try:
        return dt.datetime.now(ZoneInfo(timezone)).date() if timezone else _utc_today()
    except (ZoneInfoNotFoundError, ValueError):
        return _utc_today()


def _utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def _build(_config: NoConfig, env: PackEnv) -> list[Tool]:
    api = WeatherApi(env.http, env.weather_api_url, env.geocoding_api_url)
    return [get_current_weather.bind(api=api), get_weather_forecast.bind(api=api)]


WEATHER_PACK = ToolPack(
    name="weather",
    description="Current weather and 7-day forecasts for any city (Open-Meteo, no key needed).",
    config_model=NoConfig,
    builder=_build,
    tool_names=(get_current_weather.name, get_weather_forecast.name),
    breaker_scope="pack",
)
