"""The gateway intents, and what `DISCORD_MESSAGE_CONTENT` does when Discord refuses one.

The bot asks for Guilds, Guild Messages, Direct Messages and, unless `DISCORD_MESSAGE_CONTENT`
is `off`, the privileged Message Content intent. Without it Discord still sends the content of
messages that mention the bot, replies to the bot's messages and DMs, which is all the bot
answers; what is lost is the text of other messages (follow-ups in a thread the bot answers
without a new mention arrive empty).

`auto` (the default) asks for it and runs on without it when it is not granted: before
connecting when the application's flags (read at login) show it is not enabled in the
Developer Portal, and after a gateway close 4014 when Discord refuses it anyway (the single
connection reconnects without it; a sharded client, which discord.py closes on 4014, stops with
the one line, and the flags check covers that case in practice). Either way one warning line
says what is lost and where to enable it. `on` stops with that line on a refusal.
"""

from __future__ import annotations

import logging

import discord

from adapters.common.logs import emit

_LOG = logging.getLogger(__name__)
WITHOUT_CONTENT = (
    "running without the Message Content intent: mentions, replies to the bot and DMs are "
    "answered; follow-ups in threads without a new mention are not read. Enable it in the "
    "Developer Portal → your application → Bot → Privileged Gateway Intents"
)


def bot_intents(message_content: str = "auto") -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = message_content != "off"
    return intents


def content_granted(client: discord.Client) -> bool:
    """The application's flags (known after login) allow the Message Content intent."""
    flags = client.application_flags
    return bool(flags.gateway_message_content or flags.gateway_message_content_limited)


def asks_for_content(client: discord.Client) -> bool:
    return bool(client._connection._intents.message_content)


def go_without_content(client: discord.Client, why: str) -> None:
    """Identify without the Message Content intent from now on (one warning line)."""
    client._connection._intents.message_content = False
    emit(_LOG, "discord_message_content_off", logging.WARNING, why=why, advice=WITHOUT_CONTENT)
