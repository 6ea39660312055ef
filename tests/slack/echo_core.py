"""A small BotCore for adapter tests: echoes through the sink, records calls, dedups in memory.

It implements the same protocol as `bot.app.BotApp`, so the end-to-end tests switch to the real
core by swapping a fixture. `seen` can be shared between two instances to play two processes
behind one cache (SET NX).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from bot.core import CommandReply, CommandRequest, MessageChange
from bot.inbox import InboxWorker, ServesInbox
from bot.keys import SessionKey, TeamKey
from bot.messages import IncomingMessage, MessageRef, ReplySink
from bot.policy import DEFAULT_POLICY, PlacePolicy
from bot.settings_overview import SettingsOverview


@dataclass
class EchoCore(ServesInbox):
    delay: float = 0.0
    chunks: int = 3
    reply: str | None = None  # fixed answer instead of the echo
    draft: list[str] | None = None  # deltas to stream instead of the answer's own chunks
    delta_pause: float = 0.0
    fail: bool = False
    skip_finish: bool = False
    seen: set[str] = field(default_factory=set)
    messages: list[IncomingMessage] = field(default_factory=list)
    commands: list[CommandRequest] = field(default_factory=list)
    # Platform deletes and edits applied: ("deleted", ref, None) / ("edited", ref, text).
    changes: list[tuple[str, MessageRef, str | None]] = field(default_factory=list)
    health_status: dict[str, bool] = field(default_factory=lambda: {"store": True, "cache": True})
    command_delay: float = 0.0
    command_gate: asyncio.Event | None = None  # commands wait for it (then answer)
    commands_started: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    overviews: list[tuple[str, bool]] = field(default_factory=list)  # (user, platform admin)
    # No durable inbox: items run in this process at once (de-duplicated through `seen`).
    worker: InboxWorker = field(init=False)

    def __post_init__(self) -> None:
        self.worker = InboxWorker(None, first_delivery=self.first_delivery)

    def reply_for(self, message: IncomingMessage) -> str:
        return self.reply if self.reply is not None else f"echo: {message.text}"

    async def handle_message(self, message: IncomingMessage, sink: ReplySink) -> None:
        self.messages.append(message)
        await sink.working()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise RuntimeError("boom")
        answer = self.reply_for(message)
        step = max(1, len(answer) // max(1, self.chunks))
        deltas = self.draft or [answer[i : i + step] for i in range(0, len(answer), step)]
        for delta in deltas:
            await sink.delta(delta)
            await asyncio.sleep(self.delta_pause)
        if not self.skip_finish:
            await sink.finish(answer)

    async def handle_command(self, request: CommandRequest) -> CommandReply:
        self.commands.append(request)
        self.commands_started.set()
        if self.command_gate is not None:
            await self.command_gate.wait()
        if self.command_delay:
            await asyncio.sleep(self.command_delay)
        words = request.text.split()
        if request.command == "tools" and words[:1] in (["install"], ["remove"]):
            if not request.is_platform_admin:
                return CommandReply("Sorry, only workspace admins can change tools.", ok=False)
            return CommandReply(f"**{words[0]}ed** `{words[1] if len(words) > 1 else ''}`")
        return CommandReply(f"**/{request.command}** {request.text or 'show'}")

    async def message_deleted(self, ref: MessageRef) -> MessageChange:
        self.changes.append(("deleted", ref, None))
        return MessageChange(found=sum(m.message_id in ref.message_ids for m in self.messages))

    async def message_edited(self, ref: MessageRef, text: str) -> MessageChange:
        self.changes.append(("edited", ref, text))
        return MessageChange(found=sum(m.message_id in ref.message_ids for m in self.messages))

    async def in_conversation(self, session: SessionKey) -> bool:
        return any(m.session == session for m in self.messages)

    async def place_policy(self, team: TeamKey, channel: str) -> PlacePolicy:
        return DEFAULT_POLICY

    async def settings_overview(
        self, team: TeamKey, user: str, *, is_platform_admin: bool
    ) -> SettingsOverview | None:
        self.overviews.append((user, is_platform_admin))
        return None  # everyone sees the short Home view (the real core's is tested on its own)

    async def admit_bot(self, team: TeamKey, channel: str, other_bot: str) -> bool:
        return False

    async def first_delivery(self, event_id: str) -> bool:
        if event_id in self.seen:
            return False
        self.seen.add(event_id)
        return True

    async def health(self) -> dict[str, bool]:
        return dict(self.health_status)

    async def close(self) -> None:
        self.closed = True
