"""`GET /oauth/start` and `GET /oauth/callback`: where a person's tool sign-in begins (the
"Connect" link, redirected to the authorization server) and ends (`bot.connections.chat`).

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
START_PATH = "/oauth/start"  # the "Connect" link: redirects to the authorization server
MAX_QUERY_BYTES = 4096


@runtime_checkable
class FinishesSignIns(Protocol):
    async def open_sign_in(self, query: Mapping[str, str]) -> tuple[str | None, str]: ...

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
        return _page(ok, text)

    async def start(request: web.Request) -> web.Response:
        if len(request.query_string) > MAX_QUERY_BYTES:
            target, text = None, "This link is too large."
        else:
            target, text = await core.open_sign_in({k: v for k, v in request.query.items()})
        if target is not None:
            return web.Response(status=302, headers={**_HEADERS, "Location": target})
        return _page(False, text)

    app.router.add_get(START_PATH, start)
    app.router.add_get(CALLBACK_PATH, callback)


_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


def _page(ok: bool, text: str) -> web.Response:
    return web.Response(
        text=page(ok, text),
        status=200 if ok else 400,
        content_type="text/html",
        headers=_HEADERS,
    )
