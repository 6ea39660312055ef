"""One malformed gateway frame must cost that frame, never the connection or the process.

discord.py parses every frame in `DiscordWebSocket.received_message` (decompress, `json.loads`,
then the event's parser, e.g. `ConnectionState.parse_message_create`), and anything raised there
(a `KeyError` for a message without `author`, a `ValueError` for `id: "abc"`, a `TypeError` for
`d: null`, a `RecursionError` for a frame nested thousands deep) escapes `Client.connect` and
ends `client.start()`: every guild goes offline. `guard_gateway` wraps `received_message` on each
websocket the client opens (through `ConnectionState._update_references`, which discord.py calls
for every new socket before the first frame, so nothing process-wide is patched):

- the zlib stream is inflated here, by `BoundedZlib`, in chunks: a frame whose text would pass
  `MAX_FRAME_BYTES` is inflated to nothing (the stream's shared window stays whole, so the
  frames after it still decode) and dropped; compressed input is capped the same way;
- a frame nested deeper than `MAX_DEPTH` is dropped before `json.loads` sees it (Discord's own
  payloads nest about ten deep); the depth scan runs only when the frame holds more brackets
  than that, so a normal message costs two `str.count` calls;
- any other exception from the frame's parsing (not discord.py's own reconnect and close
  signals) drops that frame.

Each drop is one structured WARNING line (`discord_gateway_event_dropped`: event name, opcode,
sequence, size, reason; never the frame's text) and `bot_errors_total{kind="gateway_event"}`.
The sequence number of a dropped dispatch is still taken when it can be read, so a RESUME does
not replay it. Errors raised later, in event handlers, go to `log_event_error` (one line too).
"""

from __future__ import annotations

import logging
import re
import sys
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import discord
from discord.gateway import DiscordWebSocket, ReconnectWebSocket, WebSocketClosure

from adapters.common.logs import emit
from bot import metrics

_LOG = logging.getLogger(__name__)
MAX_FRAME_BYTES = 32 * 1024 * 1024  # a GUILD_CREATE of a very large guild stays well under
MAX_COMPRESSED_BYTES = 16 * 1024 * 1024  # one frame's compressed chunks, before its flush marker
MAX_DEPTH = 64
_CHUNK = 1024 * 1024
_FLUSH = b"\x00\x00\xff\xff"
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_PAIR = re.compile(r"[\[{][\]}]")
_EVENT = re.compile(r'"t"\s*:\s*"([A-Z0-9_]{1,64})"')
_OP = re.compile(r'"op"\s*:\s*(\d{1,3})')
_SEQ = re.compile(r'"s"\s*:\s*(\d{1,18})')
# discord.py's own signals: a reconnect, a closed socket. They must pass through.
_CONTROL: tuple[type[BaseException], ...] = (
    ReconnectWebSocket,
    WebSocketClosure,
    discord.ConnectionClosed,
)


class FrameDropped(Exception):
    """The frame was not parsed; `reason` says why (a word for the log line)."""

    def __init__(self, reason: str, size: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.size = size


class BoundedZlib:
    """discord.py's zlib-stream reader with bounds: the same interface (`decompress` returns a
    frame's text, or None while the frame's chunks are still arriving)."""

    COMPRESSION_TYPE = "zlib-stream"

    def __init__(self, max_bytes: int | None = None, max_compressed: int | None = None) -> None:
        self.max_bytes = max_bytes or MAX_FRAME_BYTES
        self.max_compressed = max_compressed or MAX_COMPRESSED_BYTES
        self.buffer = bytearray()
        self.context = zlib.decompressobj()
        self._overflow = False

    def decompress(self, data: bytes, /) -> str | None:
        if len(self.buffer) + len(data) > self.max_compressed:
            # Keep the stream whole (later frames share its window) without keeping the bytes.
            self._inflate_discarding(bytes(self.buffer) + data)
            self.buffer = bytearray()
            self._overflow = True
        else:
            self.buffer.extend(data)
        if len(data) < 4 or data[-4:] != _FLUSH:
            return None
        if self._overflow:
            self._inflate_discarding(bytes(self.buffer))
            self.buffer = bytearray()
            self._overflow = False
            raise FrameDropped("too_large", self.max_compressed)
        pending, self.buffer = bytes(self.buffer), bytearray()
        out = self.context.decompress(pending, self.max_bytes + 1)
        if len(out) > self.max_bytes or self.context.unconsumed_tail:
            size = len(out) + self._inflate_discarding(self.context.unconsumed_tail)
            raise FrameDropped("too_large", size)
        try:
            return out.decode("utf-8")
        except UnicodeDecodeError:
            raise FrameDropped("not_utf8", len(out)) from None

    def _inflate_discarding(self, data: bytes) -> int:
        """Run `data` through the stream, keeping none of the output; its size."""
        total = 0
        while data:
            total += len(self.context.decompress(data, _CHUNK))
            data = self.context.unconsumed_tail
        return total


def too_deep(text: str, limit: int | None = None) -> bool:
    """True when the JSON text nests arrays/objects deeper than `limit` (strings skipped)."""
    limit = limit or MAX_DEPTH
    if text.count("{") + text.count("[") <= limit:
        return False
    # Brackets only (strings removed), then one innermost level peeled per pass: all in C.
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if re.search(r"[\[{]{" + str(limit + 1) + "}", brackets):
        return True  # a run of openings deeper than the bound: no need to peel
    for _ in range(limit):
        peeled = _PAIR.sub("", brackets)
        if not peeled:
            return False
        if len(peeled) == len(brackets):
            return False  # unbalanced: json.loads refuses it, nothing deep is built
        brackets = peeled
    return True


def _frame_fields(text: str) -> dict[str, Any]:
    """What the log may say about a frame: event name, opcode, sequence (never its content)."""
    head = text[:512]
    event = _EVENT.search(head)
    op = _OP.search(head)
    seq = _SEQ.search(head)
    return {
        "event": event.group(1) if event else None,
        "op": int(op.group(1)) if op else None,
        "seq": int(seq.group(1)) if seq else None,
    }


def _dropped(ws: DiscordWebSocket, reason: str, size: int, text: str = "") -> None:
    fields = _frame_fields(text) if text else {"event": None, "op": None, "seq": None}
    seq = fields["seq"]
    if fields["op"] == 0 and isinstance(seq, int) and seq > (ws.sequence or 0):
        ws.sequence = seq  # taken, so a RESUME does not replay it
    metrics.ERRORS.labels("discord", "gateway_event").inc()
    emit(
        _LOG,
        "discord_gateway_event_dropped",
        logging.WARNING,
        reason=reason,
        bytes=size,
        shard=ws.shard_id,
        **fields,
    )


def guard_socket(ws: DiscordWebSocket) -> None:
    """Bound and guard the frames of one websocket (see the module docstring)."""
    original: Callable[[Any], Awaitable[None]] = ws.received_message
    decompressor = BoundedZlib()
    ws._decompressor = decompressor  # type: ignore[assignment]

    async def received_message(msg: Any, /) -> None:
        if isinstance(msg, bytes | bytearray):
            try:
                text = decompressor.decompress(bytes(msg))
            except FrameDropped as exc:
                _dropped(ws, exc.reason, exc.size)
                return
            except zlib.error:
                # The stream itself is broken: nothing after this decodes. Start over.
                _dropped(ws, "bad_compression", len(msg))
                raise ReconnectWebSocket(ws.shard_id, resume=False) from None
            if text is None:
                return
        else:
            text = str(msg)
        if len(text) > MAX_FRAME_BYTES:
            _dropped(ws, "too_large", len(text))
            return
        if too_deep(text):
            _dropped(ws, "too_deep", len(text), text)
            return
        try:
            await original(text)
        except _CONTROL:
            raise
        except Exception as exc:
            _dropped(ws, f"parse_error:{type(exc).__name__}", len(text), text)

    ws.received_message = received_message  # type: ignore[method-assign]


def guard_gateway(client: discord.Client) -> None:
    """Guard every websocket `client` opens, now and after each reconnect."""
    state = client._connection
    update = state._update_references

    def update_references(ws: DiscordWebSocket) -> None:
        guard_socket(ws)
        update(ws)

    state._update_references = update_references  # type: ignore[method-assign]


async def log_event_error(event_method: str, /, *args: Any, **kwargs: Any) -> None:
    """`Client.on_error`: an exception in an event handler is one line, not a traceback."""
    exc = sys.exc_info()[1]
    metrics.ERRORS.labels("discord", "event_handler").inc()
    emit(
        _LOG,
        "discord_event_failed",
        logging.ERROR,
        event=event_method,
        error=type(exc).__name__ if exc else None,
    )
