"""Small helpers for tests that drive a BotApp directly."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bot.app import BotApp
from bot.messages import IncomingMessage


@dataclass
class CollectingSink:
    """A ReplySink that keeps everything it is given (tests and benchmarks read it)."""

    deltas: list[str] = field(default_factory=list)
    final: str | None = None
    error: bool = False
    working_calls: int = 0

    async def working(self) -> None:
        self.working_calls += 1

    async def delta(self, text: str) -> None:
        self.deltas.append(text)

    async def finish(self, text: str, *, error: bool = False) -> None:
        self.final = text
        self.error = error


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
