"""conversations.info lookups: is a channel private (a private channel, a group DM, or a channel
shared with another organisation)?

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
# A place whose readers are not (only) the team's own members: a private channel, a group DM, a
# DM, and a channel shared with another organisation (Slack Connect: `is_ext_shared`; an
# org-wide or pending share likewise), whose replies people outside the workspace read.
_NOT_THE_TEAMS = (
    "is_private",
    "is_mpim",
    "is_im",
    "is_ext_shared",
    "is_org_shared",
    "is_pending_ext_shared",
    "is_shared",
)


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
        private = any(data.get(flag) for flag in _NOT_THE_TEAMS)
        self._private[key] = private
        return private
