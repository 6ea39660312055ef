"""What a failed Discord REST call can raise, in one place.

discord.py waits out a 429 itself up to `max_ratelimit_timeout` (`DiscordConfig`, 60 s); a
longer wait raises `discord.RateLimited`, which is not an `HTTPException`. Every place that
handles a refused call handles both (`REST_ERRORS`), so a long rate limit costs that call (a
thread, a typing indicator, a follow-up), never the turn or the process.
"""

from __future__ import annotations

from typing import Any

import discord

REST_ERRORS: tuple[type[Exception], ...] = (discord.HTTPException, discord.RateLimited)


def rest_error_fields(exc: BaseException) -> dict[str, Any]:
    """Log fields for a REST failure: HTTP status and Discord code, or the rate limit's wait."""
    if isinstance(exc, discord.RateLimited):
        return {"status": 429, "retry_after": round(exc.retry_after, 1)}
    return {"status": getattr(exc, "status", None), "code": getattr(exc, "code", None)}


async def apologize_unread(
    client: discord.Client, channel_id: int, message_id: int, text: str
) -> None:
    """Reply `text` to a message that could not be read (its fetch was rate-limited), from its
    ids alone; a failure here is only logged by the caller's logger."""
    channel = client.get_partial_messageable(channel_id)
    reference = discord.MessageReference(
        message_id=message_id, channel_id=channel_id, fail_if_not_exists=False
    )
    await channel.send(text, reference=reference, allowed_mentions=discord.AllowedMentions.none())
