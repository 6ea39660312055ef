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
    the whole listing for one such tool); `outputSchema` is moved under the tool's `_meta`
    (the SDK would otherwise validate every result against it on the loop, with `re` patterns;
    `tools.mcp.output` checks results against it in a thread, its patterns on a time budget);
    descriptions are cut to what the model is offered;
  - a tool result keeps its first `MAX_PARTS` content parts (and says how many were left out),
    texts cut to `MAX_TEXT` characters (media stay: the byte cap bounds them, and the model is
    only told their type and size); structured content is shrunk the way the executor would
    trim it anyway (lists, long strings), and the server's JSON copy of it as text is dropped
    when it is that large.

What remains is a few hundred kilobytes at most, which the SDK parses on the loop in
milliseconds. Server-sent events on the long-lived GET stream go through the same per-event cap.

Where the trimming (`tools.mcp.trim`) runs: a message under `PROCESS_ABOVE` bytes in a worker
thread; a larger one in a short-lived worker process. `json.loads` is one C call that holds the
GIL: parsing 3.5 MB of 100,000 small parts held it 140-290 ms on a loaded machine, which a thread
does not hide from the event loop; with a process the loop only pipes the bytes. If the process
fails (memory cap, timeout), that message is refused as unreadable.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx2

from tools.mcp.trim import Notes, from_worker, trim_message

log = logging.getLogger("tools.mcp")

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
TOO_LARGE = -32050  # JSON-RPC server-error range: "the answer exceeded the bot's cap"
_SMALL = 16 * 1024  # a message smaller than this is not worth a thread hop unless a listing
PROCESS_ABOVE = 256 * 1024  # larger messages are trimmed in a worker process

WORKER_TIMEOUT = 20.0  # seconds the trimming process may take
WORKER_MEMORY = 1024 * 1024 * 1024  # bytes of address space it may use
MAX_WORKERS = 2  # trimming processes at once (per event loop); more messages wait their turn
_workers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


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
            trimmed = await trim(body, self._install)
            if trimmed is None:
                return _json_reply(response, request, _too_large(request, "could not be read"), 200)
            body = trimmed
        return _json_reply(response, request, body)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Stream(httpx2.AsyncByteStream):
    def __init__(self, chunks: AsyncGenerator[bytes, None], upstream: httpx2.Response) -> None:
        self._chunks = chunks
        self._upstream = upstream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        await self._chunks.aclose()
        await self._upstream.aclose()


def _without_length(headers: httpx2.Headers) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers.multi_items() if k.lower() != "content-length"]


def _json_reply(
    upstream: httpx2.Response, request: httpx2.Request, body: bytes, status: int | None = None
) -> httpx2.Response:
    replaced = ("content-type", "content-encoding")  # the body here is plain JSON, as read
    headers = [(k, v) for k, v in _without_length(upstream.headers) if k.lower() not in replaced]
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
    message = f"the server's answer {what} (the bot reads at most {MAX_MESSAGE_BYTES // 2**20} MiB)"
    reply = {
        "jsonrpc": "2.0",
        "id": _request_id(request),
        "error": {"code": TOO_LARGE, "message": message},
    }
    return json.dumps(reply).encode()


async def _bounded_events(
    response: httpx2.Response, request: httpx2.Request, cap: int, install: str
) -> AsyncGenerator[bytes, None]:
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
        trimmed = await trim(data, install)
        data = trimmed if trimmed is not None else b""
    out = [*fields, *(b"data: " + part for part in data.split(b"\n"))] if data else fields
    return b"\n".join(out) + b"\n\n"


async def trim(body: bytes, install: str) -> bytes | None:
    """`trim_message` off the loop (thread or process, by size); None if the process failed."""
    if len(body) <= PROCESS_ABOVE:
        out, notes = await asyncio.to_thread(trim_message, body)
    else:
        done = await _in_process(body)
        if done is None:
            log.warning("mcp_message_unreadable", extra={"fields": {"install": install}})
            return None
        out, notes = done
    for event, fields in notes:
        log.warning(event, extra={"fields": {"install": install, **fields}})
    return out


async def _in_process(body: bytes) -> tuple[bytes, Notes] | None:
    """One short-lived `python -m tools.mcp.trim` per large message: nothing to keep alive or
    clean up, no fork of the bot's threads, no re-import of its main module; its memory is
    capped and it is killed after `WORKER_TIMEOUT`."""
    loop = asyncio.get_running_loop()
    slots = _workers.get(loop)
    if slots is None:
        slots = _workers[loop] = asyncio.Semaphore(MAX_WORKERS)
    async with slots:
        return await _run_worker(body)


async def _run_worker(body: bytes) -> tuple[bytes, Notes] | None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tools.mcp.trim",
        str(WORKER_MEMORY),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    try:
        async with asyncio.timeout(WORKER_TIMEOUT):
            out, _ = await proc.communicate(body)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        return None
    return from_worker(out)
