"""The aiohttp application: Slack endpoints, /healthz and /metrics.

POST /slack/events is read, signature-checked and parsed by `intake` first (413/408/401/400 with
one short line and a metric, never a traceback), then goes through Bolt's dispatch, which acks
events before any listener work runs. /healthz and /metrics are the shared ones from
`adapters.common.http`; every connection is watched by `connguard` (idle timeout).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.request.async_request import AsyncBoltRequest

from adapters.common.http import add_health_routes
from adapters.common.logs import emit
from adapters.common.oauth_callback import add_oauth_callback
from adapters.slack import connguard
from adapters.slack.app import EVENTS_PATH, INSTALL_PATH, REDIRECT_PATH, SlackRuntime
from adapters.slack.config import SlackConfig
from adapters.slack.intake import Refusal, verified_request
from adapters.slack.oauth import SlackInstallationStorage
from bot import metrics
from bot.core import BotCore

RUNTIME: web.AppKey[SlackRuntime] = web.AppKey("slack_runtime", SlackRuntime)
_LOG = logging.getLogger(__name__)
MALFORMED_COMMAND = (
    "Sorry, I could not read that command (it came without a user or a workspace). "
    "Please try again."
)


async def _events(request: web.Request) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    config = runtime.config
    started = time.perf_counter()
    try:
        verified = await verified_request(
            request,
            secret=config.signing_secret,
            max_bytes=config.max_body_bytes,
            timeout=config.body_timeout,
        )
    except Refusal as refusal:
        return refusal.response()
    body = verified.body
    if "command" in body and not (body.get("user_id") and body.get("team_id")):
        metrics.REJECTED_REQUESTS.labels("slack", "malformed_command").inc()
        return web.json_response({"response_type": "ephemeral", "text": MALFORMED_COMMAND})
    bolt_request = AsyncBoltRequest(
        body=verified.text,
        query=request.query_string,
        headers=request.headers,  # type: ignore[arg-type]
    )
    try:
        bolt_response = await runtime.app.async_dispatch(bolt_request)
    except Exception as exc:  # Slack retries a 500; a signed request Bolt cannot handle is ours
        metrics.ERRORS.labels("slack", "dispatch_failed").inc()
        emit(_LOG, "slack_dispatch_failed", logging.ERROR, error=type(exc).__name__)
        return web.Response(status=500, text="internal error\n")
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
    app = web.Application(client_max_size=runtime.config.max_body_bytes)
    app[RUNTIME] = runtime
    connguard.install(app, runtime.config.idle_timeout)
    add_health_routes(app, runtime.core)
    if events:
        app.router.add_post(EVENTS_PATH, _events)
    add_oauth_callback(app, runtime.core)  # people's tool sign-ins (bot.connections)
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
