"""`GET /oauth/callback`: where a person's tool sign-in ends (`bot.connections.chat`).

Served by the Slack app's HTTP server (HTTP mode, and Socket Mode's health server) and by the
Discord bot's (the one of /healthz, on BOT_HTTP_HOST/BOT_HTTP_PORT). The page
says connected or why not; the query is bounded before it is read, and nothing of it (code,
state) is logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from aiohttp import web

from bot.connections.page import page

CALLBACK_PATH = "/oauth/callback"
MAX_QUERY_BYTES = 4096


@runtime_checkable
class FinishesSignIns(Protocol):
    async def finish_sign_in(self, query: Mapping[str, str]) -> tuple[bool, str]: ...


def add_oauth_callback(app: web.Application, core: object) -> None:
    """Route the callback to `core` when it finishes sign-ins."""
    if not isinstance(core, FinishesSignIns):
        return

    async def callback(request: web.Request) -> web.Response:
        if len(request.query_string) > MAX_QUERY_BYTES:
            ok, text = False, "This sign-in answer is too large."
        else:
            query = {k: v for k, v in request.query.items()}
            ok, text = await core.finish_sign_in(query)
        return web.Response(
            text=page(ok, text),
            status=200 if ok else 400,
            content_type="text/html",
            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
        )

    app.router.add_get(CALLBACK_PATH, callback)
