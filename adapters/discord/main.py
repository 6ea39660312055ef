"""`bot discord`: the composition root that puts the Discord adapter on the core."""

from __future__ import annotations

import sys

from bot.config import Settings

EXIT_UNAVAILABLE = 3


async def main(settings: Settings) -> int:
    print("bot: the Discord adapter is not part of this version yet", file=sys.stderr)
    return EXIT_UNAVAILABLE
