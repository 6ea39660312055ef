"""A TCP forwarder that can be cut and restored, to simulate a real server outage.

Stopping it closes the listener and every open connection, exactly what clients see when a
server goes away; starting it again on the same port is the server coming back.
"""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Listen (on the same port as before, if restarting); returns the port."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError, OSError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        dst.transport.abort()
        self._writers.discard(dst)


OP_MSG = 2013  # MongoDB wire protocol: the message every modern command travels in


def _mongo_command(frame: bytes) -> tuple[str, str] | None:
    """(command name, its string argument) of an OP_MSG frame, e.g. ("insert", "messages")."""
    if len(frame) < 27 or int.from_bytes(frame[12:16], "little") != OP_MSG or frame[20] != 0:
        return None
    kind_at = 25  # header 16, flagBits 4, section kind 1, document length 4: first element
    end = frame.find(b"\x00", kind_at + 1)
    if end < 0 or frame[kind_at] != 0x02:  # a string-valued first element only
        return None
    name = frame[kind_at + 1 : end].decode("utf-8", "replace")
    size = int.from_bytes(frame[end + 1 : end + 5], "little")
    return name, frame[end + 5 : end + 4 + size].decode("utf-8", "replace")


class MongoHoldingProxy(TcpProxy):
    """A forwarder to a MongoDB-protocol server that can hold back one kind of command (say
    `insert` into `messages`) until released: a write the client sent that has not reached the
    server yet, as when a replica's insert is slow (a stalled link, a retry, a failover)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        super().__init__(target_host, target_port)
        self._held: tuple[str, str] | None = None
        self._release = asyncio.Event()
        self.holding = asyncio.Event()  # set once a held command is waiting

    def hold(self, command: str, collection: str) -> None:
        self._held = (command, collection)
        self._release.clear()
        self.holding.clear()

    def release(self) -> None:
        self._held = None
        self._release.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        for pipe in (self._frames(reader, up_writer), self._pipe(up_reader, writer)):
            task = asyncio.create_task(pipe)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _frames(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        """Client to server, one whole wire message at a time (so one can be held)."""
        with contextlib.suppress(
            ConnectionError, asyncio.CancelledError, OSError, asyncio.IncompleteReadError
        ):
            while True:
                head = await src.readexactly(4)
                frame = head + await src.readexactly(int.from_bytes(head, "little") - 4)
                if self._held is not None and _mongo_command(frame) == self._held:
                    self.holding.set()
                    await self._release.wait()
                dst.write(frame)
                await dst.drain()
        dst.transport.abort()
        self._writers.discard(dst)
