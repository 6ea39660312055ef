"""Risk per tool and the `approve` setting (bot.approvals.risk, bot.policy)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from mcp import types

from bot.approvals.risk import needs_approval, risk_of
from bot.memory.remember import remember
from bot.policy import DEFAULT_POLICY, parse_value, resolve
from tools.mcp.pack import adapt
from tools.packs.orders import get_order_status
from tools.packs.weather import get_current_weather, get_weather_forecast


def policy(**values: str):  # type: ignore[no-untyped-def]
    return resolve({}, values, models=frozenset({"m"}), default_model="m")


def mcp_tools(annotations: dict[str, types.ToolAnnotations | None]) -> dict[str, object]:
    listing = [
        types.Tool(
            name=name,
            description=name,
            inputSchema={"type": "object", "properties": {}},
            annotations=ann,
        )
        for name, ann in annotations.items()
    ]
    conn = SimpleNamespace(call_timeout=5.0, call_cap=120.0)  # read for timeouts: nothing is called
    return {t.name: t for t in adapt("crm", listing, conn, allow=None)}  # type: ignore[arg-type]


def test_builtin_lookups_read_and_remember_never_waits() -> None:
    for tool in (get_order_status, get_current_weather, get_weather_forecast, remember):
        assert risk_of(tool, DEFAULT_POLICY) == "read"
        assert not needs_approval(tool, policy(approve="all")) or tool is not remember
    assert not needs_approval(remember, policy(approve="all"))


def test_mcp_only_read_only_hint_reads() -> None:
    tools = mcp_tools(
        {
            "search": types.ToolAnnotations(readOnlyHint=True),
            "create": types.ToolAnnotations(readOnlyHint=False),
            "bare": None,
            "vague": types.ToolAnnotations(title="Vague", destructiveHint=False),
        }
    )
    risks = {name: risk_of(t, DEFAULT_POLICY) for name, t in tools.items()}  # type: ignore[arg-type]
    assert risks == {
        "crm_search": "read",
        "crm_create": "write",
        "crm_bare": "write",
        "crm_vague": "write",
    }


def test_approve_setting_and_admin_overrides() -> None:
    tools = mcp_tools({"search": types.ToolAnnotations(readOnlyHint=True), "create": None})
    search, create = tools["crm_search"], tools["crm_create"]
    assert not needs_approval(search, DEFAULT_POLICY)  # type: ignore[arg-type]
    assert needs_approval(create, DEFAULT_POLICY)  # type: ignore[arg-type]
    every = policy(approve="all")
    assert needs_approval(search, every) and needs_approval(create, every)  # type: ignore[arg-type]
    off = policy(approve="none")
    assert not needs_approval(search, off) and not needs_approval(create, off)  # type: ignore[arg-type]
    # The admin marks the server's "read-only" tool write: the hint does not skip approval.
    marked = policy(tool_risk="crm_search=write,crm_create=read")
    assert needs_approval(search, marked) and not needs_approval(create, marked)  # type: ignore[arg-type]
    assert risk_of(search, marked) == "write"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("approve", "sometimes"),
        ("tool_risk", "x=maybe"),
        ("tool_risk", "=write"),
        ("tool_risk", "x"),
    ],
)
def test_bad_values_are_refused(key: str, value: str) -> None:
    with pytest.raises(ValueError):
        parse_value(key, value, models=frozenset())


def test_tool_risk_parses_and_shows_sorted() -> None:
    assert parse_value("tool_risk", "b=WRITE, a=read", models=frozenset()) == (
        ("a", "read"),
        ("b", "write"),
    )
    assert parse_value("tool_risk", "none", models=frozenset()) == ()
    assert policy(tool_risk="a=read").risk_override("a") == "read"
    assert policy().approve == "writes"


@pytest.mark.parametrize(
    ("raw", "seconds"), [("10m", 600.0), ("90s", 90.0), ("1h", 3600.0), ("45", 45.0)]
)
def test_approval_ttl_reads_durations(raw: str, seconds: float) -> None:
    from bot.config import Settings

    assert Settings(bot_approval_ttl=raw).bot_approval_ttl == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", ["soon", "-5m", "30d", "9999h"])
def test_approval_ttl_refuses_bad_values(raw: str) -> None:
    from pydantic import ValidationError

    from bot.config import Settings

    with pytest.raises(ValidationError):
        Settings(bot_approval_ttl=raw)  # type: ignore[arg-type]
