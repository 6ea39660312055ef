"""conversations.info lookups: is a channel private (a private channel or a group DM)?

Episodic memories of a private place never leave it, so the core needs to know. The answer is
cached per team and channel (a channel rarely changes visibility; a public channel turned
private is treated as public for at most the TTL). A failed lookup (missing `channels:read` /
`groups:read` scope, rate limit) counts as private: the safe side, where memories stay put.
"""

from __future__ import annotations

import logging

from cachetools import TTLCache
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.errors import api_failed

_LOG = logging.getLogger(__name__)


class ChannelDirectory:
    def __init__(self, *, ttl: float = 3600.0, maxsize: int = 20_000) -> None:
        self._private: TTLCache[tuple[str, str], bool] = TTLCache(maxsize, ttl)

    async def is_private(self, client: AsyncWebClient, team: str, channel: str) -> bool:
        key = (team, channel)
        cached = self._private.get(key)
        if cached is not None:
            return cached
        try:
            resp = await client.conversations_info(channel=channel)
        except Exception as exc:
            api_failed(_LOG, "conversations.info", exc)
            return True  # not cached: asked again next time
        data = resp.get("channel") or {}
        private = bool(data.get("is_private") or data.get("is_mpim") or data.get("is_im"))
        self._private[key] = private
        return private
