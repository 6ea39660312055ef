"""Slack message text to the plain text the core sees.

Slack encodes mentions, channels and links as `<...>` tokens and escapes `&<>`. The model should
read what a person would: the bot's own mention removed (it is who is being addressed), other
people as `@Name`, channels as `#name`, links as `label (url)`; links and files are also listed
as attachments so the core can note them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_USER = re.compile(r"<@([UW][A-Z0-9]+)(?:\|([^>]*))?>")
_CHANNEL = re.compile(r"<#([CGD][A-Z0-9]+)(?:\|([^>]*))?>")
_SPECIAL = re.compile(r"<!([^>|]+)(?:\|([^>]*))?>")
_LINK = re.compile(r"<((?:https?|mailto|tel|ftp):[^>|]+)(?:\|([^>]*))?>")
_SPACES = re.compile(r"[ \t]{2,}")


def mentioned_users(text: str) -> list[str]:
    """User ids mentioned in Slack text, in order, without duplicates."""
    seen: dict[str, None] = {}
    for match in _USER.finditer(text or ""):
        seen.setdefault(match.group(1), None)
    return list(seen)


def mentions(text: str, user_id: str | None) -> bool:
    return bool(user_id) and f"<@{user_id}" in (text or "")


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _special(match: re.Match[str]) -> str:
    name, label = match.group(1), match.group(2)
    if name in ("here", "channel", "everyone"):
        return f"@{name}"
    if label:
        return label
    if name.startswith("subteam^"):
        return "@group"
    return ""


def _link(match: re.Match[str]) -> str:
    url, label = match.group(1), match.group(2)
    if url.startswith("mailto:"):
        return label or url.removeprefix("mailto:")
    if url.startswith("tel:"):
        return label or url.removeprefix("tel:")
    if label and label != url and label not in url:
        return f"{label} ({url})"
    return url


def normalize_text(
    text: str,
    *,
    bot_user_id: str | None,
    names: Mapping[str, str] | None = None,
) -> str:
    """Readable plain text: bot mention stripped, people and channels by name, links spelled out."""
    names = names or {}

    def user(match: re.Match[str]) -> str:
        uid, label = match.group(1), match.group(2)
        if uid == bot_user_id:
            return ""
        return "@" + (names.get(uid) or label or uid)

    out = _USER.sub(user, text or "")
    out = _CHANNEL.sub(lambda m: "#" + (m.group(2) or m.group(1)), out)
    out = _SPECIAL.sub(_special, out)
    out = _LINK.sub(_link, out)
    out = _unescape(out)
    lines = [_SPACES.sub(" ", line).strip() for line in out.split("\n")]
    return "\n".join(lines).strip()
