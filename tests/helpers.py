"""Small helpers for tests that drive a BotApp directly."""

from __future__ import annotations

from typing import Any

from bot.app import BotApp
from bot.messages import CollectingSink, IncomingMessage


def message(
    text: str,
    *,
    user: str = "U1",
    channel: str = "C1",
    thread: str | None = None,
    team: str = "T1",
    platform: str = "test",
) -> IncomingMessage:
    return IncomingMessage(
        platform=platform, team=team, channel=channel, thread=thread, user=user, text=text
    )


async def say(app: BotApp, text: str, **where: Any) -> CollectingSink:
    sink = CollectingSink()
    await app.handle_message(message(text, **where), sink)
    return sink
