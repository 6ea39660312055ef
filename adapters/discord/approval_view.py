"""How an approval request looks on Discord: one message that pings the requester, with the
request (`bot.approvals.render`) and three buttons whose custom_ids carry all a click needs
(`ap:<choice>:<approval id>:<requester id>`), so they work after a restart."""

from __future__ import annotations

import discord

from adapters.discord.config import MESSAGE_LIMIT
from bot.approvals.desk import Choice
from bot.approvals.render import request_text
from bot.stores.approvals import Approval

PREFIX = "ap:"
HOW = "Answer with the buttons below (only you can)"
CHOICES: dict[str, Choice] = {"a": "approve", "A": "always", "d": "deny"}
BUTTONS = (
    ("a", "Approve", discord.ButtonStyle.success),
    ("A", "Approve always", discord.ButtonStyle.primary),
    ("d", "Deny", discord.ButtonStyle.danger),
)


def requester_id(approval: Approval) -> str:
    """The Discord user id of the requester (the last part of its PersonKey id)."""
    return approval.person.rsplit(":", 1)[-1]


def approval_text(approval: Approval) -> str:
    """The request as one message: a ping of the requester, then the rendered request."""
    text = f"<@{requester_id(approval)}> " + request_text(approval, how=HOW)
    if len(text) > MESSAGE_LIMIT:
        text = text[: MESSAGE_LIMIT - 1] + "…"
    return text


def approval_view(approval: Approval) -> discord.ui.View:
    """The three buttons (persistent custom_ids; the view is stopped, so nothing is held)."""
    view = discord.ui.View(timeout=None)
    for code, label, style in BUTTONS:
        custom_id = f"{PREFIX}{code}:{approval.id}:{requester_id(approval)}"
        view.add_item(discord.ui.Button(style=style, label=label, custom_id=custom_id))
    view.stop()
    return view
