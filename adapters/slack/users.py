"""users.info lookups: display names for readable mentions, admin flags for /tools.

Names are cached per team for a while (people rarely rename); admin checks for slash commands
ask Slack fresh, since a demoted admin must lose rights at once. Concurrent lookups of the same
person share one request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from cachetools import TTLCache
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.errors import api_failed

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SlackUser:
    id: str
    name: str
    is_admin: bool = False
    is_owner: bool = False
    is_bot: bool = False

    @property
    def is_platform_admin(self) -> bool:
        return self.is_admin or self.is_owner


class UserDirectory:
    def __init__(self, *, ttl: float = 600.0, maxsize: int = 20_000, max_lookups: int = 10) -> None:
        self._cache: TTLCache[tuple[str, str], SlackUser] = TTLCache(maxsize, ttl)
        self._inflight: dict[tuple[str, str], asyncio.Future[SlackUser | None]] = {}
        self._max_lookups = max_lookups

    async def get(
        self, client: AsyncWebClient, team: str, user_id: str, *, fresh: bool = False
    ) -> SlackUser | None:
        key = (team, user_id)
        if not fresh:
            cached = self._cache.get(key)
            if cached is not None:
                return cached
            pending = self._inflight.get(key)
            if pending is not None:
                return await asyncio.shield(pending)
        future: asyncio.Future[SlackUser | None] = asyncio.get_running_loop().create_future()
        if not fresh:
            self._inflight[key] = future
        try:
            user = await self._fetch(client, user_id)
            if user is not None:
                self._cache[key] = user
            future.set_result(user)
            return user
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise, nobody logs "never retrieved"
            raise
        finally:
            if self._inflight.get(key) is future:
                del self._inflight[key]

    async def names(
        self, client: AsyncWebClient, team: str, user_ids: Iterable[str]
    ) -> dict[str, str]:
        """Display names for up to `max_lookups` users; unknown ones are simply left out."""
        wanted = list(dict.fromkeys(user_ids))[: self._max_lookups]
        found = await asyncio.gather(*(self.get(client, team, uid) for uid in wanted))
        return {u.id: u.name for u in found if u is not None}

    @staticmethod
    async def _fetch(client: AsyncWebClient, user_id: str) -> SlackUser | None:
        try:
            resp = await client.users_info(user=user_id)
        except Exception as exc:
            api_failed(_LOG, "users.info", exc)
            return None
        data = resp.get("user") or {}
        profile = data.get("profile") or {}
        name = (
            profile.get("display_name")
            or profile.get("real_name")
            or data.get("real_name")
            or data.get("name")
            or user_id
        )
        return SlackUser(
            id=user_id,
            name=str(name),
            is_admin=bool(data.get("is_admin")),
            is_owner=bool(data.get("is_owner") or data.get("is_primary_owner")),
            is_bot=bool(data.get("is_bot")),
        )
