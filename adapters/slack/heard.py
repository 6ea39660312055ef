"""Slack messages the bot hears in the channels it is in, for the record a later mention reads
(`bot.memory.heard`; the one Web API call made when that record has no coverage is
`adapters.slack.threads.earlier_fetcher`).

Every `message` event of a channel the app is in arrives (the `message.channels` / `.groups` /
`.mpim` subscriptions); each becomes a `HeardMessage` before the event is acked: pure, no I/O,
the text bounded before it is read. Recorded: people's messages and other bots' posts (files by
name); not the bot's own (its conversations hold them), not DMs (every DM is answered and
stored), not changes (`message_changed` / `message_deleted`: a person's go through the inbox,
another bot's are applied at once, `heard_change`), not
the `app_mention` copy of a message (its `message` copy is recorded). A channel's audience
comes from the event's `channel_type` (`channel`: public; anything else: that place only).

People are named by the profile the event carries when it carries one, else by their user id
(the hot path makes no lookup).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.slack.normalize import normalize_text
from bot.audience import PUBLIC
from bot.core import hear, heard_changed
from bot.messages import HeardMessage, MessageRef
from bot.stores.heard import MAX_TEXT

PLATFORM = "slack"
# Message subtypes that are someone saying something new (a bot's post included).
_SAID = frozenset({None, "file_share", "thread_broadcast", "me_message", "bot_message"})
_RAW_TEXT = MAX_TEXT * 2  # read at most this much of an event's text
_MAX_FILES = 20
_CHANGES = frozenset({"message_deleted", "message_changed"})


def _name(event: Mapping[str, Any]) -> str | None:
    profile = event.get("user_profile")
    if isinstance(profile, Mapping):
        for key in ("display_name", "real_name", "name"):
            value = profile.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    bot = event.get("bot_profile")
    if isinstance(bot, Mapping) and isinstance(bot.get("name"), str):
        return str(bot["name"])
    username = event.get("username")
    return username if isinstance(username, str) and username else None


def _files(event: Mapping[str, Any]) -> tuple[str, ...]:
    files = event.get("files")
    if not isinstance(files, list):
        return ()
    names = []
    for item in files[:_MAX_FILES]:
        if isinstance(item, Mapping):
            name = item.get("name") or item.get("title")
            if isinstance(name, str) and name:
                names.append(name)
    return tuple(names)


def _readable(raw: str, bot_user_id: str | None) -> str:
    """The text as the core reads a message's (`normalize_text`), bounded first; plain text
    (no markup, no escapes, one line) as it is."""
    raw = raw[:_RAW_TEXT]
    if "<" in raw or "&" in raw or "\n" in raw or "\t" in raw or "  " in raw or raw != raw.strip():
        return normalize_text(raw, bot_user_id=bot_user_id)
    return raw


def heard_message(
    event: Mapping[str, Any],
    *,
    team: str,
    bot_user_id: str | None,
    bot_id: str | None,
    audience: str | None = None,
) -> HeardMessage | None:
    """The record of a channel `message` event; None for what is not recorded (see module)."""
    if event.get("type") != "message" or event.get("hidden"):
        return None
    subtype = event.get("subtype")
    if subtype not in _SAID:
        return None
    channel, ts = event.get("channel"), event.get("ts")
    if not isinstance(channel, str) or not isinstance(ts, str) or not team:
        return None
    kind = event.get("channel_type")
    if kind == "im" or channel.startswith("D"):
        return None
    user, bot = event.get("user"), event.get("bot_id")
    if (bot_user_id and user == bot_user_id) or (bot_id and bot == bot_id):
        return None
    author = user if isinstance(user, str) and user else bot
    if not isinstance(author, str) or not author:
        return None
    try:
        at = float(ts)
    except ValueError:
        return None
    raw = event.get("text")
    text = _readable(raw, bot_user_id) if isinstance(raw, str) else ""
    thread = event.get("thread_ts")
    if audience is None:  # `Audience.of_place`'s id, without building one per message
        audience = PUBLIC if kind == "channel" else f"private:{PLATFORM}:{team}:{channel}"
    return HeardMessage(
        platform=PLATFORM,
        team=team,
        channel=channel,
        thread=thread if isinstance(thread, str) and thread != ts else "",
        message_id=ts,
        author=author,
        text=text,
        at=at,
        audience=audience,
        name=_name(event),
        bot=bool(bot) or subtype == "bot_message",
        files=_files(event),
    )


def heard_change(
    event: Mapping[str, Any], *, team: str, bot_user_id: str | None, bot_id: str | None
) -> tuple[MessageRef, str | None] | None:
    """A `message_deleted` / `message_changed` event of another bot's post as a change to the
    record: the message and, for an edit, its new text (None: deleted). People's changes reach
    the core through the inbox (`BotCore.message_deleted`), in the order of their conversation;
    other bots' are never answered, so they are applied at once, through the same cascade."""
    subtype = event.get("subtype")
    channel = event.get("channel")
    if subtype not in _CHANGES or not isinstance(channel, str) or not team:
        return None
    after = event.get("message")
    after = after if isinstance(after, Mapping) else {}
    before = event.get("previous_message")
    said = before if subtype == "message_deleted" else after
    if not isinstance(said, Mapping) or not (
        said.get("bot_id") or said.get("subtype") == "bot_message"
    ):
        return None  # a person's: through the inbox, in the order of its conversation
    if bot_id and said.get("bot_id") == bot_id:
        return None  # the bot's own (its conversations are changed by the core)
    if subtype == "message_deleted":
        ts = event.get("deleted_ts")
        text: str | None = None
    else:
        ts, raw = after.get("ts"), after.get("text")
        if not isinstance(raw, str):
            return None
        text = _readable(raw, bot_user_id)
    if not isinstance(ts, str) or not ts:
        return None
    return MessageRef(PLATFORM, team, (ts,), channel=channel), text


def hear_event(
    core: object,
    event: Mapping[str, Any],
    *,
    team: str,
    bot_user_id: str | None,
    bot_id: str | None,
) -> None:
    """The handlers' one call: record the event if it is a message heard in a channel, or
    apply it to the record if it deletes or edits one."""
    if event.get("subtype") in _CHANGES:
        change = heard_change(event, team=team, bot_user_id=bot_user_id, bot_id=bot_id)
        if change is not None:
            heard_changed(core, *change)
        return
    record = heard_message(event, team=team, bot_user_id=bot_user_id, bot_id=bot_id)
    if record is not None:
        hear(core, record)
