"""The JSON the model sees for every call, and trimming of results too large for the context.

One shape for everything — `{"ok": true, "data": ...}` or `{"ok": false, "error": {"type",
"message", "fields"?, "retryable"}}` — so the model learns one convention. Content is compact
JSON with `ensure_ascii=False` (Chinese stays readable and costs fewer tokens), and is always
valid JSON and encodable as UTF-8, whatever the tool returned.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import to_jsonable_python

from tools.shrink import shrink

_SEPARATORS = (",", ":")


def dumps(value: Any) -> str:
    """Compact JSON; falls back to ASCII escapes if the text holds lone surrogates."""
    text = json.dumps(value, ensure_ascii=False, separators=_SEPARATORS, allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True, separators=_SEPARATORS, allow_nan=False)
    return text


def jsonable(value: Any) -> Any:
    """Plain JSON values from whatever a tool returned (models, dates, sets; NaN -> null)."""
    if value is None or (isinstance(value, str | int | float | bool) and _finite(value)):
        return value
    try:
        return to_jsonable_python(value, fallback=str, inf_nan_mode="null")
    except UnicodeEncodeError:  # a dict key with a lone surrogate: replace it and retry
        return to_jsonable_python(_clean_keys(value), fallback=str, inf_nan_mode="null")


def _clean_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            (
                k.encode("utf-8", "replace").decode("utf-8") if isinstance(k, str) else k
            ): _clean_keys(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_clean_keys(v) for v in value]
    return value


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or value - value == 0.0


def ok(data: Any) -> dict[str, Any]:
    return {"ok": True, "data": data}


def error(
    kind: str, message: str, *, retryable: bool, fields: dict[str, str] | None = None
) -> dict[str, Any]:
    err: dict[str, Any] = {"type": kind, "message": message}
    if fields:
        err["fields"] = fields
    err["retryable"] = retryable
    return {"ok": False, "error": err}


def fit(data: Any, max_chars: int) -> tuple[str, int, bool]:
    """(content, untrimmed size, trimmed?) for a success envelope of JSON-ready `data`.

    Over `max_chars`, lists and objects are cut (with a count of what was dropped) and long
    strings shortened, progressively harder; if nothing structural fits, a text preview is sent.
    """
    full = dumps(ok(data))
    size = len(full)
    if size <= max_chars:
        return full, size, False
    note = (
        f"Result trimmed from {size} characters to fit; lists and long texts were shortened. "
        "Ask for something narrower if you need the rest."
    )
    for level in range(10):
        items = max(1, 64 >> level)
        chars = max(16, 2048 >> level)
        cut = shrink(data, items, chars, 0)
        text = dumps({"ok": True, "data": cut, "truncated": True, "note": note})
        if len(text) <= max_chars:
            return text, size, True
    flat = dumps(data)
    room = max(0, max_chars - len(note) - 80)
    while True:
        text = dumps({"ok": True, "data": flat[:room], "truncated": True, "note": note})
        if len(text) <= max_chars or room == 0:
            return text, size, True
        room //= 2
