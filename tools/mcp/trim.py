"""Trimming one MCP message to what the bot uses (see `tools.mcp.inbound` for why and when).

Runs in a worker thread for small messages, and as `python -m tools.mcp.trim <memory cap>` (stdin
to stdout) for large ones; so this module imports nothing heavy.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tools.shrink import shrink

MAX_TOOLS = 128  # listed tools kept per page (the connection also caps the whole listing)
MAX_PARTS = 100  # content parts of one result
MAX_TEXT = 20_000  # characters of one text part
MAX_SCHEMA_BYTES = 16_000  # an input schema larger than this is not offered (tools.mcp.schema)
MAX_DESCRIPTION = 1_024
STRUCTURED_ITEMS = 64  # structured content: items per list/object kept when it is large
STRUCTURED_CHARS = 2_048  # ... and characters per string
SHRINK_ABOVE = 64 * 1024  # structured content larger than this (as JSON) is shrunk
SCHEMA_META = "bot.local/outputSchema"  # a listed tool's output schema, kept for tools.mcp.output
SHRUNK_META = "bot.local/shrunk"  # a result whose structured content the trimming shortened

Notes = list[tuple[str, dict[str, Any]]]  # log lines the trimming asks for (event, fields)


def trim_message(body: bytes) -> tuple[bytes, Notes]:
    """One JSON-RPC message (or batch) with its listing or tool result trimmed, and the log lines
    to write. Bodies that are not JSON pass unchanged (the SDK reports them as parse errors)."""
    notes: Notes = []
    try:
        message = json.loads(body)
    except ValueError:
        return body, notes
    messages = message if isinstance(message, list) else [message]
    changed = False
    for msg in messages:
        result = msg.get("result") if isinstance(msg, dict) else None
        if not isinstance(result, dict):
            continue
        if isinstance(result.get("tools"), list):
            changed = _trim_listing(result, notes) or changed
        if isinstance(result.get("content"), list):
            changed = _trim_result(result) or changed
    if not changed:
        return body, notes
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode(), notes


def _trim_listing(result: dict[str, Any], notes: Notes) -> bool:
    tools: list[Any] = result["tools"]
    kept: list[Any] = []
    for tool in tools:
        if len(kept) >= MAX_TOOLS:
            notes.append(("mcp_listing_trimmed", {"listed": len(tools), "kept": MAX_TOOLS}))
            break
        why = _tool_problem(tool)
        if why is not None:
            name = tool.get("name") if isinstance(tool, dict) else None
            notes.append(("mcp_tool_skipped", {"tool": str(name)[:64], "reason": why}))
            continue
        _keep_output_schema(tool, notes)
        desc = tool.get("description")
        if isinstance(desc, str) and len(desc) > MAX_DESCRIPTION:
            tool["description"] = desc[:MAX_DESCRIPTION]
        kept.append(tool)
    result["tools"] = kept
    return True


def _keep_output_schema(tool: dict[str, Any], notes: Notes) -> None:
    """Out of the SDK's sight (it would validate every result against it on the loop), kept
    under `_meta` for `tools.mcp.output`, when small enough; a server's own value there is
    never trusted."""
    schema = tool.pop("outputSchema", None)
    meta = tool.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta.pop(SCHEMA_META, None)
    if schema is not None:
        if len(json.dumps(schema, separators=(",", ":"), default=str)) <= MAX_SCHEMA_BYTES:
            meta[SCHEMA_META] = schema
        else:
            notes.append(
                (
                    "mcp_output_schema_unchecked",
                    {"tool": str(tool.get("name"))[:64], "reason": "output schema too large"},
                )
            )
    tool["_meta"] = meta or None
    if tool["_meta"] is None:
        del tool["_meta"]


def _tool_problem(tool: Any) -> str | None:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        return "not a tool (no name)"
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return "input schema is not an object schema"
    if len(json.dumps(schema, separators=(",", ":"))) > MAX_SCHEMA_BYTES:
        return f"input schema is larger than {MAX_SCHEMA_BYTES} characters"
    return None


def _trim_result(result: dict[str, Any]) -> bool:
    content: list[Any] = result["content"]
    kept = content[:MAX_PARTS]
    structured = result.get("structuredContent")
    meta = result.get("_meta")
    if isinstance(meta, dict):
        meta.pop(SHRUNK_META, None)  # only the trimming says a result was shortened
    if structured is not None:
        size = len(json.dumps(structured, separators=(",", ":"), default=str))
        if size > SHRINK_ABOVE:
            result["structuredContent"] = shrink(structured, STRUCTURED_ITEMS, STRUCTURED_CHARS)
            result["_meta"] = {**(meta if isinstance(meta, dict) else {}), SHRUNK_META: True}
            # The server's copy of the same data as JSON text (for older clients): not twice.
            kept = [p for p in kept if not (_is(p, "text") and len(str(p.get("text"))) >= size)]
    for part in kept:
        if _is(part, "text") and isinstance(part.get("text"), str):
            if len(part["text"]) > MAX_TEXT:
                part["text"] = part["text"][:MAX_TEXT] + f"… (+{len(part['text']) - MAX_TEXT})"
        elif _is(part, "resource") and isinstance(part.get("resource"), dict):
            res = part["resource"]
            if isinstance(res.get("text"), str) and len(res["text"]) > MAX_TEXT:
                res["text"] = res["text"][:MAX_TEXT]
    if len(content) > MAX_PARTS:
        left = len(content) - MAX_PARTS
        kept.append({"type": "text", "text": f"({left} more content parts not shown)"})
    result["content"] = kept
    return True


def _is(part: Any, kind: str) -> bool:
    return isinstance(part, dict) and part.get("type") == kind


def to_worker_output(body: bytes, notes: Notes) -> bytes:
    return json.dumps(notes).encode() + b"\n" + body


def from_worker(out: bytes) -> tuple[bytes, Notes] | None:
    head, sep, body = out.partition(b"\n")
    try:
        notes = json.loads(head)
    except ValueError:
        return None
    return (body, [(str(e), dict(f)) for e, f in notes]) if sep else None


def main() -> None:
    cap = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    try:
        import resource
    except ImportError:  # not on Windows: the worker runs without a memory cap there
        cap = 0
    if cap > 0:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    body, notes = trim_message(sys.stdin.buffer.read())
    sys.stdout.buffer.write(to_worker_output(body, notes))


if __name__ == "__main__":
    main()
