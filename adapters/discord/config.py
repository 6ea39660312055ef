"""The settings the Discord adapter reads, passed in explicitly (as Slack's are).

`DiscordConfig.from_settings(settings, discord)` only reads attributes (the core's settings and
Discord's own, `adapters.discord.settings`), so tests build one directly.

Behaviour settings beyond DESIGN's contract (named here, defaults in brackets):
- `DISCORD_THREAD_GUILDS` [empty]: guild ids (or `*` for all) where a mention is answered in a
  thread the bot opens on the message; elsewhere the answer is a reply in place.
- `DISCORD_ALLOW_BOTS` [false]: answer other bots' mentions too (never its own messages).
- `DISCORD_SHARD_COUNT` [unset]: run an `AutoShardedClient` with this many shards; unset, the
  bot asks Discord (`GET /gateway/bot`) and shards only when Discord recommends more than one.
- `DISCORD_SHARDS` [unset: all]: `first-last`, the shards this process runs of
  `DISCORD_SHARD_COUNT` (required with it); see `adapters.discord.shards`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapters.discord.settings import ALL_GUILDS, DEFAULT_API_URL, parse_guild_ids
from adapters.discord.shards import ShardPlan, ShardRangeError

MESSAGE_LIMIT = 2000


class DiscordConfigError(ValueError):
    """A missing or inconsistent Discord setting; the message names the environment variable."""


def _ids(text: str, variable: str, *, allow_all: bool = False) -> tuple[str, ...]:
    try:
        return parse_guild_ids(text, allow_all=allow_all)
    except ValueError as exc:
        raise DiscordConfigError(f"{variable} {exc}") from None


@dataclass(frozen=True)
class DiscordConfig:
    """Everything the Discord adapter reads. The token lives here only; it is never logged."""

    token: str
    api_url: str = DEFAULT_API_URL
    gateway_url: str | None = None
    command_guilds: tuple[int, ...] = ()
    shard_count: int | None = None
    shard_ids: tuple[int, ...] | None = None  # DISCORD_SHARDS; None: every shard of the count
    thread_guilds: frozenset[str] = frozenset()
    thread_everywhere: bool = False
    allow_bots: bool = False
    message_content: str = "auto"  # DISCORD_MESSAGE_CONTENT: auto | on | off (see intents.py)
    admins: frozenset[str] = field(default_factory=frozenset)
    http_host: str = "0.0.0.0"
    http_port: int = 3000
    # behaviour
    edit_interval: float = 1.0  # streamed replies: at most one edit per message per interval
    first_edit_chars: int = 80  # show a streamed reply once it is this long (or this old:)
    first_edit_seconds: float = 1.0
    thread_name_chars: int = 80
    command_inline_seconds: float = 2.0  # answer a command inline if ready by then, else defer
    max_concurrent_turns: int = 256
    shutdown_grace_seconds: float = 20.0
    max_ratelimit_timeout: float = 60.0  # longer rate-limit waits fail instead of hanging

    @property
    def shards(self) -> ShardPlan:
        return ShardPlan(count=self.shard_count, ids=self.shard_ids)

    def threads_in(self, guild_id: str) -> bool:
        return self.thread_everywhere or guild_id in self.thread_guilds

    @classmethod
    def from_settings(cls, settings: Any, discord: Any = None) -> DiscordConfig:
        """Build from the core's settings (admins, `bot_http_*`) and Discord's
        (`DiscordSettings`, the `discord_*` names; read from `settings` when not given)."""
        own = settings if discord is None else discord
        token = own.discord_token.get_secret_value() if own.discord_token else ""
        if not token.strip():
            raise DiscordConfigError(
                "DISCORD_TOKEN is not set: copy the bot token from the Developer Portal "
                "(your application → Bot → Reset Token)"
            )
        try:
            shards = ShardPlan.from_settings(
                getattr(own, "discord_shards", ""), own.discord_shard_count
            )
        except ShardRangeError as exc:
            raise DiscordConfigError(str(exc)) from None
        threads = _ids(own.discord_thread_guilds, "DISCORD_THREAD_GUILDS", allow_all=True)
        return cls(
            token=token.strip(),
            api_url=own.discord_api_url,
            gateway_url=own.discord_gateway_url,
            command_guilds=tuple(
                int(p) for p in _ids(own.discord_command_guilds, "DISCORD_COMMAND_GUILDS")
            ),
            shard_count=shards.count,
            shard_ids=shards.ids,
            thread_guilds=frozenset(p for p in threads if p != ALL_GUILDS),
            thread_everywhere=ALL_GUILDS in threads,
            allow_bots=own.discord_allow_bots,
            message_content=getattr(own, "discord_message_content", "auto"),
            admins=frozenset(settings.admin_ids),
            http_host=settings.bot_http_host,
            http_port=settings.bot_http_port,
        )
