"""An ASGI app served by uvicorn on a loopback port, on the caller's event loop: how the fake MCP
servers (`mcp_server`, `mcp_features`, `oauth_mcp`) run a real `mcp` SDK server for the tests."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn


class LoopbackAsgi:
    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    def bind(self, port: int = 0) -> int:
        """Take 127.0.0.1:`port` (0: a free one) and return it: before the app is built, since an
        app may need its own URL (the OAuth fake's resource and issuer)."""
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        return int(self._sock.getsockname()[1])

    async def serve(self, app: Any) -> None:
        """Serve `app` on the bound port until `stop`; returns once uvicorn accepts (a failed
        start raises its error here)."""
        assert self._sock is not None, "bind() first"
        config = uvicorn.Config(app, log_level="critical", lifespan="on", access_log=False)
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            self._server.force_exit = True
            await self._task
        self._server = self._task = None
