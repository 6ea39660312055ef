"""What the rest of the bot needs to know of per-person connections, without importing the
`mcp` SDK (which only a bot with BOT_PUBLIC_URL set loads)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.stores.records import StoredMessage

AFTER_SIGN_IN = "after_sign_in"  # in an inbox item's body: put back once the person connected

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


def answered_by_a_sign_in_link(rounds: Sequence[StoredMessage]) -> bool:
    """Whether a stored turn ended by sending a sign-in link, and the turn now running is its
    message put back after the sign-in (`bot.connections.chat`): then it is answered anew,
    not replayed. Any other run of the same message (a retry) replays the stored answer."""
    from bot.inbox import CURRENT_ITEM

    item = CURRENT_ITEM.get()
    if item is None or not item.body.get(AFTER_SIGN_IN):
        return False
    return any(
        str(c.get("function", {}).get("name", "")).endswith("_connect")
        for m in rounds
        for c in (m.tool_calls or [])
    )
