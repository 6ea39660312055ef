"""What adapters see of the core: one small protocol, so adapters hold no memory or tool logic.

`bot.app.BotApp` implements it. Adapters translate platform events into `IncomingMessage` /
`CommandRequest` and render `ReplySink` calls / `CommandReply` back onto the platform.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from bot.approvals.desk import Answer, Choice, Resume
from bot.inbox import Handler, InboxItem
from bot.keys import PersonKey, SessionKey, TeamKey
from bot.messages import HeardMessage, IncomingMessage, MessageRef, ReplySink
from bot.policy import PlacePolicy

if TYPE_CHECKING:  # bot.settings_overview imports this module (through `/config`)
    from bot.settings_overview import SettingsOverview


@dataclass(frozen=True, slots=True)
class CommandRequest:
    """A slash command: `/memory forget all` is command="memory", text="forget all"."""

    platform: str
    team: str
    channel: str
    user: str
    command: str  # "memory" | "tools" (without the slash)
    text: str
    is_platform_admin: bool = False  # the adapter's own check (Slack users.info is_admin/is_owner)


@dataclass(frozen=True, slots=True)
class CommandReply:
    """Text to show only to the person who ran the command (ephemeral)."""

    text: str
    ok: bool = True


@dataclass(frozen=True, slots=True)
class MessageChange:
    """What a platform delete or edit changed in what the bot keeps (`BotCore.message_deleted`,
    `message_edited`). `found` 0: the bot never stored those messages (nothing to do);
    `failed`: a store could not be reached, nothing is promised (the adapter retries later)."""

    found: int = 0  # the platform's messages found stored
    messages: int = 0  # stored messages erased (the message and the turn that answered it)
    rewritten: int = 0  # stored messages rewritten (an edit; recalled copies cut elsewhere)
    tool_calls: int = 0  # tool-call logs erased
    entries: int = 0  # memory index entries dropped
    rebuilt: int = 0  # memory index entries made again from what remains
    summaries: int = 0  # session summaries dropped (rebuilt by the next fold)
    facts: int = 0  # facts drawn only from a deleted message, closed
    heard: int = 0  # records of messages heard where the bot is, removed or rewritten
    failed: bool = False


class AdminNotice(Protocol):
    """How an adapter tells one admin something (a DM on Slack and Discord, a line in the
    console): budget alerts. Raises on failure; the core logs it and goes on."""

    async def tell(self, person: PersonKey, text: str) -> None: ...


@runtime_checkable
class NotifiesAdmins(Protocol):
    """A core that sends admins notices (`bot.usage.gate` alerts) through the adapter's
    `AdminNotice`, given at start-up."""

    def set_admin_notice(self, notice: AdminNotice) -> None: ...


@runtime_checkable
class DecidesApprovals(Protocol):
    """A core whose tool calls may wait for the person's approval (`bot.approvals`)."""

    async def decide_approval(
        self, person: PersonKey, choice: Choice, approval_id: str | None, session: SessionKey
    ) -> Answer:
        """The person's decision; `Answer.resume` set: go on with `resume_turn`."""

    async def resume_turn(self, resume: Resume, sink: ReplySink) -> object:
        """Go on with a paused turn whose calls are decided; its reply goes to `sink`."""

    async def sweep_approvals(self) -> list[Resume]:
        """Expire requests past their time; the turns to resume. Never raises."""


@runtime_checkable
class Hears(Protocol):
    """A core that keeps the messages posted where the bot is (`bot.memory.heard`)."""

    def hear(self, message: HeardMessage) -> None:
        """Keep this message for later mentions in its place. Never raises, never waits."""

    def heard_changed(self, ref: MessageRef, text: str | None) -> None:
        """A message of the record was deleted (`text` None) or edited on the platform: applied
        in the background, in order with what was heard. Never raises, never waits."""

    async def heard_all(self, session: SessionKey) -> bool:
        """True when the record holds every message of this thread (heard since it began), so
        an adapter need not ask the platform who posted there. Never raises."""


_HEARS: dict[type, bool] = {}


def _hears(core: object) -> bool:
    """`isinstance(core, Hears)`, once per class: a runtime protocol check costs microseconds
    and this runs for every message of every channel the bot is in."""
    kind = type(core)
    known = _HEARS.get(kind)
    if known is None:
        known = _HEARS[kind] = isinstance(core, Hears)
    return known


def hear(core: object, message: HeardMessage) -> None:
    """Hand a heard message to the core if it keeps them (adapters' one call)."""
    if _hears(core):
        core.hear(message)  # type: ignore[attr-defined]


def heard_changed(core: object, ref: MessageRef, text: str | None) -> None:
    """`Hears.heard_changed` when the core keeps heard messages."""
    if _hears(core):
        core.heard_changed(ref, text)  # type: ignore[attr-defined]


async def heard_all(core: object, session: SessionKey) -> bool:
    """`Hears.heard_all` when the core keeps heard messages; False otherwise."""
    return _hears(core) and bool(await core.heard_all(session))  # type: ignore[attr-defined]


class BotCore(Protocol):
    async def handle_message(self, message: IncomingMessage, sink: ReplySink) -> None:
        """Run one turn (serialised per session) and drive `sink`. Never raises for bad input."""

    async def handle_command(self, request: CommandRequest) -> CommandReply: ...

    async def message_deleted(self, ref: MessageRef) -> MessageChange:
        """The platform deleted these messages: erase them from what the bot keeps, with the
        bot's turn that answered them, the index entries and summaries drawn from them (rebuilt
        without them) and facts drawn only from them (closed). Idempotent (a message not stored
        is a no-op); waits for a turn in flight in that place; never raises."""

    async def message_edited(self, ref: MessageRef, text: str) -> MessageChange:
        """The platform message was edited to `text`: the stored message says `text` from now
        on and what was drawn from it is made again; nothing is answered. Never raises."""

    async def in_conversation(self, session: SessionKey) -> bool:
        """True if this place already has a stored conversation with the bot (any process), so
        an adapter can treat a follow-up there as addressed to the bot without a mention."""

    async def place_policy(self, team: TeamKey, channel: str) -> PlacePolicy:
        """The place's settings (`reply`, `bots`, ...) for an adapter's routing, from the
        per-team cache (no store round trip per message). Never raises: defaults on error."""

    async def settings_overview(
        self, team: TeamKey, user: str, *, is_platform_admin: bool
    ) -> SettingsOverview | None:
        """The team's settings, overriding channels and last changes for an admin (the rule of
        `/config set`: the adapter's own admin flag, or `BOT_ADMINS`); None for anyone else,
        who is shown none of it. From the per-team cache; raises when a store is down."""

    async def admit_bot(self, team: TeamKey, channel: str, other_bot: str) -> bool:
        """Whether the bot may answer this other bot's mention here now: at most 5 answers to
        the same bot in a place per 10 minutes, then a cooldown (`bot.bot_pairs`), so two bots
        can never loop. Counts the answer when it says yes. Never raises (no on error)."""

    async def first_delivery(self, event_id: str) -> bool:
        """True the first time an event id is seen (across processes, via the cache's SET NX)."""

    async def enqueue(self, item: InboxItem) -> bool:
        """Write an accepted event to the durable inbox before the platform is acked (False: a
        re-delivery already accepted, by any process). Never raises: when the inbox cannot be
        written the event is handled in this process at once."""

    def serve_inbox(self, kind: str, handler: Handler) -> None:
        """Start taking inbox entries of `kind` and running `handler` for each (in arrival
        order per session, across every process), until `stop_inbox`."""

    async def stop_inbox(self, grace: float) -> int:
        """Stop taking entries; let running handlers finish within `grace` seconds and hand
        the rest back to the inbox (another process takes them). Returns how many."""

    async def health(self) -> dict[str, bool]:
        """Component -> reachable; used by /healthz and `bot doctor`."""

    async def close(self) -> None: ...
