"""Installable tool packs: what an admin adds to a workspace with `/tools install`.

A `ToolPack` names a set of tools, the settings an install takes (a pydantic model validated
from the `key=value` words `parse_settings` reads), which settings are secrets (never shown or
logged: use `redacted`), and how to build the tools from settings plus a `PackEnv` (the shared
HTTP client and provider URLs the caller read from its configuration; packs read no environment
variables).

Stored installs keep settings as `dict[str, str]` (`dump_config`); `build` accepts that dict or
the parsed model. Building binds pre-declared tools, so it is cheap enough to do per turn.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any, Generic, Literal, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from tools.declare import Tool
from tools.schema import field_errors

DEFAULT_WEATHER_API_URL = "https://api.open-meteo.com/v1/forecast"
DEFAULT_GEOCODING_API_URL = "https://geocoding-api.open-meteo.com/v1/search"
REDACTED = "********"

C = TypeVar("C", bound=BaseModel)
log = logging.getLogger("tools.packs")


class PackConfigError(ValueError):
    """Install settings are wrong; the message is one line, safe to show (no secret values)."""


def parse_settings(words: str | Sequence[str]) -> dict[str, str]:
    """Install settings from `url=http://x token=abc` (shell-quoted text or a list of words).

    The one key=value parser (the command layer and tests use it). A word without `=`, an empty
    key or a key given twice is a PackConfigError; the offending word is never echoed (it may be
    a secret typed without `token=`).
    """
    try:
        items = shlex.split(words) if isinstance(words, str) else list(words)
    except ValueError as exc:
        raise PackConfigError(f"cannot parse settings ({exc})") from None
    values: dict[str, str] = {}
    for n, word in enumerate(items, 1):
        key, sep, value = word.partition("=")
        key = key.strip()
        if not sep or not key:
            raise PackConfigError(f"setting {n} is not in key=value form")
        if key in values:
            raise PackConfigError(f"{key} is given twice")
        values[key] = value
    return values


@dataclass(frozen=True, slots=True)
class PackEnv:
    """What packs need from the bot: one shared HTTP client and the provider endpoints.

    `tool_http` is the client for URLs a team's admin typed (orders, MCP): it only reaches the
    hosts the operator allows (`tools.netguard`). `http` is for the operator's own endpoints.
    """

    http: httpx.AsyncClient
    weather_api_url: str = DEFAULT_WEATHER_API_URL
    geocoding_api_url: str = DEFAULT_GEOCODING_API_URL
    tool_http: httpx.AsyncClient | None = None

    @property
    def guarded_http(self) -> httpx.AsyncClient:
        return self.tool_http if self.tool_http is not None else self.http


class NoConfig(BaseModel):
    """For packs that take no settings."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True, slots=True)
class ToolPack(Generic[C]):
    name: str
    description: str
    config_model: type[C]
    builder: Callable[[C, PackEnv], Sequence[Tool]]
    tool_names: tuple[str, ...]
    secret_keys: frozenset[str] = field(default_factory=frozenset)
    # One circuit breaker for the whole pack (a shared public API such as the weather's), or
    # one per install (each team's own service).
    breaker_scope: Literal["pack", "install"] = "install"

    def load_config(self, data: Mapping[str, Any]) -> C:
        """Validate stored or parsed settings; errors name fields, never echo values."""
        allowed = list(self.config_model.model_fields)
        unknown = sorted(set(data) - set(allowed))
        if unknown:
            if not allowed:
                raise PackConfigError(f"{self.name} takes no settings (got {', '.join(unknown)})")
            raise PackConfigError(
                f"{self.name}: unknown setting {', '.join(unknown)} (allowed: {', '.join(allowed)})"
            )
        try:
            return self.config_model.model_validate(dict(data))
        except ValidationError as exc:
            schema = self.config_model.model_json_schema()
            problems = "; ".join(f"{k}: {v}" for k, v in field_errors(exc, schema).items())
            raise PackConfigError(f"{self.name}: {problems}") from None

    def dump_config(self, config: C) -> dict[str, str]:
        """Settings as strings for storage, secrets revealed (the store must protect them)."""
        out: dict[str, str] = {}
        for key, value in config.model_dump().items():
            if value is None:
                continue
            out[key] = value.get_secret_value() if isinstance(value, SecretStr) else str(value)
        return out

    def redacted(self, config: C | Mapping[str, Any]) -> dict[str, str]:
        """Settings safe to show or log: secrets replaced by a mask (absent ones omitted)."""
        raw = config.model_dump() if isinstance(config, BaseModel) else dict(config)
        return {
            k: REDACTED if k in self.secret_keys else str(v)
            for k, v in raw.items()
            if v is not None and v != ""
        }

    def build(self, config: C | Mapping[str, Any], env: PackEnv) -> list[Tool]:
        """The pack's tools for one install. Raises PackConfigError for bad stored settings."""
        cfg = config if isinstance(config, self.config_model) else self.load_config(config)  # type: ignore[arg-type]
        return list(self.builder(cfg, env))


def redacted(pack: ToolPack[Any], config: BaseModel | Mapping[str, Any]) -> dict[str, str]:
    """Module-level form of `ToolPack.redacted`."""
    return pack.redacted(config)


ENTRY_POINT_GROUP = "chatbot.tool_packs"
_BUILT_IN = {
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


PACKS: dict[str, ToolPack[Any]]
"""Every pack this bot can install, by name."""
PACK_ERRORS: dict[str, str]
"""Entry points that did not give a usable pack: name -> one line (for `bot doctor`)."""
PACKS, PACK_ERRORS = _load_packs()
