"""What the rest of the bot needs to know of per-person connections, without importing the
`mcp` SDK (which only a bot with BOT_PUBLIC_URL set loads)."""

from __future__ import annotations

from dataclasses import dataclass

NOT_OFFERED = (
    "The `{name}` tools need each person to connect their own account, which this bot cannot "
    "offer (an operator must set BOT_PUBLIC_URL and BOT_SECRET_KEY). If the user needs them, "
    "say so in one sentence."
)


class NeedsSignIn(Exception):
    """The person has no usable connection to the server (never connected, or it was refused)."""


@dataclass(frozen=True)
class Owner:
    """Whose connection to which server: team and person ids, the install's name."""

    team: str
    person: str
    server: str
