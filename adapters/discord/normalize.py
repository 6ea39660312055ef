"""Discord message text → the text the core sees.

The bot's own mention (`<@id>`, `<@!id>`, or its managed role) is removed; other user, role and
channel mentions become readable names (`@Ada`, `@Moderators`, `#general`) so the model reads
what people see. Pure functions: the handler passes the names it resolved from the message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_MENTION = re.compile(r"<(@!?|@&|#)(\d{1,20})>( ?)")


def readable_text(
    content: str,
    *,
    bot_id: int,
    bot_role_id: int | None = None,
    users: Mapping[int, str] | None = None,
    roles: Mapping[int, str] | None = None,
    channels: Mapping[int, str] | None = None,
) -> str:
    users = users or {}
    roles = roles or {}
    channels = channels or {}

    def replace(match: re.Match[str]) -> str:
        kind, ident, space = match.group(1), int(match.group(2)), match.group(3)
        if kind in ("@", "@!"):
            if ident == bot_id:
                return ""  # with one following space, so "<@bot> hi" is "hi"
            return f"@{users.get(ident, 'unknown-user')}{space}"
        if kind == "@&":
            if bot_role_id is not None and ident == bot_role_id:
                return ""
            return f"@{roles.get(ident, 'unknown-role')}{space}"
        return f"#{channels.get(ident, 'unknown-channel')}{space}"

    return _MENTION.sub(replace, content).strip()


def mentions_bot(content: str, *, bot_id: int, bot_role_id: int | None = None) -> bool:
    for match in _MENTION.finditer(content):
        kind, ident = match.group(1), int(match.group(2))
        if kind in ("@", "@!") and ident == bot_id:
            return True
        if kind == "@&" and bot_role_id is not None and ident == bot_role_id:
            return True
    return False


def thread_name(text: str, limit: int = 80) -> str:
    """A thread title from the question: its first line, shortened on a word boundary."""
    first = next((line.strip() for line in text.split("\n") if line.strip()), "")
    if not first:
        return "Conversation"
    if len(first) <= limit:
        return first
    cut = first[: limit - 1].rsplit(" ", 1)[0] or first[: limit - 1]
    return cut + "…"
