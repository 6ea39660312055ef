"""What the model reads of an MCP tool result.

Text content is passed as text; structured content (the tool's typed output) as JSON data;
images, audio and binary resources are named with their type and size, never inlined (the model
cannot use the bytes here and they would eat the context); resource links and embedded text
resources give their URI and (trimmed) text. The executor's trimming bounds the whole.
"""

from __future__ import annotations

import json
from typing import Any

from tools.mcp.trim import MAX_PARTS

MAX_TEXT = 20_000


def _size(b64: str) -> int:
    return len(b64) * 3 // 4 if b64 else 0


def render_result(content: list[Any], structured: Any) -> dict[str, Any]:
    texts: list[str] = []
    attachments: list[str] = []
    for part in content[: MAX_PARTS + 1]:  # + the trimming's "N more parts not shown"
        kind = getattr(part, "type", "")
        if kind == "text":
            texts.append(str(getattr(part, "text", ""))[:MAX_TEXT])
        elif kind in ("image", "audio"):
            mime = getattr(part, "mime_type", None) or "unknown type"
            size = _size(str(getattr(part, "data", "") or ""))
            attachments.append(f"{kind} ({mime}, {size} bytes, not shown)")
        elif kind == "resource_link":
            name = getattr(part, "name", "") or ""
            attachments.append(f"resource link {name} <{getattr(part, 'uri', '')}>".strip())
        elif kind == "resource":
            res = getattr(part, "resource", None)
            uri = getattr(res, "uri", "")
            text = getattr(res, "text", None)
            if isinstance(text, str):
                texts.append(f"[resource {uri}]\n{text[:MAX_TEXT]}")
            else:
                blob = str(getattr(res, "blob", "") or "")
                mime = getattr(res, "mime_type", None) or "binary"
                attachments.append(f"resource {uri} ({mime}, {_size(blob)} bytes, not shown)")
        else:
            attachments.append(f"{kind or 'unknown'} content (not shown)")
    out: dict[str, Any] = {}
    if structured is not None:
        out["structured"] = structured
    if texts and not (structured is not None and _same(texts, structured)):
        out["text"] = "\n\n".join(texts)
    if attachments:
        out["attachments"] = attachments
    return out or {"text": ""}


def _same(texts: list[str], structured: Any) -> bool:
    """Servers often send the structured output again as JSON text: do not send it twice."""
    if len(texts) != 1:
        return False
    if structured == {"result": texts[0]}:  # a plain string result, wrapped by the server
        return True
    try:
        return bool(json.loads(texts[0]) == structured)
    except ValueError:
        return False
