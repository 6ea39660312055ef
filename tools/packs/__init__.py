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

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from tools.declare import Tool
from tools.schema import field_errors

DEFAULT_WEATHER_API_URL = "https://api.open-meteo.com/v1/forecast"
DEFAULT_GEOCODING_API_URL = "https://geocoding-api.open-meteo.com/v1/search"
REDACTED = "********"

C = TypeVar("C", bound=BaseModel)


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
    """What packs need from the bot: one shared HTTP client and the provider endpoints."""

    http: httpx.AsyncClient
    weather_api_url: str = DEFAULT_WEATHER_API_URL
    geocoding_api_url: str = DEFAULT_GEOCODING_API_URL


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


def _load_packs() -> dict[str, ToolPack[Any]]:
    from tools.packs.orders import ORDERS_PACK
    from tools.packs.weather import WEATHER_PACK

    return {p.name: p for p in (ORDERS_PACK, WEATHER_PACK)}


PACKS: dict[str, ToolPack[Any]] = _load_packs()
"""Every pack this bot can install, by name."""
