"""The core's platform-neutral message types: what adapters hand in and what they get back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from bot.audience import Audience
from bot.keys import PersonKey, SessionKey


class AttachmentError(Exception):
    """A shared file could not be fetched (gone, forbidden, too large, too slow).

    The message is one line safe to show to the person (no URL, no token)."""


class FetchBytes(Protocol):
    """Downloads a shared file through the adapter, with the platform's own auth.

    Reads at most `max_bytes` bytes: if the file is larger, raise `AttachmentError` (never
    return a silently cut file). The core bounds the call in time; adapters bound the read.
    """

    async def __call__(self, max_bytes: int) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file someone shared with a message, as the platform described it.

    `size` is what the platform reported (0 when unknown); `mime_type` is the platform's guess
    (the core also looks at the bytes). `fetch` is only called for files of the message that
    triggered the turn, never for files of earlier messages.
    """

    name: str
    mime_type: str
    size: int
    fetch: FetchBytes
    id: str | None = None


class Admission(Protocol):
    """Rate-limit admission that belongs to one accepted platform event (its inbox entry), not
    to each attempt at it: a turn re-run after its replica died is the same turn, admitted once
    (`bot.ratelimit`)."""

    @property
    def admitted(self) -> bool:
        """An earlier attempt at this same event was admitted."""

    async def record(self) -> None:
        """Remember that this event was admitted (best effort)."""


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """A message someone sent the bot, already normalised by an adapter."""

    platform: str
    team: str
    channel: str
    thread: str | None
    user: str
    text: str
    message_id: str | None = None
    user_name: str | None = None
    is_dm: bool = False
    attachments: tuple[Attachment, ...] = ()
    # A private channel or group DM (its memories never leave it; a DM is private as well).
    is_private: bool = False
    # When the platform says the message was sent (None: now). Dates what is remembered.
    sent_at: datetime | None = None
    # The thread is a place of its own, read only by its members (a Discord private thread):
    # what is said there is kept to it, not to its channel.
    thread_is_place: bool = False
    # Asks the platform for the messages before this one in its thread (or channel), used
    # only when the record of what the bot heard there has no coverage (`bot.memory.heard`).
    earlier: FetchEarlier | None = None
    # The event's admission (its inbox entry's notes); None: counted at every attempt.
    admission: Admission | None = None

    @property
    def session(self) -> SessionKey:
        return SessionKey(self.platform, self.team, self.channel, self.thread)

    @property
    def person(self) -> PersonKey:
        return PersonKey(self.platform, self.team, self.user)

    @property
    def audience(self) -> Audience:
        """Who reads a reply here (`bot.audience`): what the bot remembers from this message
        carries it, and what it uses here must fit it."""
        return Audience.of_place(
            self.platform,
            self.team,
            self.place_channel,
            is_dm=self.is_dm,
            is_private=self.is_private or self.thread_is_place,
        )

    @property
    def place_channel(self) -> str:
        """The channel part of the place (`bot.stores.memory_index.place_id`): the channel, or
        the thread when it is a place of its own."""
        return self.thread if self.thread_is_place and self.thread else self.channel


@dataclass(frozen=True, slots=True)
class HeardMessage:
    """A message posted where the bot is (a person's or another bot's), as the adapter saw it:
    kept a while so a later mention there sees what was said before it (`bot.memory.heard`).

    `thread` is "" for a top-level message; `author` the platform's user (or bot) id; `at` the
    platform's time of the message (Unix seconds); `audience` the id of `bot.audience` for the
    place. The text and file names are bounded by the record, not here."""

    platform: str
    team: str
    channel: str
    thread: str
    message_id: str
    author: str
    text: str
    at: float
    audience: str
    name: str | None = None
    bot: bool = False
    files: tuple[str, ...] = ()


class FetchEarlier(Protocol):
    """The platform's messages before a mention in its thread (or its channel), oldest first,
    at most `limit`; None when the platform could not be asked (rate limited, no access)."""

    async def __call__(self, limit: int) -> list[HeardMessage] | None: ...


class ReplySink(Protocol):
    """Where a turn's reply goes. Adapters implement it; the turn loop drives it.

    `working` is called once before the model is asked (show a reaction or a status);
    `delta` with each streamed text chunk (may never be called); `finish` exactly once with the
    whole final text, also when the turn failed (then the text is a friendly apology).
    A sink that shows feedback buttons also has `rate_with(ref)` (`bot.feedback.offer_feedback`).
    """

    async def working(self) -> None: ...

    async def delta(self, text: str) -> None: ...

    async def finish(self, text: str, *, error: bool = False) -> None: ...


def drop_quietly(sink: ReplySink) -> None:
    """End a turn without a word (a flood past its one refusal): a sink that shows progress on
    its own or answers an unfinished turn with an apology has `abandon()`, which stops that."""
    abandon = getattr(sink, "abandon", None)
    if callable(abandon):
        abandon()


MAX_REF_IDS = 100  # platform message ids one delete or edit may name (Discord's bulk limit)


@dataclass(frozen=True, slots=True)
class MessageRef:
    """Messages on a platform that were deleted or edited there (`BotCore.message_deleted`).

    `channel` narrows the search: a Slack `ts` is unique within its channel (and names a
    message in any of its threads); None searches the whole team (a Discord id is global, and a
    Discord thread is a channel of its own). `thread` is the thread the platform named, when it
    named one (logged; the channel already covers its threads)."""

    platform: str
    team: str
    message_ids: tuple[str, ...]
    channel: str | None = None
    thread: str | None = None
