"""Types shared by the tool engine and its callers (the turn loop, tool packs).

The turn loop only needs: `ToolCallRequest` (what the model asked for), `ToolContext` (who and
where), `ToolCallRecord` (what happened; `content` is what goes back to the model) and the
executor's `execute()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    """Who is calling and where; handed to tools that ask for it and used for idempotency keys."""

    session_id: str
    speaker_id: str
    team_id: str
    turn_id: str = ""
    extras: dict[str, Any] = field(default_factory=dict)


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
