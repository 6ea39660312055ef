"""`GET /healthz` and `GET /metrics`, shared by every adapter's HTTP server.

/healthz asks the core whether its stores answer (200, or 503 naming the component that does
not); /metrics serves the bot's Prometheus registry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from bot import metrics
from bot.core import BotCore

CORE: web.AppKey[BotCore] = web.AppKey("bot_core", BotCore)  # type: ignore[type-abstract]
EXTRA: web.AppKey[Callable[[], dict[str, bool]]] = web.AppKey("health_extra")
HEALTH_TIMEOUT = 3.0


async def _healthz(request: web.Request) -> web.Response:
    core = request.app[CORE]
    try:
        status = await asyncio.wait_for(core.health(), timeout=HEALTH_TIMEOUT)
        components = {str(k): bool(v) for k, v in status.items()}
    except Exception:
        components = {"core": False}
    extra = request.app.get(EXTRA)
    if extra is not None:
        components.update(extra())
    ok = all(components.values())
    return web.json_response({"ok": ok, "components": components}, status=200 if ok else 503)


async def _metrics(request: web.Request) -> web.Response:
    body, content_type = metrics.render()
    return web.Response(body=body, headers={"Content-Type": content_type})


def add_health_routes(
    app: web.Application,
    core: BotCore,
    extra: Callable[[], dict[str, bool]] | None = None,
) -> None:
    """Serve /healthz (for `core`, plus the adapter's own `extra` components such as its
    gateway connection) and /metrics on `app`."""
    app[CORE] = core
    if extra is not None:
        app[EXTRA] = extra
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/metrics", _metrics)
