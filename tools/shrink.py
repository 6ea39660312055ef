"""Cutting a JSON value down to size: lists and objects to a number of entries, strings to a
number of characters, with a note of what was left out. Pure and dependency-free, so the MCP
trimming worker process (`tools.mcp.trim`) starts fast."""

from __future__ import annotations

from typing import Any

_MAX_DEPTH = 32


def shrink(value: Any, items: int, chars: int, depth: int = 0) -> Any:
    """`value` with lists/objects cut to `items` entries and strings to `chars` characters."""
    if isinstance(value, str):
        if len(value) <= chars:
            return value
        return value[:chars] + f"… (+{len(value) - chars} chars)"
    if depth >= _MAX_DEPTH:
        return "…"
    if isinstance(value, list):
        out: list[Any] = [shrink(v, items, chars, depth + 1) for v in value[:items]]
        if len(value) > items:
            out.append(f"… {len(value) - items} more items omitted")
        return out
    if isinstance(value, dict):
        keys = list(value)[:items]
        obj = {k: shrink(value[k], items, chars, depth + 1) for k in keys}
        if len(value) > items:
            obj["…"] = f"{len(value) - items} more keys omitted"
        return obj
    return value
