"""What an MCP server sends is bounded and trimmed before the SDK parses it, off the event loop.

The SDK reads a JSON answer whole (`response.aread()`, no limit) and parses every message with
pydantic on the event loop; then it validates structured results against the server's own
output schema (jsonschema, pure Python, server-chosen patterns). A hostile or broken server
could hold the loop for seconds with 100,000 content parts or a 5,000-tool listing, or take
hundreds of megabytes with an 80 MB listing. This layer sits under the SDK, as the transport of
the install's HTTP client, and makes sure the SDK only ever sees small, well-formed messages:

- **A byte cap per message** (`MAX_MESSAGE_BYTES`): a JSON body (declared or streamed) or one
  server-sent event longer than that is not read further; the request gets a JSON-RPC error
  (`TOO_LARGE`) instead, which the connection reports as "the answer was too large" (a tool
  result) or a failed listing. Compressed bodies are refused (we ask for `identity`), so the cap
  counts the bytes that are parsed.
- **Trimming, in a worker thread** (`json` parse and re-encode of the bounded message):
  - a listing keeps its first `MAX_TOOLS` tools; a tool whose input schema is not an object
    schema, or is larger than the bot offers, is dropped with one log line (the SDK would reject
    the whole listing for one such tool); `outputSchema` is removed (the bot shows structured
    results to the model as data either way, and the SDK would otherwise validate every result
    against it on the loop); descriptions are cut to what the model is offered;
  - a tool result keeps its first `MAX_PARTS` content parts (and says how many were left out),
    texts cut to `MAX_TEXT` characters (media stay: the byte cap bounds them, and the model is
    only told their type and size); structured content is shrunk the way the executor would
    trim it anyway (lists, long strings), and the server's JSON copy of it as text is dropped
    when it is that large.

What remains is a few hundred kilobytes at most, which the SDK parses on the loop in
milliseconds. Server-sent events on the long-lived GET stream go through the same per-event cap.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx2

from tools.envelope import shrink

log = logging.getLogger("tools.mcp")

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_TOOLS = 128  # listed tools kept per page (the connection also caps the whole listing)
MAX_PARTS = 100  # content parts of one result
MAX_TEXT = 20_000  # characters of one text part
MAX_SCHEMA_BYTES = 16_000  # an input schema larger than this is not offered (tools.mcp.schema)
MAX_DESCRIPTION = 1_024
STRUCTURED_ITEMS = 64  # structured content: items per list/object kept when it is large
STRUCTURED_CHARS = 2_048  # ... and characters per string
SHRINK_ABOVE = 64 * 1024  # structured content larger than this (as JSON) is shrunk
TOO_LARGE = -32050  # JSON-RPC server-error range: "the answer exceeded the bot's cap"
_SMALL = 16 * 1024  # a message smaller than this is not worth a thread hop unless a listing


class BoundedTransport(httpx2.AsyncBaseTransport):
    """Wraps the real transport of one install's MCP client (see the module docstring)."""

    def __init__(
        self, inner: httpx2.AsyncBaseTransport, install: str, *, cap: int = MAX_MESSAGE_BYTES
    ) -> None:
        self._inner = inner
        self._install = install
        self._cap = cap

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["accept-encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        ctype = response.headers.get("content-type", "").lower()
        encoding = response.headers.get("content-encoding", "identity").lower()
        if not (ctype.startswith("application/json") or ctype.startswith("text/event-stream")):
            return response
        if encoding not in ("", "identity"):
            await response.aclose()
            return _json_reply(response, request, _too_large(request, "was compressed"), 200)
        if ctype.startswith("text/event-stream"):
            events = _bounded_events(response, request, self._cap, self._install)
            return httpx2.Response(
                response.status_code,
                headers=_without_length(response.headers),
                stream=_Stream(events, response),
                request=request,
                extensions=response.extensions,
            )
        body = await _read_capped(response, self._cap)
        if body is None:
            return _json_reply(response, request, _too_large(request, "was too large"), 200)
        if response.status_code < 400 and (len(body) > _SMALL or b'"tools"' in body):
            body = await asyncio.to_thread(trim_message, body, self._install)
        return _json_reply(response, request, body)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Stream(httpx2.AsyncByteStream):
    def __init__(self, chunks: AsyncIterator[bytes], upstream: httpx2.Response) -> None:
        self._chunks = chunks
        self._upstream = upstream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        await self._upstream.aclose()


def _without_length(headers: httpx2.Headers) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers.multi_items() if k.lower() != "content-length"]


def _json_reply(
    upstream: httpx2.Response, request: httpx2.Request, body: bytes, status: int | None = None
) -> httpx2.Response:
    headers = [(k, v) for k, v in _without_length(upstream.headers) if k.lower() != "content-type"]
    headers += [("content-type", "application/json"), ("content-length", str(len(body)))]
    return httpx2.Response(
        status or upstream.status_code,
        headers=headers,
        content=body,
        request=request,
        extensions=upstream.extensions,
    )


async def _read_capped(response: httpx2.Response, cap: int) -> bytes | None:
    """The body, or None (and the connection closed) once it passes `cap` bytes."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        await response.aclose()
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.stream:  # type: ignore[union-attr]
        size += len(chunk)
        if size > cap:
            await response.aclose()
            return None
        chunks.append(chunk)
    await response.aclose()
    return b"".join(chunks)


def _request_id(request: httpx2.Request) -> Any:
    try:
        sent = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return None
    return sent.get("id") if isinstance(sent, dict) else None


def _too_large(request: httpx2.Request, what: str) -> bytes:
    message = f"the server's answer {what} (the bot reads at most {MAX_MESSAGE_BYTES} bytes)"
    reply = {
        "jsonrpc": "2.0",
        "id": _request_id(request),
        "error": {"code": TOO_LARGE, "message": message},
    }
    return json.dumps(reply).encode()


async def _bounded_events(
    response: httpx2.Response, request: httpx2.Request, cap: int, install: str
) -> AsyncIterator[bytes]:
    """Re-emit the server-sent events of `response`, each bounded and trimmed."""
    pending = bytearray()  # the line being received
    fields: list[bytes] = []
    data: list[bytes] = []
    size = 0
    async for chunk in response.stream:  # type: ignore[union-attr]
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            pending += chunk[start:end]
            start = end + 1
            line = bytes(pending).rstrip(b"\r")
            pending.clear()
            if line.startswith(b"data:"):
                value = line[5:].removeprefix(b" ")
                size += len(value) + 1
                data.append(value)
            elif line and not line.startswith(b":"):  # a field; comments are dropped
                fields.append(line)
            elif not line and (data or fields):  # a blank line ends the event
                yield await _event(fields, b"\n".join(data), install)
                fields, data, size = [], [], 0
        pending += chunk[start:]
        if size + len(pending) > cap:
            break
    else:
        if data or fields:
            yield await _event(fields, b"\n".join(data), install)
        return
    await response.aclose()
    if _request_id(request) is not None:
        yield b"event: message\ndata: " + _too_large(request, "was too large") + b"\n\n"


async def _event(fields: list[bytes], data: bytes, install: str) -> bytes:
    if len(data) > _SMALL or b'"tools"' in data:
        data = await asyncio.to_thread(trim_message, data, install)
    out = [*fields, *(b"data: " + part for part in data.split(b"\n"))] if data else fields
    return b"\n".join(out) + b"\n\n"


def trim_message(body: bytes, install: str) -> bytes:
    """One JSON-RPC message (or batch) with its listing or tool result trimmed; runs in a worker
    thread. Bodies that are not JSON pass unchanged (the SDK reports them as parse errors)."""
    try:
        message = json.loads(body)
    except ValueError:
        return body
    messages = message if isinstance(message, list) else [message]
    changed = False
    for msg in messages:
        result = msg.get("result") if isinstance(msg, dict) else None
        if not isinstance(result, dict):
            continue
        if isinstance(result.get("tools"), list):
            changed = _trim_listing(result, install) or changed
        if isinstance(result.get("content"), list):
            changed = _trim_result(result) or changed
    if not changed:
        return body
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def _trim_listing(result: dict[str, Any], install: str) -> bool:
    tools: list[Any] = result["tools"]
    kept: list[Any] = []
    for tool in tools:
        if len(kept) >= MAX_TOOLS:
            log.warning(
                "mcp_listing_trimmed",
                extra={"fields": {"install": install, "listed": len(tools), "kept": MAX_TOOLS}},
            )
            break
        why = _tool_problem(tool)
        if why is not None:
            name = tool.get("name") if isinstance(tool, dict) else None
            log.warning(
                "mcp_tool_skipped",
                extra={
                    "fields": {"install": install, "tool": str(name)[:64], "reason": why},
                },
            )
            continue
        tool.pop("outputSchema", None)
        desc = tool.get("description")
        if isinstance(desc, str) and len(desc) > MAX_DESCRIPTION:
            tool["description"] = desc[:MAX_DESCRIPTION]
        kept.append(tool)
    result["tools"] = kept
    return True


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
    if structured is not None:
        size = len(json.dumps(structured, separators=(",", ":"), default=str))
        if size > SHRINK_ABOVE:
            result["structuredContent"] = shrink(structured, STRUCTURED_ITEMS, STRUCTURED_CHARS)
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
