"""Which tool calls wait for the person: a tool's risk, and the place's `approve` setting.

A tool's risk is `write` or `read`. Declared by its pack (`Tool.write`: the built-in weather and
order lookups and `remember` read) or, for MCP tools, by the server's annotations: only
`readOnlyHint: true` reads, anything else (missing annotations included) writes
(`tools.mcp.pack.adapt`). An admin's `tool_risk` setting overrides either way for approvals; a
server's hint is never a reason to skip approval for a tool the admin marked write.

Decision where the issue is silent: the admin's `read` only lifts the approval. The other guards
of writing tools (the write guard after untrusted content, idempotency keys) follow the declared
risk too, so marking a tool read never makes it less guarded there.

`remember` never waits: it only writes the speaker's own facts, which they see and erase with
`/memory` (the write guard exempts it for the same reason).
"""

from __future__ import annotations

from typing import Literal

from bot.policy import PlacePolicy
from tools.declare import Tool

Risk = Literal["read", "write"]
NEVER_WAIT = frozenset({"remember"})


def risk_of(tool: Tool, policy: PlacePolicy) -> Risk:
    """The tool's risk here: the admin's override, else what its pack or server declared."""
    override = policy.risk_override(tool.name)
    if override == "write":
        return "write"
    if override == "read":
        return "read"
    return "write" if tool.write else "read"


def needs_approval(tool: Tool, policy: PlacePolicy) -> bool:
    """Whether a call of this tool waits for the person here (before any "always" grant)."""
    if tool.name in NEVER_WAIT or policy.approve == "none":
        return False
    return policy.approve == "all" or risk_of(tool, policy) == "write"
