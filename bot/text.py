"""Text from outside, made safe to store, count and send on.

Platforms can hand us strings Python accepts but UTF-8 cannot encode: a JSON body's `"\ud800"`
decodes to a lone surrogate, which then breaks SQLite, MongoDB, tiktoken and the model request
with a traceback. `clean_text` is applied where text enters the core.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bot.core import CommandRequest
from bot.messages import IncomingMessage

REPLACEMENT = "\ufffd"


def clean_text(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD and NUL characters removed.

    The common case (already valid) costs one encode and returns the same object.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Pairs written as two escapes (a valid astral character) are joined, lone halves
        # replaced.
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if "\x00" in text:
        text = text.replace("\x00", "")
    return text


def clean_message(message: IncomingMessage) -> IncomingMessage:
    """The message with every string field cleaned (ids too: they become store keys)."""
    fields = ("platform", "team", "channel", "user", "text")
    changes: dict[str, Any] = {
        name: clean_text(getattr(message, name))
        for name in fields
        if getattr(message, name) is not clean_text(getattr(message, name))
    }
    for name in ("thread", "message_id", "user_name"):
        value = getattr(message, name)
        if value is not None and clean_text(value) is not value:
            changes[name] = clean_text(value)
    if any(clean_text(a.name) is not a.name for a in message.attachments):
        changes["attachments"] = tuple(
            replace(a, name=clean_text(a.name)) for a in message.attachments
        )
    return replace(message, **changes) if changes else message


def clean_request(request: CommandRequest) -> CommandRequest:
    """The command request with its strings cleaned."""
    changes: dict[str, Any] = {
        name: clean_text(getattr(request, name))
        for name in ("platform", "team", "channel", "user", "command", "text")
        if clean_text(getattr(request, name)) is not getattr(request, name)
    }
    return replace(request, **changes) if changes else request
