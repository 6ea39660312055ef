"""Slack's environment variables (DESIGN's contract names), read by the Slack adapter only.

They moved out of `bot.config.Settings` so the core names no platform; the names, defaults,
validation and the `.env` file are the same. `load_slack_settings()` fails with one line
naming the variable (`bot.config.ConfigError`), as the core's settings do.
"""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot.config import read_settings

DEFAULT_API_URL = "https://slack.com/api/"


class SlackSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_client_id: str | None = None
    slack_client_secret: SecretStr | None = None
    slack_api_url: str = DEFAULT_API_URL

    @field_validator("slack_client_id", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("slack_api_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @property
    def configured(self) -> bool:
        return self.slack_bot_token is not None or self.slack_client_id is not None

    @property
    def multi_tenant(self) -> bool:
        """OAuth installs: several workspaces' admins can install tool packs."""
        return self.slack_client_id is not None


def load_slack_settings(**overrides: Any) -> SlackSettings:
    """Read SLACK_*; `ConfigError` with one line naming the first bad variable."""
    return read_settings(SlackSettings, **overrides)
