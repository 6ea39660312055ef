"""`bot slack`: serve Slack over HTTP, or over Socket Mode when SLACK_APP_TOKEN is set.

Both modes feed the same Bolt dispatch. In Socket Mode the HTTP server still runs for /healthz,
/metrics and (with OAuth) the install pages. SIGTERM/SIGINT stop intake first, then let
in-flight answers finish within the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

from adapters.common.logs import emit
from adapters.slack.app import SlackRuntime
from adapters.slack.config import SlackConfig, SlackConfigError
from adapters.slack.connguard import GuardedSite, app_runner
from adapters.slack.oauth import SlackInstallationStorage
from adapters.slack.server import build_web_app
from bot.core import BotCore
from bot.workers import worker_id

_LOG = logging.getLogger(__name__)


def socket_mode_handler(runtime: SlackRuntime) -> AsyncSocketModeHandler:
    """Bolt's aiohttp Socket Mode handler on the runtime's app and Web API client."""
    return AsyncSocketModeHandler(
        runtime.app, app_token=runtime.config.app_token, web_client=runtime.client
    )


async def run_slack(
    core: BotCore,
    config: SlackConfig,
    *,
    storage: SlackInstallationStorage | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run until SIGTERM/SIGINT (or `stop` is set). The caller owns and closes `core`."""
    runtime = SlackRuntime(core, config, storage)
    web_app = build_web_app(runtime, events=not config.socket_mode)
    runner = app_runner(web_app)
    await runner.setup()  # starts the runtime (session, auth.test)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    handler: AsyncSocketModeHandler | None = None
    try:
        # A supervised worker shares the port with its siblings (SO_REUSEPORT, bot.workers).
        reuse_port = worker_id() is not None
        site = GuardedSite(runner, config.http_host, config.http_port, reuse_port=reuse_port)
        try:
            await site.start()
        except OSError as exc:
            raise SlackConfigError(
                f"cannot listen on {config.http_host}:{config.http_port} (BOT_HTTP_HOST/"
                f"BOT_HTTP_PORT): {exc.strerror or exc}"
            ) from None
        if config.socket_mode:
            handler = socket_mode_handler(runtime)
            await handler.connect_async()  # type: ignore[no-untyped-call]
        emit(
            _LOG,
            "slack_serving",
            mode="socket" if config.socket_mode else "http",
            host=config.http_host,
            port=config.http_port,
            worker=worker_id(),
        )
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        if handler is not None:
            with contextlib.suppress(Exception):
                await handler.close_async()  # type: ignore[no-untyped-call]
        await runner.cleanup()  # stops the site, then drains in-flight turns
        emit(_LOG, "slack_stopped")
