"""A re-run of a turn continues the answer its first attempt posted, never posts a second one.

The sink's nonces (`sink.py`) make Discord hand back a part an earlier attempt created, but
Discord checks a nonce only "in the past few minutes": a turn re-run after a longer outage (the
durable inbox gives a dead process's entry to another one, or to this one after a restart)
would post a second answer beside the half-finished one. So, before posting:

1. **Notes**: every part the sink posts is recorded with the inbox entry as it is posted
   (`Delivery.note`: the channel and the message ids), as durable as the entry itself. A re-run
   fetches those messages (one GET each; one that was deleted ends the list) and the sink edits
   them, and deletes the ones the new answer no longer needs.
2. **History**, when there are no notes (the first attempt died between posting a part and
   noting it): the messages just after the person's one are read once (`HISTORY_LIMIT`, one
   request). In the channel, the bot's message whose `message_reference` names the person's
   message is the answer's first part, and the bot's plain messages right after it (before
   anyone else's) are its other parts. In the thread the bot opened on the message (its id is
   the message's), the bot's plain messages from the thread's start are.
   Follow-ups in a thread and DMs are answered without a reference, so there only the notes
   can tell the bot's answer from its other messages: a re-run there relies on them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import discord

from adapters.common.logs import emit
from adapters.common.split import split_message
from adapters.discord.config import MESSAGE_LIMIT
from adapters.discord.rest_errors import REST_ERRORS, rest_error_fields
from adapters.discord.sink import DiscordReplySink

_LOG = logging.getLogger(__name__)
HISTORY_LIMIT = 50  # messages read after the person's one (one REST request)
MAX_PARTS = 20  # part ids kept in the notes (an answer is cut well before that)
NOTE_PARTS, NOTE_CHANNEL = "discord_parts", "discord_channel"

OnPosted = Callable[[int, list[int]], Awaitable[None]]


class ContinuingReplySink(DiscordReplySink):
    """The reply sink, starting from the parts an earlier attempt posted (edited, not posted
    again) and reporting each part it posts (`on_posted(channel id, part ids)`)."""

    def __init__(
        self,
        *,
        earlier: Sequence[discord.Message] = (),
        on_posted: OnPosted | None = None,
        channel_id: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._posted.extend(earlier[:MAX_PARTS])
        self._on_posted = on_posted
        self._channel_id = channel_id

    async def _send(
        self,
        content: str,
        index: int,
        *,
        view: discord.ui.View | None = None,
        mentions: discord.AllowedMentions | None = None,
    ) -> discord.Message:
        sent = await super()._send(content, index, view=view, mentions=mentions)
        if self._on_posted is not None:
            ids = [m.id for m in self._posted]
            if sent.id not in ids:
                ids.append(sent.id)
            await self._on_posted(self._channel_id, ids[:MAX_PARTS])
        return sent

    async def finish(self, text: str, *, error: bool = False) -> None:
        await super().finish(text, error=error)
        needed = len(self._asking) or len(split_message(text.strip() or "…", MESSAGE_LIMIT))
        if self.failed or len(self._posted) <= needed:
            return
        # An earlier attempt's answer was longer: its parts past this one's are stale.
        stale, self._posted = self._posted[needed:], self._posted[:needed]
        for message in stale:
            try:
                await message.delete()
            except REST_ERRORS as exc:
                emit(_LOG, "discord_stale_part_kept", logging.WARNING, **rest_error_fields(exc))


def noted_parts(notes: Mapping[str, Any], channel_id: int) -> list[int]:
    """The part ids an earlier attempt noted for this channel (nothing if noted elsewhere)."""
    if str(notes.get(NOTE_CHANNEL) or "") != str(channel_id):
        return []
    raw = notes.get(NOTE_PARTS)
    if not isinstance(raw, list):
        return []
    ids = [int(i) for i in raw[:MAX_PARTS] if isinstance(i, str) and i.isdigit() and len(i) <= 20]
    return ids


def as_notes(channel_id: int, part_ids: list[int]) -> dict[str, Any]:
    return {NOTE_CHANNEL: str(channel_id), NOTE_PARTS: [str(i) for i in part_ids]}


async def find_earlier_answer(
    notes: Mapping[str, Any],
    target: discord.abc.Messageable,
    channel_id: int,
    question: discord.Message,
    me: discord.abc.User,
    *,
    replied: bool,
    own_thread: bool,
) -> list[discord.Message]:
    """The parts of the answer an earlier attempt posted, oldest first (empty: none found).
    `replied`: the answer's first part replies to the question; `own_thread`: the answer is in
    the thread opened on the question."""
    noted = noted_parts(notes, channel_id)
    try:
        if noted:
            return await _fetch_noted(target, noted)
        if replied:
            return await _from_history(target, question, me, after=question.id, replied=True)
        if own_thread:
            return await _from_history(target, question, me, after=None, replied=False)
    except REST_ERRORS as exc:
        emit(_LOG, "discord_earlier_answer_unknown", logging.WARNING, **rest_error_fields(exc))
    return []


async def _fetch_noted(target: discord.abc.Messageable, ids: list[int]) -> list[discord.Message]:
    found: list[discord.Message] = []
    for message_id in ids:
        try:
            found.append(await target.fetch_message(message_id))
        except discord.NotFound:
            break  # deleted since: the answer goes on from the parts before it
    return found


async def _from_history(
    target: discord.abc.Messageable,
    question: discord.Message,
    me: discord.abc.User,
    *,
    after: int | None,
    replied: bool,
) -> list[discord.Message]:
    found: list[discord.Message] = []
    after_ref = discord.Object(id=after) if after is not None else None
    async for message in target.history(limit=HISTORY_LIMIT, after=after_ref, oldest_first=True):
        ours = message.author.id == me.id and message.interaction_metadata is None
        reference = message.reference
        refers = reference is not None and reference.message_id == question.id
        if not found:
            if ours and (refers if replied else message.type == discord.MessageType.default):
                found.append(message)
            elif not replied and not ours and message.type in _SPOKEN:
                break  # someone spoke first in the thread: the bot never answered here
            continue
        if ours and message.type == discord.MessageType.default and reference is None:
            found.append(message)
            if len(found) >= MAX_PARTS:
                break
        elif message.type in _SPOKEN or ours:
            break  # someone else's message, or another answer of the bot's: this one ended
    return found


_SPOKEN = (discord.MessageType.default, discord.MessageType.reply)
