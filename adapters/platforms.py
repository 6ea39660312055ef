"""The composition root of platforms: which adapters this bot has, in one plain list.

The CLI (`bot slack`, `bot discord`, their help), `bot doctor` and the core's rules per
platform (`bot.platforms`) all read this list; adding a platform is a traits module and a line
here. Only the traits modules are imported, never a platform library.
"""

from __future__ import annotations

from adapters.discord.traits import DISCORD
from adapters.slack.traits import SLACK
from bot import platforms as core_platforms
from bot.platforms import PlatformTraits

PLATFORMS: tuple[PlatformTraits, ...] = (SLACK, DISCORD)


def register_platforms() -> tuple[PlatformTraits, ...]:
    """Hand every platform's traits to the core; returns them (idempotent)."""
    core_platforms.register(*PLATFORMS)
    return PLATFORMS
