"""Turning stored messages into Chat Completions messages.

Messages are grouped by turn (`turn_id`) so the history is always cut at turn boundaries and an
assistant `tool_calls` message is never separated from its `tool` results (the API rejects that).
Tool results of older turns are shrunk to their key fields when they age out of the recent window.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from bot.memory.speakers import said_by
from bot.stores.records import StoredMessage

AGED_TOOL_RESULT_CHARS = 400
_KEEP_LIST_ITEMS = 3


def group_turns(messages: Sequence[StoredMessage]) -> list[list[StoredMessage]]:
    """Consecutive messages sharing a turn_id form one group, oldest first."""
    groups: list[list[StoredMessage]] = []
    for msg in messages:
        if groups and groups[-1][0].turn_id == msg.turn_id:
            groups[-1].append(msg)
        else:
            groups.append([msg])
    return groups


PRIVATE_TOOLS = frozenset({"remember"})
# `meta` key of a user message: the episodic memories recalled for it (text as sent; never
# extracted as something the person said), and whose words they draw on (for erasure).
RECALLED = "recalled"
RECALLED_FROM = "recalled_from"
RECALLED_TOKENS = "recalled_tokens"
RECALLED_IDS = "recalled_ids"


def is_private_turn(group: Sequence[StoredMessage]) -> bool:
    """A turn where someone asked the bot to remember something about themselves.

    Such a turn is personal: it is shown in context to its own speaker only and never folded into
    a shared summary (the fact itself lives in that person's fact store). Every part of it says
    so (the call, its result by tool name, the reply by `meta["private"]`), so a turn whose start
    was cut off (a bounded history window) is still recognised.
    """
    for m in group:
        if m.meta.get("private") or (m.role == "tool" and m.name in PRIVATE_TOOLS):
            return True
        if m.role == "assistant":
            for call in m.tool_calls or ():
                if str(call.get("function", {}).get("name")) in PRIVATE_TOOLS:
                    return True
    return False


def _shrink(value: Any, depth: int = 0) -> Any:
    """Keep scalars and the first few items of lists; drop deep nesting."""
    if isinstance(value, dict):
        if depth >= 3:
            return "{…}"
        return {k: _shrink(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        head = [_shrink(v, depth + 1) for v in value[:_KEEP_LIST_ITEMS]]
        if len(value) > _KEEP_LIST_ITEMS:
            head.append(f"… {len(value) - _KEEP_LIST_ITEMS} more")
        return head
    if isinstance(value, str) and len(value) > 120:
        return value[:117] + "…"
    return value


def compact_tool_result(content: str, max_chars: int = AGED_TOOL_RESULT_CHARS) -> str:
    """A tool result reduced to its key fields, still valid JSON when the input was."""
    if len(content) <= max_chars:
        return content
    try:
        shrunk = json.dumps(_shrink(json.loads(content)), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return content[: max_chars - 1] + "…"
    if len(shrunk) <= max_chars:
        return shrunk
    return shrunk[: max_chars - 1] + "…"


def to_chat(msg: StoredMessage, *, aged: bool = False, named: bool = False) -> dict[str, Any]:
    """`named`: a user message says who said it (`bot.memory.speakers`)."""
    if msg.role == "user":
        if named:
            return {"role": "user", "content": said_by(msg.content, msg.name, msg.speaker)}
        return {"role": "user", "content": msg.content}
    if msg.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": msg.content or None}
        if msg.tool_calls:
            out["tool_calls"] = msg.tool_calls
        return out
    content = compact_tool_result(msg.content) if aged else msg.content
    return {"role": "tool", "tool_call_id": msg.tool_call_id or "", "content": content}


def render_group(
    group: Iterable[StoredMessage], *, aged: bool = False, named: bool = False
) -> list[dict[str, Any]]:
    """One turn's messages, with unmatched tool calls/results dropped (e.g. after a crash)."""
    msgs = list(group)
    result_ids = {m.tool_call_id for m in msgs if m.role == "tool"}
    call_ids: set[str] = set()
    out: list[dict[str, Any]] = []
    for msg in msgs:
        if msg.role == "assistant" and msg.tool_calls:
            calls = [c for c in msg.tool_calls if c.get("id") in result_ids]
            call_ids.update(str(c.get("id")) for c in calls)
            if not calls and not msg.content:
                continue
            rendered = to_chat(msg, aged=aged)
            if calls:
                rendered["tool_calls"] = calls
            else:
                rendered.pop("tool_calls", None)
            out.append(rendered)
        elif msg.role == "tool":
            if msg.tool_call_id in call_ids:
                out.append(to_chat(msg, aged=aged))
        else:
            recalled = msg.meta.get(RECALLED) if msg.role == "user" else None
            if isinstance(recalled, str) and recalled:
                # The memories recalled for this message, as they were sent with it: the next
                # requests repeat them byte for byte, so the provider's prompt cache still
                # covers everything up to the newest message.
                out.append({"role": "system", "content": recalled})
            out.append(to_chat(msg, aged=aged, named=named))
    return out


def transcript_line(msg: StoredMessage) -> str:
    """A message as one line of a plain transcript (input to the summariser)."""
    if msg.role == "user":
        who = msg.name or msg.speaker.rsplit(":", 1)[-1]
        return f"{who}: {msg.content}"
    if msg.role == "assistant":
        if msg.tool_calls:
            names = ", ".join(str(c.get("function", {}).get("name")) for c in msg.tool_calls)
            text = f" {msg.content}" if msg.content else ""
            return f"assistant (calling {names}):{text}"
        return f"assistant: {msg.content}"
    return f"[tool data from {msg.name or 'tool'}]: {compact_tool_result(msg.content)}"
