"""What the core needs to know about Discord, handed to it as data (`bot.platforms`).

Imports nothing of discord.py, so listing the platforms (`bot --help`, `bot chat`) stays cheap.
"""

from __future__ import annotations

from bot.platforms import PlatformTraits

INBOX_KIND = "discord.message"  # what the adapter writes to the durable inbox

EPOCH_MS = 1_420_070_400_000  # Discord's epoch (2015-01-01), the base of snowflake times


def _snowflake_time(message_id: str) -> float | None:
    """A snowflake holds its milliseconds since Discord's epoch in its upper bits."""
    try:
        return ((int(message_id) >> 22) + EPOCH_MS) / 1000.0
    except (TypeError, ValueError, OverflowError):
        return None


def _configured() -> bool:
    from adapters.discord.settings import load_discord_settings

    return load_discord_settings().configured


def _multi_tenant() -> bool:
    from adapters.discord.settings import load_discord_settings

    return load_discord_settings().multi_tenant


DISCORD = PlatformTraits(
    name="discord",
    display_name="Discord",
    team_word="server",
    # A DM has no guild: the adapter files it under the person's DM scope (`@dm`).
    dm_scope=True,
    # Before messages carried their audience, the adapter did not flag private channels.
    flagged_private_places=False,
    inbox_kinds=(INBOX_KIND,),
    message_time=_snowflake_time,
    library_loggers=("discord",),
    cli_help="run the Discord bot (DISCORD_TOKEN)",
    main_module="adapters.discord.main",
    configured=_configured,
    multi_tenant=_multi_tenant,
)
