"""Closing connections that hold a socket without sending a request (slowloris, stalled clients).

aiohttp has a keep-alive timeout but no limit on how long a client may take to send a request
head: a socket that connects and trickles a byte now and then stays open for ever. Here each
connection gets `idle_timeout` seconds, from when it opened or finished its last response, to
deliver a complete request head; trickling bytes does not extend that. While a request is being
handled the clock stops (the body read has its own limit in `intake`, the handler its own work).

`GuardedSite` is a `web.BaseSite` (so `AppRunner.cleanup()` stops it like a `TCPSite`) whose
listening socket wraps each aiohttp protocol in `_GuardedProtocol`; the app's middleware
(`track_requests`) tells the guard when a request starts and ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web

from bot import metrics

_LOG = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _GuardedProtocol(asyncio.Protocol):
    """Forwards everything to aiohttp's protocol; aborts the transport when idle too long."""

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard) -> None:
        self._inner = inner
        self._guard = guard
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.busy = 0

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport; not isinstance-checked: uvloop's transports do not subclass
        # asyncio's classes.
        self._transport = cast(asyncio.Transport, transport)
        self._guard.register(self._transport, self)
        self._inner.connection_made(transport)
        self.idle()

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        if self._transport is not None:
            self._guard.unregister(self._transport)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    # -- the clock ---------------------------------------------------------------------------

    def idle(self) -> None:
        """No request in progress: the next request head must arrive within the timeout."""
        self._cancel()
        if self.busy == 0:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._guard.idle_timeout, self._expire)

    def started(self) -> None:
        self.busy += 1
        self._cancel()

    def ended(self) -> None:
        self.busy = max(0, self.busy - 1)
        if self.busy == 0:
            self.idle()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self.busy == 0 and self._transport is not None and not self._transport.is_closing():
            metrics.REJECTED_REQUESTS.labels("slack", "idle_connection").inc()
            self._transport.abort()


class ConnectionGuard:
    """The connections of one server and their idle clocks."""

    def __init__(self, idle_timeout: float) -> None:
        self.idle_timeout = idle_timeout
        self._by_transport: dict[int, _GuardedProtocol] = {}

    def register(self, transport: asyncio.BaseTransport, proto: _GuardedProtocol) -> None:
        self._by_transport[id(transport)] = proto

    def unregister(self, transport: asyncio.BaseTransport) -> None:
        self._by_transport.pop(id(transport), None)

    def protocol_factory(self, server: Callable[[], asyncio.Protocol]) -> Callable[[], Any]:
        return lambda: _GuardedProtocol(server(), self)

    def middleware(self) -> Any:
        @web.middleware
        async def track_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
            proto = self._by_transport.get(id(request.transport))
            if proto is None:
                return await handler(request)
            proto.started()
            try:
                return await handler(request)
            finally:
                proto.ended()

        return track_requests


LINGERING_SECONDS = 1.0  # aiohttp reads an unread body this long before closing (default 10)


def app_runner(app: web.Application) -> web.AppRunner:
    """An `AppRunner` for `app` with the intake's limits (no access log, short lingering)."""
    return web.AppRunner(
        app, access_log=None, handle_signals=False, lingering_time=LINGERING_SECONDS
    )


GUARD: web.AppKey[ConnectionGuard] = web.AppKey("connection_guard", ConnectionGuard)


def install(app: web.Application, idle_timeout: float) -> ConnectionGuard:
    """Give `app` a guard (before it is frozen); serve it with `GuardedSite`."""
    guard = ConnectionGuard(idle_timeout)
    app[GUARD] = guard
    app.middlewares.append(guard.middleware())
    return guard


class GuardedSite(web.BaseSite):
    """A TCP site whose connections are watched by the app's `ConnectionGuard`."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str | None,
        port: int,
        *,
        backlog: int = 128,
        reuse_port: bool = False,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._reuse_port = reuse_port
        self._host = host
        self._port = port
        self._guard = runner.app[GUARD]

    @property
    def name(self) -> str:
        return f"http://{self._host or '0.0.0.0'}:{self.port}"

    @property
    def port(self) -> int:
        if self._server is not None:
            sockets = getattr(self._server, "sockets", None) or []
            if sockets:
                return int(sockets[0].getsockname()[1])
        return self._port

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._guard.protocol_factory(server),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=True,
            reuse_port=self._reuse_port or None,
        )
