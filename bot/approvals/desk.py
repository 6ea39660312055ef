"""The pause and the decision: a call that needs the person's approval waits in the store.

The pause (`TurnRunner.tool_round`): the calls of a model response that need approval
(`bot.approvals.risk`, and no "always" grant) are not run; each becomes a pending `Approval`
holding where the turn stopped (session, turn id, the model's call id, the canonical arguments,
the message that asked), the others run as usual, and the turn ends with the request shown to
the person. Nothing is held in memory: the conversation store has the model's request (its
assistant message with the calls) and the results of the calls that ran; the approvals store has
the rest. Any process can take the decision, after any restart.

The decision (`ApprovalDesk.decide`): only the requester decides; past `BOT_APPROVAL_TTL` a
decision counts as expiry. The store's compare-and-set from `pending` lets one decision through
(a double click, a re-delivered click, two replicas): the others are told it was decided. When
the turn's last pending call is decided, the turn resumes (`Resume`): approved calls run through
the executor with the turn's own context, so the write's idempotency key is the pending call's
(a re-run after a crash replays instead of acting twice); denied and expired calls get a tool
result saying so; the model then answers. `sweep` does the same for calls whose time ran out.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from bot.approvals.risk import needs_approval
from bot.messages import IncomingMessage
from bot.policy import PlacePolicy
from bot.stores.approvals import Approval, ApprovalStore, Grant
from tools.declare import Tool
from tools.envelope import dumps, error
from tools.types import ToolCallRecord, ToolCallRequest, ToolContext

log = logging.getLogger(__name__)

Choice = Literal["approve", "always", "deny"]

DECLINED = (
    "Not run: the person declined `{tool}`. Do not try it again in this turn; answer without it "
    "and say it was not done."
)
EXPIRED = (
    "Not run: nobody approved `{tool}` in time, so it expired. Do not try it again in this "
    "turn; answer without it and say it was not done."
)


@dataclass(frozen=True)
class Answer:
    """What the person who clicked (or typed) is told, ephemerally. `resume` is set when the
    decision completed the turn's pending calls: the caller resumes the turn with it."""

    text: str
    ok: bool = True
    resume: Resume | None = None


@dataclass(frozen=True)
class Resume:
    """A paused turn to go on with: its message and its decided calls."""

    message: IncomingMessage
    turn_id: str
    decided: list[Approval] = field(default_factory=list)


def canonical(arguments: str) -> str:
    """The model's arguments as canonical JSON (sorted keys), or as given when not JSON."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, ensure_ascii=False)
    except ValueError:
        return arguments


def message_json(msg: IncomingMessage) -> str:
    """What resumes the turn: the message's words and where it was said (no files)."""
    return json.dumps(
        {
            "platform": msg.platform,
            "team": msg.team,
            "channel": msg.channel,
            "thread": msg.thread,
            "user": msg.user,
            "text": msg.text,
            "message_id": msg.message_id,
            "user_name": msg.user_name,
            "is_dm": msg.is_dm,
            "is_private": msg.is_private,
            "thread_is_place": msg.thread_is_place,
            "sent_at": msg.sent_at.isoformat() if msg.sent_at else None,
        },
        ensure_ascii=False,
    )


def message_of(approval: Approval) -> IncomingMessage:
    raw: dict[str, Any] = json.loads(approval.message)
    sent = raw.pop("sent_at", None)
    return IncomingMessage(**raw, sent_at=datetime.fromisoformat(sent) if sent else None)


def declined_record(approval: Approval) -> ToolCallRecord:
    expired = approval.status == "expired"
    kind = "approval_expired" if expired else "declined_by_person"
    text = (EXPIRED if expired else DECLINED).format(tool=approval.tool)
    content = dumps(error(kind, text, retryable=False))
    return ToolCallRecord(
        call_id=secrets.token_hex(16),
        tool_call_id=approval.call_id,
        name=approval.tool,
        arguments=approval.arguments,
        outcome="business_error",
        content=content,
        duration_ms=0.0,
        result_size=len(content),
    )


class ApprovalDesk:
    def __init__(
        self,
        store: ApprovalStore,
        *,
        ttl: float,
        stale_after: float = 180.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.ttl = ttl
        # A decided call still unsettled this long after the decision: the process resuming
        # its turn died (longer than a turn may run), so `sweep` resumes it.
        self.stale_after = stale_after
        self.clock = clock

    async def waits(self, tool: Tool, policy: PlacePolicy, ctx: ToolContext, place: str) -> bool:
        """Whether this call waits for the person (no store read for calls that never do)."""
        if not needs_approval(tool, policy):
            return False
        return not await self.store.granted(ctx.team_id, place, ctx.speaker_id, tool.name)

    async def open(self, msg: IncomingMessage, ctx: ToolContext, call: ToolCallRequest) -> Approval:
        now = self.clock()
        approval = Approval(
            id=secrets.token_urlsafe(12),
            team=ctx.team_id,
            place=msg.channel,
            session=ctx.session_id,
            person=ctx.speaker_id,
            audience=ctx.audience,
            turn_id=ctx.turn_id,
            call_id=call.id,
            tool=call.name,
            arguments=canonical(call.arguments),
            message=message_json(msg),
            created_at=now,
            expires_at=now + self.ttl,
        )
        await self.store.add(approval)
        log.info(
            "approval_requested",
            extra={"fields": {"approval": approval.id, "tool": call.name, "turn_id": ctx.turn_id}},
        )
        return approval

    async def decide(self, approval_id: str, person: str, choice: Choice) -> Answer:
        """The requester's decision on one pending call (anyone else is refused)."""
        approval = await self.store.get(approval_id)
        if approval is None:
            return Answer("That approval request is no longer here.", ok=False)
        if approval.person != person:
            return Answer("Only the person who asked can approve or deny this.", ok=False)
        now = self.clock()
        status: Literal["approved", "denied", "expired"] = (
            "expired"
            if now >= approval.expires_at
            else "denied"
            if choice == "deny"
            else "approved"
        )
        decided = await self.store.decide(approval.id, status, by=person, at=now)
        if decided is None:
            return Answer("That request was already decided.", ok=False)
        log.info(
            "approval_decided",
            extra={"fields": {"approval": approval.id, "tool": approval.tool, "status": status}},
        )
        if status == "approved" and choice == "always":
            await self.store.grant(
                Grant(approval.team, approval.place, person, approval.tool, by=person, at=now)
            )
        told = {
            "approved": f"Approved: running `{approval.tool}`.",
            "denied": f"Denied: `{approval.tool}` will not run.",
            "expired": f"That request expired: `{approval.tool}` will not run.",
        }[status]
        if status == "approved" and choice == "always":
            told += " You won't be asked again for it here (an admin can revoke that)."
        return Answer(told, ok=status != "expired", resume=await self._resume_if_complete(decided))

    async def _resume_if_complete(self, decided: Approval) -> Resume | None:
        turn = await self.store.of_turn(decided.session, decided.turn_id)
        if any(a.status == "pending" for a in turn):
            return None
        unsettled = [a for a in turn if not a.outcome]
        if not unsettled:
            return None
        return Resume(message_of(decided), decided.turn_id, unsettled)

    async def sweep(self, limit: int = 50) -> list[Resume]:
        """Pending calls past their time become expired, and calls decided long ago but never
        settled (their process died) are picked up: the turns to resume, once each."""
        out: dict[tuple[str, str], Resume] = {}
        for approval in await self.store.due(self.clock(), limit):
            decided = await self.store.decide(approval.id, "expired", by="", at=self.clock())
            if decided is None:
                continue  # decided meanwhile (another process)
            resume = await self._resume_if_complete(decided)
            if resume is not None:
                out[(decided.session, decided.turn_id)] = resume
        for stale in await self.store.unsettled(self.clock() - self.stale_after, limit):
            if (stale.session, stale.turn_id) in out:
                continue
            resume = await self._resume_if_complete(stale)
            if resume is not None:
                log.info("approval_resumed_late", extra={"fields": {"approval": stale.id}})
                out[(stale.session, stale.turn_id)] = resume
        return list(out.values())

    async def settled(self, approval: Approval, outcome: str) -> None:
        latency = round((self.clock() - approval.created_at) * 1000, 1)
        await self.store.finish(approval.id, outcome, latency)
