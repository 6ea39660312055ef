"""Discord messages the bot hears in the guild channels it sees (MESSAGE_CREATE), for the record
a later mention there reads (`bot.memory.heard`), and the one history call made when that
record has no coverage.

Recorded: people's messages and other bots' and webhooks' posts (attachments by file name), in
guild text channels and their threads; not the bot's own, not DMs (every DM is answered and
stored). A thread's messages are kept under its parent channel and the thread, as the core's
sessions are. The audience is the place's (`is_private_place`: a private thread is a place of
its own), cached per channel for a minute so the hot path does not work out permissions for
every message. Without the Message Content intent a message's text is empty: its file names
are still kept.
"""

from __future__ import annotations

import logging

import discord
from cachetools import TTLCache

from adapters.common.logs import emit
from adapters.discord.normalize import readable_text
from bot.audience import Audience
from bot.core import hear
from bot.messages import FetchEarlier, HeardMessage
from bot.stores.heard import MAX_TEXT

_LOG = logging.getLogger(__name__)
PLATFORM = "discord"
_RAW_TEXT = MAX_TEXT * 2
_SAID = (discord.MessageType.default, discord.MessageType.reply)
_AUDIENCES: TTLCache[int, str] = TTLCache(maxsize=50_000, ttl=60.0)


def _audience(channel: object, guild: str) -> str:
    from adapters.discord.handlers import is_private_place  # the handlers import this module

    key = getattr(channel, "id", None)
    if isinstance(key, int) and (known := _AUDIENCES.get(key)) is not None:
        return known
    private_thread = (
        isinstance(channel, discord.Thread) and channel.type == discord.ChannelType.private_thread
    )
    place = str(getattr(channel, "id", "")) if private_thread else _parent_id(channel)
    audience = Audience.of_place(
        PLATFORM, guild, place, is_dm=False, is_private=is_private_place(channel)
    ).id
    if isinstance(key, int):
        _AUDIENCES[key] = audience
    return audience


def _parent_id(channel: object) -> str:
    if isinstance(channel, discord.Thread):
        return str(channel.parent_id)
    return str(getattr(channel, "id", ""))


def heard_message(message: discord.Message, me: discord.abc.Snowflake) -> HeardMessage | None:
    """The record of a guild message; None for what is not recorded (see module)."""
    guild = message.guild
    if guild is None or message.author.id == me.id or message.type not in _SAID:
        return None
    channel = message.channel
    role = guild.self_role
    text = readable_text(
        message.content[:_RAW_TEXT],
        bot_id=me.id,
        bot_role_id=role.id if role else None,
        users={u.id: u.display_name for u in message.mentions},
    )
    in_thread = isinstance(channel, discord.Thread)
    return HeardMessage(
        platform=PLATFORM,
        team=str(guild.id),
        channel=_parent_id(channel),
        thread=str(channel.id) if in_thread else "",
        message_id=str(message.id),
        author=str(message.author.id),
        text=text,
        at=message.created_at.timestamp(),
        audience=_audience(channel, str(guild.id)),
        name=message.author.display_name,
        bot=message.author.bot or message.webhook_id is not None,
        files=tuple(a.filename for a in message.attachments[:20]),
    )


def hear_message(core: object, message: discord.Message, me: discord.abc.Snowflake) -> None:
    """The handlers' one call: record a guild message the bot sees. Never raises (a malformed
    message is left out with one log line)."""
    try:
        record = heard_message(message, me)
    except Exception as exc:
        emit(_LOG, "discord_heard_skipped", logging.DEBUG, error=type(exc).__name__)
        return
    if record is not None:
        hear(core, record)


def earlier_fetcher(message: discord.Message, me: discord.abc.Snowflake) -> FetchEarlier:
    """Asks Discord for the messages before `message` in its channel or thread (one page of
    channel history); None when Discord refuses. The core calls it only without coverage."""

    async def fetch(limit: int) -> list[HeardMessage] | None:
        channel = message.channel
        if not isinstance(channel, discord.abc.Messageable):
            return None
        out: list[HeardMessage] = []
        try:
            async for item in channel.history(limit=max(1, min(limit, 100)), before=message):
                record = heard_message(item, me)
                if record is not None:
                    out.append(record)
        except (discord.HTTPException, discord.RateLimited) as exc:
            emit(_LOG, "discord_history_failed", logging.WARNING, error=type(exc).__name__)
            return None
        out.sort(key=lambda r: r.at)
        return out

    return fetch
