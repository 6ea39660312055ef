"""Who said each message, for the model, in places several people share.

In a channel the model sees many people's messages as one "user": without names it cannot
answer "what did Dana ask earlier?" or tell two people's preferences apart. So each person's
message reaches it as `Dana: …` wherever the audience is not one person's DM (a DM has one
speaker; nothing changes there). The name is added when the request is built, never stored in
the message, so erasure and edits work on the person's own words; the same stored message
renders the same way every turn, which keeps the provider's prompt cache.

A display name is chosen by its owner, so it is bounded and made inert: printable characters
only, one line, no colon (it cannot end the label early), at most `MAX_NAME_CHARS`, and a name
that poses as a role ("system", "assistant", …) is marked as a member's.
"""

from __future__ import annotations

from bot.audience import Audience

MAX_NAME_CHARS = 40
_ROLES = ("system", "assistant", "developer", "tool", "user", "bot")
_CUT = 200  # characters looked at before cleaning: a megabyte name costs nothing


def speaker_label(name: str | None, speaker: str) -> str:
    """The name shown for a speaker: the display name made inert, else the user id's tail."""
    raw = (name or "")[:_CUT] or speaker.rsplit(":", 1)[-1][:_CUT]
    cleaned = "".join(c if c.isprintable() and c not in ":[]<>" else " " for c in raw)
    label = " ".join(cleaned.split())[:MAX_NAME_CHARS].strip() or "someone"
    if label.casefold().startswith(_ROLES):
        label = f"member {label}"[:MAX_NAME_CHARS]
    return label


def shared_place(audience_id: object) -> bool:
    """True for a channel's audience (public or private); False for a DM and for messages
    stored before they carried an audience (rendered as they always were)."""
    if not isinstance(audience_id, str) or not audience_id:
        return False
    return Audience.parse(audience_id).kind != "dm"


def said_by(text: str, name: str | None, speaker: str) -> str:
    return f"{speaker_label(name, speaker)}: {text}"
