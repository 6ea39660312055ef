"""How often the bot may answer another bot in one place, so two bots can never loop.

A fixed window counted with the shared `Cache.incr` (Redis across replicas when configured):
the first answer to a bot in a place starts a 10-minute counter; answers 1..5 pass, later
mentions are dropped quietly until the counter expires (the cooldown). Logged once per window.
"""

from __future__ import annotations

import logging

from bot.keys import TeamKey
from bot.stores.protocols import Cache

log = logging.getLogger(__name__)

PAIR_LIMIT = 5
PAIR_WINDOW_S = 600.0


class BotPairBudget:
    """Admits at most `limit` answers to the same other bot in a place per `window` seconds."""

    def __init__(
        self, cache: Cache, *, limit: int = PAIR_LIMIT, window: float = PAIR_WINDOW_S
    ) -> None:
        self.cache = cache
        self.limit = limit
        self.window = window

    async def admit(self, team: TeamKey, channel: str, other_bot: str) -> bool:
        """True if this answer to `other_bot` fits the window; False during the cooldown."""
        key = f"botpair:{team.platform}:{team.team}:{channel}:{other_bot}"
        (count,) = await self.cache.incr([key], ttl=self.window)
        if count == self.limit + 1:
            log.info(
                "bot_pair_cooldown",
                extra={"fields": {"team": team.team, "channel": channel, "bot": other_bot}},
            )
        return count <= self.limit
