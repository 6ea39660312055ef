"""Installable tool packs: what an admin adds to a workspace with `/tools install`.

The types live in `tools.packs.base` (a pack module imports them from there). `PACKS` is every
pack this bot can install, found through the `chatbot.tool_packs` entry-point group on first use
(so importing a pack module on its own never loads the others).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any

from tools.packs.base import (
    DEFAULT_GEOCODING_API_URL,
    DEFAULT_WEATHER_API_URL,
    REDACTED,
    NoConfig,
    PackConfigError,
    PackEnv,
    PackUnavailable,
    ToolPack,
    parse_settings,
    redacted,
)

__all__ = [
    "DEFAULT_GEOCODING_API_URL",
    "DEFAULT_WEATHER_API_URL",
    "ENTRY_POINT_GROUP",
    "PACKS",
    "PACK_ERRORS",
    "REDACTED",
    "NoConfig",
    "PackConfigError",
    "PackEnv",
    "PackUnavailable",
    "ToolPack",
    "parse_settings",
    "redacted",
]

log = logging.getLogger("tools.packs")

ENTRY_POINT_GROUP = "chatbot.tool_packs"
_BUILT_IN = {
    "mcp": "tools.mcp.pack:MCP_PACK",
    "orders": "tools.packs.orders:ORDERS_PACK",
    "weather": "tools.packs.weather:WEATHER_PACK",
}


def _load_packs() -> tuple[dict[str, ToolPack[Any]], dict[str, str]]:
    """Packs registered under the `chatbot.tool_packs` entry-point group (the built-ins are
    registered there too, by this distribution's pyproject.toml).

    A pack that fails to import, is not a `ToolPack`, or clashes with another's name is left out
    and reported (`PACK_ERRORS`, the log, `bot doctor`); it never stops the bot. The built-ins
    are also loaded directly when the distribution's metadata is missing (a bare source tree).
    """
    packs: dict[str, ToolPack[Any]] = {}
    errors: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()
    found = [(ep.name, ep.value, ep.load) for ep in entry_points(group=ENTRY_POINT_GROUP)]
    for name, target in _BUILT_IN.items():
        if not any(n == name for n, _v, _l in found):
            found.append((name, target, _importer(target)))
    for name, target, load in sorted(found, key=lambda f: (f[1] not in _BUILT_IN.values(), f[0])):
        key = f"{name} ({target})"
        if (name, target) in seen:
            continue
        seen.add((name, target))
        try:
            pack = load()
        except Exception as exc:  # a third-party pack may raise anything while importing
            errors[name] = f"cannot be loaded from {target}: {type(exc).__name__}: {exc}"[:300]
            # One line, no traceback: the reason is in PACK_ERRORS and `bot doctor`.
            log.error(
                "tool_pack_load_failed", extra={"fields": {"pack": key, "error": errors[name]}}
            )
            continue
        if not isinstance(pack, ToolPack):
            errors[name] = f"{target} is a {type(pack).__name__}, not a ToolPack"
            log.error("tool_pack_invalid", extra={"fields": {"pack": key}})
            continue
        if pack.name in packs:
            errors[name] = f"{target} names itself {pack.name!r}, which another pack already uses"
            log.error("tool_pack_duplicate", extra={"fields": {"pack": key}})
            continue
        packs[pack.name] = pack
    return packs, errors


def _importer(target: str) -> Callable[[], Any]:
    def load() -> Any:
        module, _, attr = target.partition(":")
        return getattr(import_module(module), attr)

    return load


PACKS: dict[str, ToolPack[Any]]  # bound lazily by __getattr__ below
PACK_ERRORS: dict[str, str]
_loaded: tuple[dict[str, ToolPack[Any]], dict[str, str]] | None = None


def __getattr__(name: str) -> Any:
    """`PACKS` (every pack by name) and `PACK_ERRORS` (entry points that gave no usable pack:
    name -> one line, for `bot doctor`), loaded once, on first use."""
    global _loaded
    if name in ("PACKS", "PACK_ERRORS"):
        if _loaded is None:
            _loaded = _load_packs()
        return _loaded[0] if name == "PACKS" else _loaded[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
