"""Tool packs: install settings parsed from key=value words, secrets masked, tools built."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tools.packs import (
    PACKS,
    REDACTED,
    PackConfigError,
    PackEnv,
    ToolPack,
    parse_settings,
    redacted,
)
from tools.packs.orders import ORDERS_PACK, OrdersConfig
from tools.packs.weather import WEATHER_PACK
from tools.registry import ToolRegistry


def _load(pack: ToolPack[Any], words: str | list[str]) -> Any:
    return pack.load_config(parse_settings(words))


def test_registry_of_packs() -> None:
    assert set(PACKS) == {"orders", "weather"}
    assert PACKS["orders"].tool_names == ("get_order_status",)
    assert PACKS["weather"].tool_names == ("get_current_weather", "get_weather_forecast")
    assert all(p.description for p in PACKS.values())


def test_orders_settings_from_words() -> None:
    cfg = _load(ORDERS_PACK, "url=http://orders.internal:8081/ token=abc")
    assert isinstance(cfg, OrdersConfig)
    assert cfg.url == "http://orders.internal:8081"
    assert cfg.token is not None and cfg.token.get_secret_value() == "abc"
    assert "abc" not in repr(cfg) and "abc" not in str(cfg)
    quoted = _load(ORDERS_PACK, ["url=https://x.example/api", "token=a b=c"])
    assert quoted.token is not None and quoted.token.get_secret_value() == "a b=c"
    assert _load(ORDERS_PACK, "url=https://x.example").token is None
    assert _load(ORDERS_PACK, "url=https://x.example token=").token is None


@pytest.mark.parametrize(
    ("words", "message"),
    [
        ("", "orders: url: required"),
        ("token=abc", "orders: url: required"),
        ("url=ftp://x", "url: must be an http:// or https:// URL"),
        ("url=notaurl", "url: must be an http:// or https:// URL"),
        ("url=http://x colour=red", "unknown setting colour (allowed: url, token)"),
        ("url=http://x url=http://y", "url is given twice"),
        ("url=http://x token=a token=b", "token is given twice"),
        ("url=http://x s3cr3t-token", "setting 2 is not in key=value form"),
        ('url="http://x', "cannot parse settings"),
    ],
)
def test_orders_settings_errors(words: str, message: str) -> None:
    with pytest.raises(PackConfigError) as info:
        _load(ORDERS_PACK, words)
    assert message in str(info.value)
    assert "s3cr3t" not in str(info.value)
    assert "\n" not in str(info.value)


def test_one_parser_for_the_command_and_the_packs() -> None:
    """`/tools install` and the packs share `parse_settings`: the duplicate-key check holds in
    the command too (the command once had its own parser where the last value silently won)."""
    import bot.commands
    import tools.packs

    assert not hasattr(ToolPack, "parse_args")
    assert bot.commands.parse_settings is tools.packs.parse_settings
    assert parse_settings(["a=1", "b= x "]) == {"a": "1", "b": " x "}


def test_weather_takes_no_settings() -> None:
    _load(WEATHER_PACK, "")
    with pytest.raises(PackConfigError, match="weather takes no settings"):
        _load(WEATHER_PACK, "key=1")


def test_secrets_are_redacted_and_dumped_for_storage() -> None:
    cfg = _load(ORDERS_PACK, "url=http://x token=abc")
    assert ORDERS_PACK.redacted(cfg) == {"url": "http://x", "token": REDACTED}
    stored = ORDERS_PACK.dump_config(cfg)
    assert stored == {"url": "http://x", "token": "abc"}
    assert redacted(ORDERS_PACK, stored) == {"url": "http://x", "token": REDACTED}
    assert ORDERS_PACK.redacted(_load(ORDERS_PACK, "url=http://x")) == {"url": "http://x"}
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
