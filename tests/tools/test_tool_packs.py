"""Tool packs: install settings parsed from key=value words, secrets masked, tools built."""

from __future__ import annotations

import httpx
import pytest

from tools.packs import PACKS, REDACTED, PackConfigError, PackEnv, redacted
from tools.packs.orders import ORDERS_PACK, OrdersConfig
from tools.packs.weather import WEATHER_PACK
from tools.registry import ToolRegistry


def test_registry_of_packs() -> None:
    assert {"orders", "weather"} <= set(PACKS)  # plus packs of other installed distributions
    assert PACKS["orders"].tool_names == ("get_order_status",)
    assert PACKS["weather"].tool_names == ("get_current_weather", "get_weather_forecast")
    assert all(p.description for p in PACKS.values())


def test_orders_settings_from_words() -> None:
    cfg = ORDERS_PACK.parse_args("url=http://orders.internal:8081/ token=abc")
    assert isinstance(cfg, OrdersConfig)
    assert cfg.url == "http://orders.internal:8081"
    assert cfg.token is not None and cfg.token.get_secret_value() == "abc"
    assert "abc" not in repr(cfg) and "abc" not in str(cfg)
    quoted = ORDERS_PACK.parse_args(["url=https://x.example/api", "token=a b=c"])
    assert quoted.token is not None and quoted.token.get_secret_value() == "a b=c"
    assert ORDERS_PACK.parse_args("url=https://x.example").token is None
    assert ORDERS_PACK.parse_args("url=https://x.example token=").token is None


@pytest.mark.parametrize(
    ("words", "message"),
    [
        ("", "orders: url: required"),
        ("token=abc", "orders: url: required"),
        ("url=ftp://x", "url: must be an http:// or https:// URL"),
        ("url=notaurl", "url: must be an http:// or https:// URL"),
        ("url=http://x colour=red", "unknown setting colour (allowed: url, token)"),
        ("url=http://x url=http://y", "url is given twice"),
        ("url=http://x s3cr3t-token", "setting 2 is not in key=value form"),
        ('url="http://x', "cannot parse settings"),
    ],
)
def test_orders_settings_errors(words: str, message: str) -> None:
    with pytest.raises(PackConfigError) as info:
        ORDERS_PACK.parse_args(words)
    assert message in str(info.value)
    assert "s3cr3t" not in str(info.value)
    assert "\n" not in str(info.value)


def test_weather_takes_no_settings() -> None:
    WEATHER_PACK.parse_args("")
    with pytest.raises(PackConfigError, match="weather takes no settings"):
        WEATHER_PACK.parse_args("key=1")


def test_secrets_are_redacted_and_dumped_for_storage() -> None:
    cfg = ORDERS_PACK.parse_args("url=http://x token=abc")
    assert ORDERS_PACK.redacted(cfg) == {"url": "http://x", "token": REDACTED}
    stored = ORDERS_PACK.dump_config(cfg)
    assert stored == {"url": "http://x", "token": "abc"}
    assert redacted(ORDERS_PACK, stored) == {"url": "http://x", "token": REDACTED}
    assert ORDERS_PACK.redacted(ORDERS_PACK.parse_args("url=http://x")) == {"url": "http://x"}
    assert ORDERS_PACK.load_config(stored) == cfg


async def test_build_from_stored_settings_gives_bound_tools() -> None:
    async with httpx.AsyncClient() as client:
        env = PackEnv(client, "http://w.test/forecast", "http://g.test/search")
        orders = ORDERS_PACK.build({"url": "http://x"}, env)
        weather = WEATHER_PACK.build({}, env)
        reg = ToolRegistry([*orders, *weather])
        assert reg.names() == ["get_current_weather", "get_order_status", "get_weather_forecast"]
        with pytest.raises(PackConfigError):
            ORDERS_PACK.build({"url": "nope"}, env)
