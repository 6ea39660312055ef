"""Types shared by the tool engine and its callers (the turn loop, tool packs).

The turn loop only needs: `ToolCallRequest` (what the model asked for), `ToolContext` (who and
where), `ToolCallRecord` (what happened; `content` is what goes back to the model) and the
executor's `execute()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

Outcome = Literal[
    "ok",
    "unknown_tool",
    "bad_arguments",
    "business_error",
    "transient_error",
    "timeout",
    "unexpected_error",
    "limit_exceeded",
]


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """One tool call as the model emitted it. `arguments` is the raw JSON text, unparsed."""

    id: str  # the model's tool_call_id
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who is calling and where; handed to tools that ask for it and used for idempotency keys.

    Every field is typed (no free-form dict): a tool that needs more context gets a new field
    here. The ids are the caller's canonical key strings (the bot's `SessionKey.id`,
    `PersonKey.id`, `TeamKey.id`), so a caller can parse them back into its own key types.
    """

    session_id: str  # the conversation place, e.g. "slack:T1:C1:1700000000.1"
    speaker_id: str  # the person who sent the message, e.g. "slack:T1:U1"
    team_id: str  # the workspace/guild the tools are installed in, e.g. "slack:T1"
    turn_id: str = ""  # the turn these calls belong to (ties stored facts to their source)
    speaker_name: str | None = None  # display name, when the platform gave one
    message_id: str | None = None  # the platform's id of the message that started the turn
    message_ref: str = ""  # the stored message this turn answers ("<session id>#<seq>")
    # Who reads a reply in this place (`bot.audience` id: "public", "private:<place>",
    # "dm:<place>"); what a tool remembers from the turn carries it. "" when unknown.
    audience: str = ""
    said_at: datetime | None = None  # when the person said the message (None: now)


@dataclass(slots=True)
class ToolCallRecord:
    """What happened to one call: recorded for logs, traces and memory.

    `content` is the envelope JSON sent back to the model as the `tool` message:
    {"ok": true, "data": ...} or {"ok": false, "error": {"type": ..., "message": ..., ...}}.
    """

    call_id: str  # our own id, unique per call
    tool_call_id: str  # the model's id, ties the tool message to the request
    name: str
    arguments: str  # raw arguments as received
    outcome: Outcome
    content: str
    duration_ms: float
    result_size: int  # characters of the untrimmed result
    trimmed: bool = False
    attempts: int = 1
    replayed: bool = False  # a write tool's idempotent replay of an earlier result
    data: Any = None  # the tool's raw return value on success (not sent to the model)
