"""From stored messages to index entries: one excerpt per turn.

The indexing unit is a turn: what one person said (their message) and the bot's final reply to
it, written with its date and speaker name ("Wednesday 14 January 2026 — Alice: ..."). In
channels where people talk among themselves (the LoCoMo replay) a turn is just one message.
Single turns measured best on LoCoMo (bench/locomo.py): wider windows match more questions per
entry but spend more of the k result slots on neighbours.

Left out: turns in which someone asked the bot to remember something personal (they belong to
that person alone, and the fact lives in their fact store), tool calls and tool results (tool
data, not what anyone said), and turns with nothing said.

An entry's id is derived from its session and first message seq, so indexing the same messages
again yields the same ids and the index keeps the first copy: never indexed twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from bot.audience import Audience, narrowest
from bot.keys import SessionKey
from bot.memory.episodic.text import date_words
from bot.memory.render import group_turns, is_private_turn
from bot.stores.fact_common import message_audience_in
from bot.stores.memory_index import MemoryEntry, place_id
from bot.stores.records import StoredMessage

REPLY_CHARS = 600  # of the bot's reply kept in an excerpt (the person's words are kept whole)
TEXT_CHARS = 4000  # of a person's message kept in an excerpt
BOT_NAME = "Bot"

# Keys of a user message's `meta` written by the turn (see `message_meta`).
META_SENT_AT = "sent_at"
META_PRIVATE_PLACE = "private_place"


def message_meta(*, sent_at: datetime | None, private_place: bool) -> dict[str, object]:
    """What the indexer needs to know about a message beyond the store's own fields."""
    meta: dict[str, object] = {}
    if sent_at is not None:
        moment = sent_at if sent_at.tzinfo else sent_at.replace(tzinfo=UTC)
        meta[META_SENT_AT] = moment.astimezone(UTC).isoformat()
    if private_place:
        meta[META_PRIVATE_PLACE] = True
    return meta


def said_at(message: StoredMessage) -> datetime:
    """When a message was said: the platform's date when the adapter gave one, else when it was
    stored."""
    raw = message.meta.get(META_SENT_AT)
    if isinstance(raw, str):
        try:
            moment = datetime.fromisoformat(raw)
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        except ValueError:
            pass
    created = message.created_at
    return created if created.tzinfo else created.replace(tzinfo=UTC)


def entry_id(session_id: str, seq: int) -> str:
    return f"x:{session_id}#{seq}"


def source_id(message: StoredMessage) -> str:
    return f"{message.session}#{message.seq}"


def excerpts(
    session: SessionKey,
    messages: Sequence[StoredMessage],
    before: Sequence[StoredMessage] = (),
) -> list[MemoryEntry]:
    """Entries for the turns among `messages` (oldest first); `before` are the messages just
    before them (already indexed), for the first entry's context."""
    team = session.team_key.id
    place = place_id(session.platform, session.team, session.channel)
    out: list[MemoryEntry] = []
    previous = _last_said(before)
    for group in group_turns(list(messages)):
        if is_private_turn(group):
            continue
        said = [m for m in group if m.role == "user" and m.content.strip() and not m.from_tool]
        if not said:
            continue
        context, previous = previous, _said_line(said[-1])
        replies = [
            m for m in group if m.role == "assistant" and m.content.strip() and not m.tool_calls
        ]
        first = said[0]
        when = said_at(first)
        lines = [f"{date_words(when)}"]
        lines.extend(_said_line(m) for m in said)
        if replies:
            lines.append(f"{BOT_NAME}: {replies[-1].content.strip()[:REPLY_CHARS]}")
        people = list(dict.fromkeys(m.speaker for m in said))
        audience = narrowest(message_audience_in(m, group) for m in group)
        out.append(
            MemoryEntry(
                id=entry_id(session.id, first.seq),
                kind="excerpt",
                team=team,
                session=session.id,
                private=not Audience.parse(audience).public,
                audience=audience,
                place=entry_place(place, audience, team),
                people=people,
                source_ids=[source_id(m) for m in said],
                text="\n".join(lines),
                context=context,
                occurred_at=when,
            )
        )
    return out


def entry_place(place: str, audience: str, team: str) -> str:
    """Where an entry may be used: its session's channel, or the place its audience names when
    that is narrower (a Discord private thread is a place of its own, not its channel's)."""
    named = Audience.parse(audience)
    if not named.public and named.place.startswith(team + ":"):
        return named.place
    return place


def _said_line(m: StoredMessage) -> str:
    return f"{m.name or _user_of(m.speaker)}: {m.content.strip()[:TEXT_CHARS]}"


def _last_said(messages: Sequence[StoredMessage]) -> str:
    for group in reversed(group_turns(list(messages))):
        if is_private_turn(group):
            continue
        said = [m for m in group if m.role == "user" and m.content.strip() and not m.from_tool]
        if said:
            return _said_line(said[-1])
    return ""


def _user_of(person_id: str) -> str:
    return person_id.rsplit(":", 1)[-1]
