"""What both fact stores share: drafting a version, subject keys, lineage of versions, the
de-duplication key of a live version, and the audience of the message a fact came from."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from bot.audience import META_AUDIENCE, PUBLIC, UNKNOWN_FACT, Audience, narrowest
from bot.keys import PersonKey, SessionKey
from bot.platforms import DM_SCOPE, traits_of
from bot.stores import codec
from bot.stores.ids import clean_fact_text, normalize_fact
from bot.stores.records import Fact, FactSource, StoredMessage

# Written by turns before messages carried their audience: the message was said in a private
# channel or a DM (which of the two is not recorded). Same key as the episodic excerpts' flag.
META_PRIVATE_PLACE = "private_place"


def user_key(person_id: str) -> str | None:
    """`platform:user` of a person id (`platform:team:user`): what every scope of one user on one
    platform (each team or guild, and a DM scope) shares. Parts never contain ":", so it is
    unambiguous; None for a malformed id (such a row never matches)."""
    parts = person_id.split(":")
    if len(parts) != 3 or not all(parts):
        return None
    return f"{parts[0]}:{parts[2]}"


def closed_norm(fact_id: str) -> str:
    """The `live_norm` of a closed version: "~" never starts a live key."""
    return f"~{fact_id}"


def live_norm(audience: str, text: str) -> str:
    """The `live_norm` of a live version: its audience and normalised text. One person never
    holds two live copies of a fact for one audience; the same fact said in two places that do
    not see each other (two private channels) is two live facts, each used where it was said."""
    return f"{audience}|{normalize_fact(text)}"


def draft_fact(
    person: PersonKey,
    text: str,
    key: str | None,
    source: FactSource,
    session: SessionKey | None,
    source_ref: str | None,
    source_messages: Sequence[str],
    valid_from: datetime | None = None,
    audience: str = UNKNOWN_FACT,
) -> Fact:
    """A new live version (its id is assigned on insert), true since `valid_from` (when it was
    said; now by default), usable where `audience` allows."""
    now = codec.now_ms()
    return Fact(
        id="-",
        person=person.id,
        text=clean_fact_text(text),
        key=clean_key(key),
        source=source,
        session=session.id if session is not None else None,
        source_ref=source_ref,
        source_messages=list(source_messages),
        audience=Audience.parse(audience).id,
        valid_from=valid_from or now,
        created_at=now,
    )


def clean_key(key: str | None) -> str | None:
    """A subject key as stored: lower case, words joined by "_"; empty means none."""
    if key is None:
        return None
    cleaned = "_".join(key.casefold().replace("-", " ").split())
    return cleaned[:64] or None


def lineage(fact_id: str, by_id: dict[str, Fact]) -> list[str]:
    """The fact and every older version it (transitively) replaced."""
    out: list[str] = []
    todo = [fact_id]
    while todo:
        current = todo.pop()
        if current in out or current not in by_id:
            continue
        out.append(current)
        todo.extend(by_id[current].replaces)
    return out


def message_audience(session_id: str, meta: Mapping[str, Any]) -> str:
    """Who could read a stored message (`bot.audience` id).

    Messages written since turns record it carry it (`meta["audience"]`). Older ones only flag
    a private channel or DM (`meta["private_place"]`, on user messages), without saying which:
    such a message counts as a DM of its place, the narrowest. A message in a place that is a
    DM by its very id (Discord's DM scope `@dm`, a Slack `D...` channel) is a DM. An old Discord
    message is the narrowest too (the adapter never flagged private channels). Anything else
    without the flag was said in a public channel.
    """
    recorded = meta.get(META_AUDIENCE)
    if isinstance(recorded, str) and recorded:
        return Audience.parse(recorded).id
    try:
        key = SessionKey.parse(session_id)
    except ValueError:
        return UNKNOWN_FACT
    place = f"{key.platform}:{key.team}:{key.channel}"
    traits = traits_of(key.platform)
    dm_by_id = (traits.dm_scope and key.team == DM_SCOPE) or (
        bool(traits.dm_channel_prefix) and key.channel.startswith(traits.dm_channel_prefix)
    )
    if meta.get(META_PRIVATE_PLACE) or dm_by_id:
        return Audience("dm", place).id
    if not traits.flagged_private_places:
        return Audience("dm", place).id  # never flagged: a private channel looks public
    return PUBLIC


def audience_of_messages(found: Iterable[str | None]) -> str:
    """The narrowest audience of the messages a fact came from; a message not found (None:
    pruned or erased) is unknown, the narrowest there is; no message at all is unknown too."""
    audiences = list(found)
    if not audiences or any(a is None for a in audiences):
        return UNKNOWN_FACT
    return narrowest(audiences)


def message_audience_in(message: StoredMessage, around: Sequence[StoredMessage]) -> str:
    """A message's audience for what is drawn from it (memories, index entries): its own when it
    records one, or is a person's message (`message_audience`); an older bot or tool message,
    which carries no privacy flag, takes the narrowest of the people's messages `around` it (its
    session's), or the narrowest there is when there are none."""
    if META_AUDIENCE in message.meta or message.role == "user":
        return message_audience(message.session, message.meta)
    people = [m for m in around if m.role == "user"]
    if not people:
        return UNKNOWN_FACT
    return narrowest(message_audience(m.session, m.meta) for m in people)
