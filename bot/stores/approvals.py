"""Approvals before actions (DESIGN "approvals before actions"): what is stored, and the
protocol both backends implement.

An `Approval` is one tool call the turn did not run because it waits for the person who asked:
where it stopped (session, turn, the platform message, the model's call id), the tool and its
canonical arguments, who asked, until when it is valid, and, once decided, who decided, when, and
what the tool did (outcome, latency). `decide` is a compare-and-set from `pending`: of two clicks
(a double click, a re-delivery, two replicas) exactly one wins, so the tool runs once.

A `Grant` ("Approve always") lets one person run one tool in one place without asking again,
until an admin revokes it (`/config`).

Privacy: the arguments were written by the model from the person's words, and the record keeps
the message that asked (to resume the turn), so both name whose words they are (`person`) and
their `audience`; `/memory forget all` deletes the person's approvals and grants
(`ApprovalPeople`, an erasure tier). Bounds: ids and texts are capped (`check_approval`), and
at most `KEPT` approvals are kept per team (the oldest decided ones go first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from bot.keys import PersonKey, TeamKey

Status = Literal["pending", "approved", "denied", "expired"]
STATUSES = ("pending", "approved", "denied", "expired")
KEPT = 10_000  # approvals per team, the oldest decided ones dropped first
MAX_ID_CHARS = 300
MAX_ARGUMENTS_CHARS = 20_000
MAX_MESSAGE_CHARS = 60_000  # the resumable message (text and where it was said), as JSON


@dataclass(frozen=True, slots=True)
class Approval:
    id: str  # random, unguessable: buttons carry it
    team: str  # TeamKey.id
    place: str  # the channel (grants and `/tools audit` are per place)
    session: str  # SessionKey.id of the conversation the turn runs in
    person: str  # PersonKey.id of the requester: the only one who may decide
    audience: str  # `bot.audience` id of the place (whose eyes the words were for)
    turn_id: str
    call_id: str  # the model's tool_call_id
    tool: str
    arguments: str  # canonical JSON (sorted keys) of the model's arguments
    message: str  # JSON of the message that started the turn (to resume it)
    created_at: float  # epoch seconds
    expires_at: float
    status: Status = "pending"
    decided_by: str = ""  # PersonKey.id, or "" (expired)
    decided_at: float = 0.0
    outcome: str = ""  # the tool's outcome once run ("ok", "business_error", ...)
    latency_ms: float = 0.0  # from the request to the tool's result (or the decline)


@dataclass(frozen=True, slots=True)
class Grant:
    team: str
    place: str
    person: str
    tool: str
    by: str  # who granted it (the person, with "Approve always")
    at: float


def check_approval(a: Approval) -> None:
    """The store's own bounds: ValueError past them."""
    ids = (a.id, a.team, a.place, a.session, a.person, a.turn_id, a.call_id, a.tool)
    if not all(ids):
        raise ValueError("an approval names its id, team, place, session, person, turn, call, tool")
    if any(len(v) > MAX_ID_CHARS for v in (*ids, a.audience, a.decided_by)):
        raise ValueError(f"an id of an approval is at most {MAX_ID_CHARS} characters")
    if len(a.arguments) > MAX_ARGUMENTS_CHARS or len(a.message) > MAX_MESSAGE_CHARS:
        raise ValueError("an approval's arguments or message are too long")
    if a.status not in STATUSES:
        raise ValueError(f"an approval's status is one of {', '.join(STATUSES)}")


def check_grant(g: Grant) -> None:
    values = (g.team, g.place, g.person, g.tool)
    if not all(values) or any(len(v) > MAX_ID_CHARS for v in (*values, g.by)):
        raise ValueError("a grant names its team, place, person and tool (bounded)")


class ApprovalStore(Protocol):
    async def add(self, approval: Approval) -> None:
        """Store a new pending approval. ValueError past the bounds or for a taken id."""

    async def get(self, approval_id: str) -> Approval | None: ...

    async def decide(
        self, approval_id: str, status: Status, *, by: str, at: float
    ) -> Approval | None:
        """`pending` -> `status` (approved, denied or expired), once: the updated record for the
        caller that changed it, None when it was not pending (decided before) or is unknown."""

    async def finish(self, approval_id: str, outcome: str, latency_ms: float) -> None:
        """Record what the decided call came to (the tool's outcome, or `declined`)."""

    async def of_turn(self, session: str, turn_id: str) -> list[Approval]:
        """The turn's approvals (pending and decided), oldest first."""

    async def latest_pending(self, session: str, person: str) -> Approval | None:
        """The person's newest pending approval in this conversation (the console's
        `/approve` without an id)."""

    async def due(self, now: float, limit: int = 100) -> list[Approval]:
        """Pending approvals whose time ran out, oldest first."""

    async def unsettled(self, before: float, limit: int = 100) -> list[Approval]:
        """Approvals decided at or before `before` whose call was never settled (no outcome:
        the process that took the decision died before the turn resumed), oldest first."""

    async def recent(self, team: TeamKey, limit: int = 20) -> list[Approval]:
        """The team's latest approvals, newest first (`/tools audit`)."""

    async def grant(self, grant: Grant) -> None:
        """Keep (or renew) a grant of one tool to one person in one place."""

    async def granted(self, team: str, place: str, person: str, tool: str) -> bool: ...

    async def grants(self, team: TeamKey, place: str) -> list[Grant]:
        """The grants in one place, by tool then person."""

    async def revoke(self, team: TeamKey, place: str, tool: str, person: str | None = None) -> int:
        """Remove the grants of a tool in a place (one person's, or everyone's); how many."""

    async def forget_person(self, person: PersonKey) -> int:
        """Delete the person's approvals and grants; returns how many approvals went."""


def approvals_of(store: object, *, keep: int = KEPT) -> ApprovalStore | None:
    """The approvals store on the same connection as a durable store, or None for a store
    that keeps none (then no call waits: approvals need a durable place to wait in)."""
    from bot.stores.mongo import MongoStore
    from bot.stores.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        from bot.stores.approvals_sqlite import SqliteApprovals

        return SqliteApprovals(store.worker, keep=keep)
    if isinstance(store, MongoStore):
        from bot.stores.approvals_mongo import MongoApprovals

        return MongoApprovals(store.db, keep=keep)
    return None


class ApprovalPeople:
    """An erasure tier (`bot.memory.erasure.MemoryTiers`): `/memory forget all` deletes the
    person's approvals (their words, as tool arguments) and grants. Not memories: counts none."""

    def __init__(self, store: ApprovalStore) -> None:
        self.store = store

    async def erase_person(self, person: PersonKey) -> int:
        await self.store.forget_person(person)
        return 0

    async def compact(self) -> None:
        """The main store's compaction covers it (same file / database)."""
