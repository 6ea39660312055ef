"""Discord's environment variables (DESIGN's contract names), read by the Discord adapter only.

They moved out of `bot.config.Settings` so the core names no platform; the names, defaults,
validation and the `.env` file are the same. `load_discord_settings()` fails with one line
naming the variable (`bot.config.ConfigError`). Guild ids are parsed here once
(`parse_guild_ids`), for the settings check and the adapter's config alike.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from adapters.discord.shards import parse_shard_range
from bot.config import read_settings

DEFAULT_API_URL = "https://discord.com/api/v10"
ALL_GUILDS = "*"
_MAX_SNOWFLAKE = 2**64 - 1


def parse_guild_ids(text: str, *, allow_all: bool = False) -> tuple[str, ...]:
    """Comma-separated guild ids, blanks and spaces around them dropped; ValueError otherwise.

    A guild id is a Discord snowflake: ASCII digits only (`str.isdigit` would take "²" or
    Arabic-Indic digits, which no id has) without a sign, fitting in 64 bits. `*` (every
    guild) only where `allow_all` (thread guilds; commands sync to named guilds only).
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    for part in parts:
        if part == ALL_GUILDS and allow_all:
            continue
        if not (part.isascii() and part.isdigit() and int(part) <= _MAX_SNOWFLAKE):
            what = "guild ids (numbers) or *" if allow_all else "guild ids (numbers)"
            raise ValueError(f"must be comma-separated {what}")
    return tuple(parts)


class DiscordSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    discord_token: SecretStr | None = None
    discord_api_url: str = DEFAULT_API_URL
    discord_gateway_url: str | None = None
    discord_command_guilds: str = ""  # comma-separated guild ids; empty: global commands
    # Behaviour (adapters.discord.config documents each)
    discord_shard_count: int | None = Field(default=None, ge=1, le=10_000)
    discord_shards: str = ""  # first-last: the shards this process runs (adapters.discord.shards)
    discord_thread_guilds: str = ""  # guild ids (or "*") answered in a new thread
    discord_allow_bots: bool = False
    # The privileged Message Content intent: auto (run without it when refused) | on | off
    discord_message_content: Literal["auto", "on", "off"] = "auto"

    @field_validator("discord_gateway_url", "discord_shard_count", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("discord_api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL (version included: .../api/v10)")
        return value.rstrip("/")

    @field_validator("discord_gateway_url")
    @classmethod
    def _ws_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("ws://", "wss://")):
            raise ValueError("must be a ws:// or wss:// URL")
        return value

    @field_validator("discord_shards")
    @classmethod
    def _shards(cls, value: str) -> str:
        if value.strip():
            parse_shard_range(value)  # ShardRangeError is a ValueError: "DISCORD_SHARDS is invalid"
        return value.strip()

    @field_validator("discord_command_guilds")
    @classmethod
    def _command_guilds(cls, value: str) -> str:
        return ",".join(parse_guild_ids(value))

    @field_validator("discord_thread_guilds")
    @classmethod
    def _thread_guilds(cls, value: str) -> str:
        return ",".join(parse_guild_ids(value, allow_all=True))

    @property
    def configured(self) -> bool:
        return self.discord_token is not None

    @property
    def multi_tenant(self) -> bool:
        """A Discord bot joins many guilds, whose admins can install tool packs."""
        return self.discord_token is not None


def load_discord_settings(**overrides: Any) -> DiscordSettings:
    """Read DISCORD_*; `ConfigError` with one line naming the first bad variable."""
    return read_settings(DiscordSettings, **overrides)
