"""Configuration from the environment and `.env` (pydantic-settings).

Names are the design's contract. `load_settings()` turns any problem into `ConfigError` with one
line naming the variable, which the CLI prints instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot import platforms
from bot.ratelimit import Rate
from bot.secrets import fernet_key
from tools.netguard import HostPolicy

DEFAULT_MODEL = "gpt-4o-mini"
_S = TypeVar("_S", bound=BaseSettings)


class ConfigError(Exception):
    """A missing or malformed setting; the message is one line naming the variable."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    bot_model: str = DEFAULT_MODEL
    bot_context_tokens: int = Field(default=8000, ge=512, le=2_000_000)
    bot_model_timeout: float = Field(default=60.0, gt=0)
    bot_model_retries: int = Field(default=3, ge=0, le=10)
    bot_turn_timeout: float = Field(default=120.0, gt=0)
    bot_max_tool_rounds: int = Field(default=5, ge=1, le=20)
    # Tool calls that run per model response / per turn; more get a `limit_exceeded` result.
    bot_max_tool_calls_per_round: int = Field(default=10, ge=1, le=100)
    bot_max_tool_calls: int = Field(default=30, ge=1, le=500)
    bot_reply_tokens: int = Field(default=1024, ge=64)
    # Turn admission (bot.ratelimit): "N/SECONDS" per person and per team, or "off"; and the
    # most turns of one team waiting or running in one process (0: no bound).
    bot_rate_user: str = "20/60"
    bot_rate_team: str = "600/60"
    # OpenTelemetry traces (bot.tracing; the `otel` extra): off | console | otlp.
    bot_tracing: str = Field(default="off", pattern="^(off|console|otlp)$")
    bot_team_queue: int = Field(default=100, ge=0, le=100_000)

    # Files people share (bot.files): count, size and time limits; images as image parts.
    bot_max_files: int = Field(default=5, ge=1, le=50)
    bot_vision: Literal["auto", "on", "off"] = "auto"
    bot_file_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1024, le=512 * 1024 * 1024)
    bot_files_max_total_bytes: int = Field(default=25 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    bot_file_timeout: float = Field(default=20.0, gt=0, le=600)

    mongodb_uri: str | None = None
    mongodb_db: str = "bot"
    redis_url: str | None = None
    # Every Redis key the bot writes starts with this, so several bots (or test runs) can share
    # one Redis without seeing each other's sessions, locks or de-duplication marks.
    bot_redis_prefix: str = Field(default="bot:", min_length=1, max_length=100)
    bot_data_dir: Path = Path("./.bot-data")
    # The durable inbox between a platform's ack and the turn (bot.inbox): `auto` is Redis
    # Streams with REDIS_URL, else a table of the SQLite store; `off` handles events in memory.
    bot_inbox: Literal["auto", "off"] = "auto"
    # Seconds a worker's entry may go unrenewed before another worker takes it over.
    bot_inbox_claim_seconds: float = Field(default=20.0, ge=0.5, le=3600)
    # /healthz fails when the oldest unhandled entry is older than this.
    bot_inbox_max_age_seconds: float = Field(default=300.0, gt=0)
    bot_session_ttl: float = Field(default=1800.0, gt=0)
    # How long a tool call waiting for the person's approval stays valid (bot.approvals):
    # seconds, or a number with s, m or h ("90s", "10m", "1h"); at most a week.
    bot_approval_ttl: float = Field(default=600.0, gt=0, le=7 * 86400)
    # The event loop of `bot slack|discord`: uvloop when installed (auto), or asyncio's own.
    bot_event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    # Embeddings for long-term memory: local | none | a model at the endpoint; unset = local
    # when the `embeddings` extra is installed, else none (bot.embeddings.factory).
    bot_embedding_model: str | None = None

    bot_http_host: str = "0.0.0.0"
    # `bot slack` over HTTP: worker processes on this host sharing the port (bot.workers).
    bot_workers: str = "1"
    bot_http_port: int = Field(default=3000, ge=0, le=65535)

    weather_api_url: str = "https://api.open-meteo.com/v1/forecast"
    geocoding_api_url: str = "https://geocoding-api.open-meteo.com/v1/search"

    bot_admins: str = ""
    # Models an admin may choose per team or channel (`/config set model=`); BOT_MODEL always.
    bot_models: str = ""
    # Prices per model (bot.usage.prices): `model=INPUT/CACHED_INPUT/OUTPUT;...`, $ per 1M tokens.
    bot_prices: str = ""
    # Hosts/CIDRs that team-installed packs (orders, mcp) may reach; see tools.netguard.
    bot_tool_hosts: str | None = None
    # Long-term consolidation (bot.memory.consolidation): when, how wide, how costly; retention.
    bot_consolidate_cron: str = "0 3 * * *"
    bot_consolidate_concurrency: int = Field(default=4, ge=1, le=64)
    bot_consolidate_max_tokens: int = Field(default=2_000_000, ge=1000)
    bot_retention_days: int | None = Field(default=None, ge=1)
    # Encrypts tool-pack secrets and platform installations at rest (bot.secrets); unset = plain.
    bot_secret_key: SecretStr | None = None
    # Where people's browsers reach the bot's HTTP server (per-person tool sign-ins end at
    # BOT_PUBLIC_URL/oauth/callback); unset: `auth=user` tool packs cannot be connected.
    bot_public_url: str | None = None
    bot_log_level: str | None = (
        None  # default: WARNING for `bot chat` (keeps the chat readable), else INFO
    )

    @field_validator(
        "openai_base_url",
        "mongodb_uri",
        "redis_url",
        "bot_secret_key",
        "bot_public_url",
        "bot_embedding_model",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("openai_base_url", "weather_api_url", "geocoding_api_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("bot_prices")
    @classmethod
    def _prices(cls, value: str) -> str:
        from bot.usage.prices import parse_prices

        parse_prices(value)
        return value

    @field_validator("bot_workers")
    @classmethod
    def _workers(cls, value: str) -> str:
        from bot.workers import parse_workers

        parse_workers(value)  # ValueError says what is expected
        return value.strip()

    @field_validator("bot_rate_user", "bot_rate_team")
    @classmethod
    def _rate(cls, value: str) -> str:
        Rate.parse(value)  # ValueError says what shape is expected
        return value.strip()

    @field_validator("bot_approval_ttl", mode="before")
    @classmethod
    def _approval_ttl(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        text = value.strip().casefold()
        unit = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], 0)
        number = text[:-1] if unit else text
        try:
            return float(number) * (unit or 1)
        except ValueError:
            raise ValueError("a duration such as 90s, 10m or 1h") from None

    @field_validator("bot_retention_days", mode="before")
    @classmethod
    def _blank_retention(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("bot_consolidate_cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from apscheduler.triggers.cron import CronTrigger

        try:
            CronTrigger.from_crontab(value.strip(), timezone="UTC")
        except ValueError as exc:
            raise ValueError(f"not a 5-field cron expression ({exc})") from None
        return value.strip()

    @field_validator("bot_log_level")
    @classmethod
    def _log_level(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if value.strip().upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return value.strip().upper()

    @field_validator("mongodb_uri")
    @classmethod
    def _mongo_uri(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("mongodb://", "mongodb+srv://")):
            raise ValueError("must start with mongodb:// or mongodb+srv://")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value

    @field_validator("bot_tool_hosts")
    @classmethod
    def _tool_hosts(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            HostPolicy.from_setting(value, multi_tenant=True)  # ValueError names the entry
            return value
        return None

    @field_validator("bot_redis_prefix")
    @classmethod
    def _redis_prefix(cls, value: str) -> str:
        if not value.strip() or any(c.isspace() or c in "*?[]" for c in value):
            raise ValueError("must be non-empty, without spaces or glob characters (* ? [ ])")
        return value

    @field_validator("bot_public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from urllib.parse import urlsplit

        value = value.strip().rstrip("/")
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError("must be a plain base URL (no query, fragment or credentials)")
        return value

    @field_validator("bot_secret_key")
    @classmethod
    def _secret_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            fernet_key(value.get_secret_value())  # ValueError names no value
        return value

    @field_validator("bot_vision", mode="before")
    @classmethod
    def _vision(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @property
    def multi_tenant(self) -> bool:
        """Several workspaces/guilds can install packs here (a registered platform says so, from
        its own settings): their admins are not the operator, so pack URLs reach public
        addresses only unless BOT_TOOL_HOSTS."""
        return platforms.multi_tenant()

    def host_policy(self) -> HostPolicy:
        return HostPolicy.from_setting(self.bot_tool_hosts, multi_tenant=self.multi_tenant)

    @property
    def admin_ids(self) -> frozenset[str]:
        return frozenset(part.strip() for part in self.bot_admins.split(",") if part.strip())

    def allowed_models(self) -> frozenset[str]:
        """BOT_MODELS as a set, BOT_MODEL included."""
        named = (part.strip() for part in self.bot_models.split(","))
        return frozenset(m for m in named if m) | {self.bot_model}

    def require_openai_key(self) -> str:
        if self.openai_api_key is None or not self.openai_api_key.get_secret_value().strip():
            raise ConfigError(
                "OPENAI_API_KEY is not set: set it to your model endpoint's key "
                "(any non-empty value for a local server that needs none)"
            )
        return self.openai_api_key.get_secret_value()


def load_settings(**overrides: Any) -> Settings:
    """Read settings; raise ConfigError with one line naming the first bad variable."""
    return read_settings(Settings, **overrides)


def read_settings(kind: type[_S], **overrides: Any) -> _S:
    """Read any settings class (the core's, an adapter's) from the environment and `.env`;
    ConfigError with one line naming the first bad variable."""
    try:
        return kind(**overrides)
    except (UnicodeDecodeError, OSError) as exc:
        raise ConfigError(
            f".env could not be read ({type(exc).__name__}): save it as UTF-8"
        ) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]).upper() if err["loc"] else "configuration"
        raise ConfigError(f"{name} is invalid: {err['msg']}") from None
