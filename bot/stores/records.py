"""Records the stores keep. Each carries `schema_version`; readers upgrade older versions.

These are plain pydantic models so both backends (SQLite rows holding JSON, MongoDB documents)
serialise them the same way with `model_dump(mode="json")` / `model_validate`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.audience import UNKNOWN_FACT

SCHEMA_VERSION = 1

Role = Literal["user", "assistant", "tool"]
FactSource = Literal["user", "tool", "inferred"]
# v2: versions (valid_from/valid_to), key, source message ids; v3: audience
FACT_SCHEMA_VERSION = 3


def utcnow() -> datetime:
    return datetime.now(UTC)


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")
    schema_version: int = SCHEMA_VERSION


class NewMessage(BaseModel):
    """A message to append; the store assigns `seq` and `created_at`.

    `speaker` is the person id (PersonKey.id) whose turn this message belongs to: the user's
    own message, and the assistant replies, tool calls and tool results made in answer to it.
    That is what lets `/memory forget all` erase a person's turns and nothing else.
    """

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str = ""
    speaker: str
    turn_id: str
    name: str | None = None  # tool name for role="tool", display name for role="user"
    tool_call_id: str | None = None  # for role="tool"
    tool_calls: list[dict[str, Any]] | None = None  # for role="assistant" requesting tools
    from_tool: bool = False  # content is tool data, not something a person said
    tokens: int = 0  # token count of the content as sent to the model (cached for budgeting)
    meta: dict[str, Any] = Field(default_factory=dict)


class StoredMessage(NewMessage, _Record):
    model_config = ConfigDict(extra="ignore")

    session: str  # SessionKey.id
    seq: int  # 1, 2, 3 ... per session, strictly increasing, assigned by the store
    created_at: datetime = Field(default_factory=utcnow)


class PinnedFact(BaseModel):
    text: str
    speaker: str
    seq: int = 0  # message the fact came from
    created_at: datetime = Field(default_factory=utcnow)


class PendingFact(BaseModel):
    """A fact candidate extracted by a consolidation run, waiting to be reconciled."""

    person: str  # PersonKey.id whose words it came from
    text: str
    key: str | None = None
    source: FactSource = "user"
    message: str = ""  # "<session id>#<seq>" of the message it came from
    said_at: datetime | None = None  # when that message was said
    # Who could read the message(s) it came from (`bot.audience` id; the narrowest of them).
    # A candidate saved before facts carried one is the narrowest there is.
    audience: str = UNKNOWN_FACT


class PendingMemory(BaseModel):
    """An episodic memory drawn by a consolidation run, waiting to be indexed."""

    text: str
    messages: list[str] = Field(default_factory=list)  # "<session id>#<seq>"
    people: list[str] = Field(default_factory=list)  # whose turns its messages belong to
    private: bool = False  # drawn from a message said in a private place
    audience: str = ""  # `bot.audience` id: the narrowest of its messages' audiences
    occurred_at: datetime | None = None  # when its first message was said


class PendingConsolidation(BaseModel):
    """What one consolidation step extracted from a session (messages up to `upto_seq`), kept
    until applied so a killed run resumes with the same candidates instead of asking the model
    again. Erased by `/memory forget all` when it draws on that person (it holds their words)."""

    upto_seq: int
    erasures: int = 0  # the session's erasure counter when the messages were read
    facts: list[PendingFact] = Field(default_factory=list)
    memories: list[PendingMemory] = Field(default_factory=list)
    applied: int = 0  # facts reconciled so far
    memories_written: bool = False
    tokens: int = 0


class SessionState(_Record):
    """Per-session memory state: rolling summary, pinned key facts, counters."""

    session: str
    summary: str = ""
    summary_upto_seq: int = 0  # messages with seq <= this are folded into `summary`
    summary_speakers: list[str] = Field(default_factory=list)  # people whose turns it draws on
    pinned: list[PinnedFact] = Field(default_factory=list)
    last_seq: int = 0
    summary_failures: int = 0  # summaries failed in a row; the next waits longer (backoff)
    summary_failed_at: datetime | None = None  # when the last one failed
    erasures: int = 0  # bumped by `/memory forget all`; a summary folded before it is discarded
    consolidated_upto_seq: int = 0  # messages with seq <= this went through consolidation
    consolidation: PendingConsolidation | None = None  # a step extracted but not yet applied
    version: int = 0  # optimistic-concurrency counter, bumped by every successful put
    updated_at: datetime = Field(default_factory=utcnow)


class Fact(_Record):
    """One version of a long-term fact about one person ("allergic to peanuts").

    Facts are never edited in place: an UPDATE closes the old version (`valid_to`,
    `replaced_by`) and writes a new one that lists it in `replaces`; a DELETE only closes. The
    live facts are those with `valid_to` unset: what reaches the context and `/memory show`.
    `source` says who the fact comes from: the person's own words (`user`), tool data (`tool`,
    never overwrites what the person said) or an inference of the consolidation (`inferred`,
    outranked by both).

    `audience` (a `bot.audience` id) is who could read what it was drawn from: the fact is only
    used where all of them may read the reply (`bot.audience.fact_audiences_for`). `valid_from`
    is when it was said (the message's time), not when it was stored.
    """

    schema_version: int = FACT_SCHEMA_VERSION
    id: str  # short id shown to users, unique per person (across versions)
    person: str  # PersonKey.id
    text: str
    key: str | None = None  # the subject ("diet", "allergy"); facts on one subject supersede
    source: FactSource = "user"
    session: str | None = None  # where it was stated
    source_ref: str | None = None  # the turn id (or tool call id) it came from
    source_messages: list[str] = Field(default_factory=list)  # ids of the messages it came from
    audience: str = UNKNOWN_FACT  # "public" | "private:<place>" | "dm:<place>"
    valid_from: datetime = Field(default_factory=utcnow)
    valid_to: datetime | None = None  # closed (replaced or deleted) at
    replaces: list[str] = Field(default_factory=list)  # ids of the versions this one closed
    replaced_by: str | None = None  # the version that closed this one (None for a DELETE)
    closed_reason: str | None = None  # "updated" | "deleted"
    created_at: datetime = Field(default_factory=utcnow)

    @property
    def live(self) -> bool:
        return self.valid_to is None


class ToolInstall(_Record):
    """A tool pack installed in one workspace/guild. `config` may hold secrets: never log it."""

    team: str  # TeamKey.id
    pack: str
    config: dict[str, str] = Field(default_factory=dict)
    installed_by: str = ""
    created_at: datetime = Field(default_factory=utcnow)


class ToolCallLog(_Record):
    """A raw record of one tool call, kept 7 days for tracing."""

    call_id: str
    session: str
    speaker: str
    tool: str
    arguments: str
    outcome: str
    duration_ms: float
    result_size: int
    created_at: datetime = Field(default_factory=utcnow)


class ErasureReceipt(_Record):
    """Proof that `/memory forget all` ran: who asked, when, how much went. Never any content."""

    id: str
    person: str  # PersonKey.id whose data was erased (the person who asked)
    requested_by: str = ""  # the surface it came from ("slack", "discord", "console")
    requested_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime = Field(default_factory=utcnow)
    counts: dict[str, int] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utcnow)


class FactTombstone(_Record):
    """What is left of a fact the person asked to forget: no text, only a digest of its folded
    text (`bot.memory.tombstones.digest`) and the messages it came from, so the consolidation
    does not make it again from the same words. Erased by `/memory forget all`."""

    person: str  # PersonKey.id
    digest: str
    sources: list[str] = Field(default_factory=list)  # "<session id>#<seq>"
    words: list[str] = Field(default_factory=list)  # digests of its content words, sorted
    created_at: datetime = Field(default_factory=utcnow)
