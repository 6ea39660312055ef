"""The aiohttp application: Slack endpoints, /healthz and /metrics.

POST /slack/events goes through Bolt's dispatch, which verifies the signature (401 on a bad or
stale one) and acks events before any listener work runs. /healthz and /metrics are the shared
ones from `adapters.common.http`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request

from adapters.common.http import add_health_routes
from adapters.slack.app import EVENTS_PATH, INSTALL_PATH, REDIRECT_PATH, SlackRuntime
from adapters.slack.config import SlackConfig
from adapters.slack.oauth import SlackInstallationStorage
from bot import metrics
from bot.core import BotCore

RUNTIME: web.AppKey[SlackRuntime] = web.AppKey("slack_runtime", SlackRuntime)


async def _events(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    started = time.perf_counter()
    bolt_request = await to_bolt_request(request)
    bolt_response = await runtime.app.async_dispatch(bolt_request)
    response = await to_aiohttp_response(bolt_response)
    metrics.ACK_LATENCY.labels("slack").observe(time.perf_counter() - started)
    return response


async def _install(request: web.Request) -> web.Response:
    flow = request.app[RUNTIME].app.oauth_flow
    if flow is None:
        raise web.HTTPNotFound()
    return await to_aiohttp_response(await flow.handle_installation(await to_bolt_request(request)))


async def _oauth_redirect(request: web.Request) -> web.Response:
    flow = request.app[RUNTIME].app.oauth_flow
    if flow is None:
        raise web.HTTPNotFound()
    return await to_aiohttp_response(await flow.handle_callback(await to_bolt_request(request)))


def build_web_app(runtime: SlackRuntime, *, events: bool = True) -> web.Application:
    """Routes for `runtime`; `events=False` for Socket Mode (health, metrics and OAuth only)."""
    app = web.Application(client_max_size=2 * 1024 * 1024)
    app[RUNTIME] = runtime
    add_health_routes(app, runtime.core)
    if events:
        app.router.add_post(EVENTS_PATH, _events)
    if runtime.app.oauth_flow is not None:
        app.router.add_get(INSTALL_PATH, _install)
        app.router.add_get(REDIRECT_PATH, _oauth_redirect)

    async def lifecycle(_app: web.Application) -> AsyncIterator[None]:
        await runtime.start()
        yield
        await runtime.stop()

    app.cleanup_ctx.append(lifecycle)
    return app


def create_http_app(
    core: BotCore,
    config: SlackConfig,
    *,
    storage: SlackInstallationStorage | None = None,
) -> web.Application:
    """The HTTP-mode application (POST /slack/events, OAuth routes, /healthz, /metrics)."""
    return build_web_app(SlackRuntime(core, config, storage), events=True)
