"""Which Slack events the bot answers, and where the answer goes (pure, no I/O).

The conversation contract: a mention in a channel is answered in a thread (the message's thread
or a new one under it); later messages in a thread the bot answered need no mention; every DM is
answered. A channel message that mentions the bot arrives twice (`app_mention` and `message`), so
the `message` copy is dropped here and the mention path answers it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.slack.normalize import mentions

# Message subtypes that are a person (or, if allowed, a bot) saying something new.
_ANSWERABLE_SUBTYPES = {None, "file_share", "thread_broadcast", "me_message"}


@dataclass(frozen=True, slots=True)
class Route:
    """Where a message came from and where its answer goes."""

    team: str
    channel: str
    user: str
    message_ts: str
    reply_thread_ts: str | None  # None: a top-level DM reply
    session_thread: str | None  # the thread part of the core's SessionKey
    is_dm: bool
    assistant_thread: bool  # a DM thread: the AI app surface (status, title, prompts)
    needs_thread_check: bool  # a channel thread reply without mention: only if the bot is in it
    via_mention: bool
    plain: bool = False  # a top-level channel message without mention: only where reply=all
    from_bot: bool = False  # another bot's mention: only where bots=mentions, within a budget


def is_dm_event(event: Mapping[str, Any]) -> bool:
    return event.get("channel_type") == "im" or str(event.get("channel", "")).startswith("D")


def _is_bot(event: Mapping[str, Any]) -> bool:
    return bool(event.get("bot_id")) or event.get("subtype") == "bot_message"


def _is_self(event: Mapping[str, Any], bot_user_id: str | None, bot_id: str | None) -> bool:
    return bool(
        (bot_user_id and event.get("user") == bot_user_id)
        or (bot_id and event.get("bot_id") == bot_id)
    )


def route_event(
    event: Mapping[str, Any],
    *,
    team: str,
    bot_user_id: str | None,
    bot_id: str | None,
    allow_bots: bool = False,
    plain_messages: bool = False,
    bot_mentions: bool = False,
) -> Route | None:
    """A `Route` if the bot should answer this `app_mention` / `message` event, else None.
    `plain_messages`: a top-level channel message without a mention is routed too, marked
    `plain` (answered only where the place's `reply` is `all`, which the caller checks).
    `bot_mentions`: another bot's `app_mention` is routed too, marked `from_bot` (answered only
    where the place's `bots` is `mentions`, within the pair budget: the caller checks)."""
    kind = event.get("type")
    channel = str(event.get("channel") or "")
    ts = str(event.get("ts") or "")
    if not channel or not ts or not team or event.get("hidden"):
        return None
    if _is_self(event, bot_user_id, bot_id):
        return None
    subtype = event.get("subtype")
    from_bot = _is_bot(event) and not allow_bots
    if from_bot and not (bot_mentions and kind == "app_mention" and not is_dm_event(event)):
        return None
    if subtype not in _ANSWERABLE_SUBTYPES and subtype != "bot_message":
        return None
    user = str(event.get("user") or event.get("bot_id") or "")
    if not user:
        return None
    thread_ts = event.get("thread_ts")
    thread = str(thread_ts) if thread_ts else None
    dm = is_dm_event(event)

    if kind == "app_mention":
        if dm:
            return None  # DMs are answered from the message.im copy
        return Route(
            team=team,
            channel=channel,
            user=user,
            message_ts=ts,
            reply_thread_ts=thread or ts,
            session_thread=thread or ts,
            is_dm=False,
            assistant_thread=False,
            needs_thread_check=False,
            via_mention=True,
            from_bot=from_bot,
        )
    if kind != "message":
        return None
    if dm:
        return Route(
            team=team,
            channel=channel,
            user=user,
            message_ts=ts,
            reply_thread_ts=thread,
            session_thread=thread,
            is_dm=True,
            assistant_thread=thread is not None,
            needs_thread_check=False,
            via_mention=False,
        )
    if mentions(str(event.get("text") or ""), bot_user_id):
        return None  # the app_mention copy of this message answers it
    if thread is None or thread == ts:
        if not plain_messages:
            return None  # a plain channel message without a mention
        return Route(
            team=team,
            channel=channel,
            user=user,
            message_ts=ts,
            reply_thread_ts=ts,
            session_thread=ts,
            is_dm=False,
            assistant_thread=False,
            needs_thread_check=False,
            via_mention=False,
            plain=True,
        )
    return Route(
        team=team,
        channel=channel,
        user=user,
        message_ts=ts,
        reply_thread_ts=thread,
        session_thread=thread,
        is_dm=False,
        assistant_thread=False,
        needs_thread_check=True,
        via_mention=False,
    )


# A message deleted or edited in Slack: applied to what the bot keeps, never answered.
_CHANGE_KINDS = {"message_deleted": "deleted", "message_changed": "edited"}
MAX_EDIT_CHARS = 40_000  # Slack's own limit on a message's text
_MAX_ID_CHARS = 64


@dataclass(frozen=True, slots=True)
class Change:
    """A `message` event of subtype `message_deleted` / `message_changed` for a message a
    person wrote: which message, and where its conversation is (the session whose order the
    change keeps: it runs after the message's own turn)."""

    kind: str  # "deleted" | "edited"
    team: str
    channel: str
    message_ts: str
    thread_ts: str | None  # the thread the message is in (None: top level)
    session_thread: str | None  # the thread part of the core's SessionKey
    text: str = ""  # edited: the new text, as Slack sends it
    version: str = ""  # edited: which edit (its `edited.ts`)


def _slack_id(value: Any) -> str | None:
    text = str(value or "")
    if not text or len(text) > _MAX_ID_CHARS or ":" in text or not text.isprintable():
        return None
    if any(c.isspace() for c in text):
        return None
    return text


def route_change(
    event: Mapping[str, Any],
    *,
    team: str,
    bot_user_id: str | None,
    bot_id: str | None,
    allow_bots: bool = False,
) -> Change | None:
    """A `Change` for a `message_deleted` / `message_changed` event the bot should apply; None
    for anything else (other events, the bot's own messages, other bots' unless allowed, an
    update that did not change the text: unfurls, thread reply counts, a broadcast)."""
    if event.get("type") != "message":
        return None
    kind = _CHANGE_KINDS.get(str(event.get("subtype")))
    channel = _slack_id(event.get("channel"))
    if kind is None or channel is None or not _slack_id(team):
        return None
    before = event.get("previous_message")
    before = before if isinstance(before, Mapping) else {}
    after = event.get("message")
    after = after if isinstance(after, Mapping) else {}
    if kind == "edited" and after.get("subtype") == "tombstone":
        # A deleted message that had a thread: Slack keeps a placeholder ("This message was
        # deleted.", by USLACKBOT) in its place and says so with `message_changed`, not
        # `message_deleted`. Every channel mention the bot answered is such a thread parent.
        kind = "deleted"
        before = {**after, **before, "ts": after.get("ts") or before.get("ts")}
    said = after if kind == "edited" else before
    if _is_self(said, bot_user_id, bot_id) or (_is_bot(said) and not allow_bots):
        return None
    ts = _slack_id(after.get("ts") if kind == "edited" else event.get("deleted_ts"))
    ts = ts or (_slack_id(before.get("ts")) if kind == "deleted" else None)
    if ts is None:
        return None
    text = ""
    version = ""
    if kind == "edited":
        raw = after.get("text")
        if not isinstance(raw, str) or ("text" in before and before.get("text") == raw):
            return None
        text = raw[:MAX_EDIT_CHARS]
        edited = after.get("edited")
        stamp = edited.get("ts") if isinstance(edited, Mapping) else None
        version = str(stamp or event.get("ts") or "")[:_MAX_ID_CHARS]
    thread = _slack_id(said.get("thread_ts") or before.get("thread_ts"))
    if is_dm_event(event):
        session_thread = thread if thread and thread != ts else None
    else:
        session_thread = thread or ts
    return Change(kind, team, channel, ts, thread, session_thread, text, version)


# Fields of an edited message that the turn reads, kept in the mention made of it.
_MENTION_FIELDS = (
    "user",
    "bot_id",
    "subtype",
    "text",
    "ts",
    "thread_ts",
    "parent_user_id",
    "files",
    "edited",
)


def first_mention_by_edit(
    event: Mapping[str, Any], *, bot_user_id: str | None
) -> dict[str, Any] | None:
    """For a `message_changed` edit that adds the bot's first mention (the text before the edit
    did not mention it, the text after does), the `app_mention` the message would have been
    had it been written that way; else None.

    Slack also sends an `app_mention` carrying `edited` for every edit of a message that
    mentions the bot, but without the text before the edit, so it cannot tell a first mention
    from a typo fix: those are dropped, and this event (which has `previous_message`) decides.
    DMs are left out: every DM was answered when it was sent. Whether the message was already
    answered for another reason (a thread follow-up the bot answered without a mention) is the
    core's to say when the edit is applied (the handler answers only when nothing of the
    message is stored), and a message is answered so at most once (a claim per message)."""
    if not bot_user_id or event.get("subtype") != "message_changed" or is_dm_event(event):
        return None
    before, after = event.get("previous_message"), event.get("message")
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return None
    old, new = before.get("text"), after.get("text")
    if not isinstance(old, str) or not isinstance(new, str) or mentions(old, bot_user_id):
        return None
    if not mentions(new, bot_user_id):
        return None
    mention: dict[str, Any] = {"type": "app_mention", "channel": event.get("channel")}
    mention.update({k: after[k] for k in _MENTION_FIELDS if k in after})
    mention["text"] = new[:MAX_EDIT_CHARS]
    return mention
