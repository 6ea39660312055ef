"""The few settings the Slack adapter needs, passed in explicitly.

The adapter does not import `bot.config`: `bot slack` calls `SlackConfig.from_settings(settings,
slack)` (the core's settings and Slack's own, `adapters.slack.settings`), which only reads
attributes, so the adapter can be tested and reused without the settings models.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from adapters.slack.budget import DEFAULT_PER_MINUTE
from adapters.slack.settings import DEFAULT_API_URL

# Bot scopes the app asks for at OAuth install; keep in sync with manifest.yaml.
DEFAULT_SCOPES: tuple[str, ...] = (
    "app_mentions:read",
    "assistant:write",
    "channels:history",
    "channels:read",
    "chat:write",
    "commands",
    "files:read",
    "files:write",
    "groups:history",
    "groups:read",
    "im:history",
    "mpim:history",
    "reactions:write",
    "users:read",
)

DEFAULT_PROMPTS: tuple[tuple[str, str], ...] = (
    ("What do you remember about me?", "What do you remember about me?"),
    ("Remember a preference", "Please remember that I prefer short answers."),
    ("Weather", "What's the weather like in Paris today?"),
)


class SlackConfigError(ValueError):
    """A missing or inconsistent Slack setting; the message names the environment variable."""


@dataclass(frozen=True)
class SlackConfig:
    """Everything the Slack adapter reads. Tokens live here only; they are never logged."""

    signing_secret: str = ""
    bot_token: str | None = None
    app_token: str | None = None
    client_id: str | None = None
    client_secret: str | None = None
    api_url: str = DEFAULT_API_URL
    http_host: str = "0.0.0.0"
    http_port: int = 3000
    # OAuth install
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    redirect_uri: str | None = None
    authorization_url: str = "https://slack.com/oauth/v2/authorize"
    installation_cache_seconds: float = 60.0
    # behaviour
    allow_bot_messages: bool = False
    streaming: bool = True
    update_interval: float = 1.0
    stream_interval: float = 0.5
    # Show progress only once an answer is this long or this old: quick short answers then go
    # out as one chat.postMessage instead of start/append/stop (fewer calls, no flicker).
    first_flush_chars: int = 160
    first_flush_seconds: float = 0.6
    message_limit: int = 3900
    stream_limit: int = 12000
    file_threshold: int = 12000
    working_reaction: str = "eyes"
    # The working reaction shows only on answers slower than this (a timer started by
    # working(), cancelled by a quicker answer): a quick answer is one Web API call, not three.
    # 0 adds it at once.
    working_reaction_delay: float = 1.0
    thinking_status: str = "is thinking..."
    suggested_prompts: tuple[tuple[str, str], ...] = DEFAULT_PROMPTS
    max_concurrent_turns: int = 256
    rate_limit_retries: int = 3
    # Per-team, per-method budget of the reply's progress calls, in calls a minute (Slack's
    # documented tier floors; see adapters/slack/budget.py). Progress over it is skipped.
    progress_per_minute: tuple[tuple[str, float], ...] = tuple(DEFAULT_PER_MINUTE.items())
    # How long a final reply call may wait out Slack's Retry-After (in all), and the working
    # reaction's / status's clean-up.
    final_wait_seconds: float = 30.0
    cleanup_wait_seconds: float = 5.0
    # OAuth installations with token rotation (tokens live 12 hours) are rotated this long
    # before they expire: longer than a turn (BOT_TURN_TIMEOUT) plus the inbox's queueing.
    token_rotation_minutes: int = 15
    token_rotation_wait_seconds: float = 2.0
    # HTTP intake: body cap (Slack's own payloads are far smaller), time to receive a body,
    # and time a connection may stay without a complete request head (slowloris).
    max_body_bytes: int = 2 * 1024 * 1024
    body_timeout: float = 10.0
    idle_timeout: float = 10.0
    shutdown_grace_seconds: float = 20.0
    # How often approval requests past BOT_APPROVAL_TTL are looked for (`adapters.slack.approvals`).
    approval_sweep_seconds: float = 5.0

    @property
    def socket_mode(self) -> bool:
        return bool(self.app_token)

    @property
    def oauth_enabled(self) -> bool:
        return bool(self.client_id and self.client_secret)

    def validate(self) -> None:
        """Fail with one line naming the variable, never deep inside a request."""
        if self.socket_mode and not (self.app_token or "").startswith("xapp-"):
            raise SlackConfigError("SLACK_APP_TOKEN must be an app-level token starting with xapp-")
        if not self.socket_mode and not self.signing_secret:
            raise SlackConfigError("SLACK_SIGNING_SECRET is required to serve Slack over HTTP")
        if bool(self.client_id) != bool(self.client_secret):
            raise SlackConfigError("SLACK_CLIENT_ID and SLACK_CLIENT_SECRET must be set together")
        if not self.oauth_enabled and not self.bot_token:
            raise SlackConfigError(
                "SLACK_BOT_TOKEN is required (or SLACK_CLIENT_ID/SLACK_CLIENT_SECRET for OAuth)"
            )
        if self.bot_token and not self.oauth_enabled and self.bot_token.startswith("xoxe."):
            raise SlackConfigError(
                "SLACK_BOT_TOKEN is a rotating token (xoxe.…, it expires in 12 hours): turn "
                "token rotation off for a single-workspace app, or install with "
                "SLACK_CLIENT_ID/SLACK_CLIENT_SECRET (OAuth installations are rotated)"
            )
        if self.bot_token and not self.oauth_enabled and not self.bot_token.startswith("xoxb-"):
            raise SlackConfigError("SLACK_BOT_TOKEN must be a bot token starting with xoxb-")
        if not self.api_url.startswith(("http://", "https://")):
            raise SlackConfigError("SLACK_API_URL must be an http(s) URL")

    @cached_property
    def progress_rates(self) -> dict[str, float]:
        """`progress_per_minute` as a mapping (built once per config)."""
        return dict(self.progress_per_minute)

    @property
    def base_url(self) -> str:
        """`SLACK_API_URL` with the trailing slash slack_sdk needs."""
        return self.api_url if self.api_url.endswith("/") else self.api_url + "/"

    @classmethod
    def from_settings(cls, settings: Any, slack: Any = None, **overrides: Any) -> SlackConfig:
        """Build from the core's settings (`bot_http_*`) and Slack's (`SlackSettings`, the
        `slack_*` names; read from `settings` when not given), duck-typed."""

        def get(name: str, default: Any = None) -> Any:
            source = slack if slack is not None and name.startswith("slack_") else settings
            value = getattr(source, name, default)
            if hasattr(value, "get_secret_value"):
                value = value.get_secret_value()
            return default if value in (None, "") else value

        values: dict[str, Any] = {
            "signing_secret": get("slack_signing_secret", ""),
            "bot_token": get("slack_bot_token"),
            "app_token": get("slack_app_token"),
            "client_id": get("slack_client_id"),
            "client_secret": get("slack_client_secret"),
            "api_url": str(get("slack_api_url", DEFAULT_API_URL)),
            "http_host": get("bot_http_host", "0.0.0.0"),
            "http_port": int(get("bot_http_port", 3000)),
        }
        values.update(overrides)
        return cls(**values)
