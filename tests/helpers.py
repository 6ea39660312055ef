"""Small helpers for tests that drive a BotApp directly."""

from __future__ import annotations

from typing import Any

from bot.app import BotApp
from bot.messages import IncomingMessage
from testkit.sinks import CollectingSink  # benches use it too: it lives in testkit


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


async def until(condition: Any, *, timeout: float = 10.0, what: str = "condition") -> None:
    """Wait for `condition()` (a positive signal from the system under test) to become true;
    fail after `timeout` seconds naming `what`."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for _ in range(1_000_000):
        if condition():
            return
        if loop.time() >= deadline:
            break
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
