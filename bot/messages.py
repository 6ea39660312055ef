"""The core's platform-neutral message types: what adapters hand in and what they get back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from bot.keys import PersonKey, SessionKey


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """A message someone sent the bot, already normalised by an adapter."""

    platform: str
    team: str
    channel: str
    thread: str | None
    user: str
    text: str
    message_id: str | None = None
    user_name: str | None = None
    is_dm: bool = False
    attachments: tuple[str, ...] = ()

    @property
    def session(self) -> SessionKey:
        return SessionKey(self.platform, self.team, self.channel, self.thread)

    @property
    def person(self) -> PersonKey:
        return PersonKey(self.platform, self.team, self.user)


class ReplySink(Protocol):
    """Where a turn's reply goes. Adapters implement it; the turn loop drives it.

    `working` is called once before the model is asked (show a reaction or a status);
    `delta` with each streamed text chunk (may never be called); `finish` exactly once with the
    whole final text, also when the turn failed (then the text is a friendly apology).
    """

    async def working(self) -> None: ...

    async def delta(self, text: str) -> None: ...

    async def finish(self, text: str, *, error: bool = False) -> None: ...


@dataclass
class CollectingSink:
    """A ReplySink that keeps everything; used by the console adapter and tests."""

    deltas: list[str] = field(default_factory=list)
    final: str | None = None
    error: bool = False
    working_calls: int = 0
    on_delta: Callable[[str], Awaitable[None]] | None = None

    async def working(self) -> None:
        self.working_calls += 1

    async def delta(self, text: str) -> None:
        self.deltas.append(text)
        if self.on_delta is not None:
            await self.on_delta(text)

    async def finish(self, text: str, *, error: bool = False) -> None:
        self.final = text
        self.error = error
