"""Where discord.py sends REST calls and opens the gateway: the one place that redirects it.

discord.py builds every REST URL (bot calls, interaction callbacks and webhooks alike) from the
class attribute `discord.http.Route.BASE`, and opens the gateway at
`DiscordWebSocket.DEFAULT_GATEWAY` (a plain `Client` always; an `AutoShardedClient` when it is
given a shard count). After READY it resumes at the `resume_gateway_url` the gateway named.
`point_discord_at` sets both, process-wide (one bot per process is how `bot discord` runs):

- `DISCORD_API_URL`: the REST base, version included (default `https://discord.com/api/v10`),
  for a REST proxy in front of Discord or a local test server;
- `DISCORD_GATEWAY_URL`: the gateway websocket; unset, the one Discord's `GET /gateway/bot`
  names (asked once at start, see `adapters.discord.main`).
"""

from __future__ import annotations

import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route

from adapters.discord.settings import DEFAULT_API_URL

__all__ = ["DEFAULT_API_URL", "point_discord_at"]


def point_discord_at(*, api_url: str, gateway_url: str | None) -> None:
    """Send discord.py's REST calls to `api_url` and, if given, its gateway to `gateway_url`."""
    Route.BASE = api_url.rstrip("/")
    if gateway_url:
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
