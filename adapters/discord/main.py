"""`bot discord`: the composition root that puts the Discord adapter on the core.

Start-up: the settings are checked, discord.py is pointed at `DISCORD_API_URL` /
`DISCORD_GATEWAY_URL` (`endpoints.py`), then one REST call pair checks the token and asks
Discord how many shards it recommends and how many may identify at once (`GET /users/@me`,
`GET /gateway/bot`): an `AutoShardedClient` runs when `DISCORD_SHARD_COUNT` is set or Discord
recommends more than one, on the shards `DISCORD_SHARDS` names (all by default; see
`adapters.discord.shards`).
Then the core opens (and starts its background jobs, see `adapters.common.startup`), `/healthz`
and `/metrics` are served on BOT_HTTP_HOST:BOT_HTTP_PORT, and the client runs until SIGTERM or
SIGINT, when answers in flight finish before it disconnects.

Failures a person can fix end with one line and exit code 2, never a traceback: a refused
privileged intent (gateway close 4014), a bad token (401 or close 4004), an unreachable API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass

import discord
import yarl
from aiohttp import web
from discord.gateway import DiscordWebSocket

from adapters.common.http import add_health_routes
from adapters.common.logs import emit
from adapters.common.oauth_callback import add_oauth_callback
from adapters.discord.config import DiscordConfig, DiscordConfigError
from adapters.discord.endpoints import point_discord_at
from adapters.discord.intents import asks_for_content, go_without_content
from adapters.discord.runtime import DiscordRuntime
from adapters.discord.settings import load_discord_settings
from adapters.discord.traits import DISCORD
from bot.config import ConfigError, Settings
from bot.core import BotCore
from bot.platforms import register

_LOG = logging.getLogger(__name__)
INTENT_REFUSED = (
    "Discord refused the Message Content intent (close code 4014): enable it in the Developer "
    "Portal → your application → Bot → Privileged Gateway Intents → Message Content Intent"
)
BAD_TOKEN = (
    "Discord rejected DISCORD_TOKEN (401/4004): copy the bot token again from the Developer "
    "Portal → your application → Bot → Reset Token"
)


SHARDING_REQUIRED = (
    "Discord requires sharding (close code 4011: one shard may serve at most 2,500 servers): "
    "unset DISCORD_SHARD_COUNT (and DISCORD_SHARDS) to use the count Discord recommends, or "
    "raise DISCORD_SHARD_COUNT and give each process its DISCORD_SHARDS=first-last range"
)


class DiscordStartError(Exception):
    """The bot cannot run as configured; the message is one line for the operator."""


async def main(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT; ConfigError (one line) for anything a person must fix."""
    register(DISCORD)
    try:
        config = DiscordConfig.from_settings(settings, load_discord_settings())
    except DiscordConfigError as exc:
        raise ConfigError(str(exc)) from None
    settings.require_openai_key()
    from adapters.common.startup import running_core

    try:
        gateway = await preflight(config)
        async with running_core(settings) as core:
            await run_discord(
                core,
                config,
                shard_count=gateway.shard_count,
                max_concurrency=gateway.max_concurrency,
            )
    except DiscordStartError as exc:
        raise ConfigError(str(exc)) from None
    return 0


@dataclass(frozen=True)
class GatewayPlan:
    """What start-up learnt from Discord: the shard count to run (None: one connection, no
    sharding) and how many shards may identify per 5 seconds."""

    shard_count: int | None
    max_concurrency: int = 1


async def preflight(config: DiscordConfig) -> GatewayPlan:
    """Point discord.py at its endpoints, check the token, pick the shard count."""
    point_discord_at(api_url=config.api_url, gateway_url=config.gateway_url)
    http = discord.http.HTTPClient(asyncio.get_running_loop())
    try:
        await http.static_login(config.token)
        recommended, url, limits = await http.get_bot_gateway()
    except discord.LoginFailure:
        raise DiscordStartError(BAD_TOKEN) from None
    except (discord.HTTPException, discord.RateLimited, discord.GatewayNotFound, OSError) as exc:
        raise DiscordStartError(
            f"cannot reach Discord's API at {config.api_url}: {_brief(exc)}"
        ) from None
    finally:
        await http.close()
    if not config.gateway_url:
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)  # the one Discord named
    concurrency = _max_concurrency(limits)
    if config.shard_count is not None:
        return GatewayPlan(config.shard_count, concurrency)
    return GatewayPlan(recommended if recommended > 1 else None, concurrency)


def _max_concurrency(limits: object) -> int:
    """`session_start_limit.max_concurrency`, 1 when missing or malformed (the safe pace)."""
    value = limits.get("max_concurrency") if isinstance(limits, dict) else None
    return value if isinstance(value, int) and 1 <= value <= 10_000 else 1


async def run_discord(
    core: BotCore,
    config: DiscordConfig,
    *,
    shard_count: int | None = None,
    max_concurrency: int = 1,
    stop: asyncio.Event | None = None,
    runtime: DiscordRuntime | None = None,
) -> None:
    """Run the client until `stop` (or SIGTERM/SIGINT). The caller owns and closes `core`."""
    point_discord_at(api_url=config.api_url, gateway_url=config.gateway_url)
    runtime = runtime or DiscordRuntime(
        core, config, shard_count=shard_count, max_concurrency=max_concurrency
    )
    stop = stop or asyncio.Event()
    web_app = web.Application()
    client = runtime.client
    add_health_routes(
        web_app, core, lambda: {"discord": client.is_ready() and not client.is_closed()}
    )
    add_oauth_callback(web_app, core)  # people's tool sign-ins end here (BOT_PUBLIC_URL)
    web_runner = web.AppRunner(web_app, access_log=None, handle_signals=False)
    await web_runner.setup()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    client_task: asyncio.Task[None] | None = None
    try:
        try:
            await web.TCPSite(web_runner, config.http_host, config.http_port).start()
            runtime.http_port = int(web_runner.addresses[0][1])
        except OSError as exc:
            raise DiscordStartError(
                f"cannot serve /healthz on {config.http_host}:{config.http_port} "
                f"(BOT_HTTP_HOST/BOT_HTTP_PORT): {exc.strerror or exc}"
            ) from None
        client_task = asyncio.create_task(_run_client(runtime, config), name="discord")
        stopper = asyncio.create_task(stop.wait(), name="discord-stop")
        await asyncio.wait({client_task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if client_task.done():
            _raise_start_error(client_task)
        emit(_LOG, "discord_stopping")
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await runtime.stop()
        if client_task is not None and not client_task.done():
            client_task.cancel()
        if client_task is not None:
            with contextlib.suppress(BaseException):
                await client_task
        await web_runner.cleanup()


async def _run_client(runtime: DiscordRuntime, config: DiscordConfig) -> None:
    """`client.start`, except that with `DISCORD_MESSAGE_CONTENT=auto` a refused Message
    Content intent (close 4014) reconnects without it (see `adapters.discord.intents`)."""
    client = runtime.client
    await client.login(config.token)
    while True:
        try:
            await client.connect()
            return
        except discord.PrivilegedIntentsRequired:
            if (
                config.message_content != "auto"
                or not asks_for_content(client)
                or client.is_closed()  # a sharded client closes itself on 4014
            ):
                raise
            go_without_content(client, "refused by Discord (close code 4014)")


def _raise_start_error(task: asyncio.Task[None]) -> None:
    """Turn how the client stopped into one line (or nothing for a clean close)."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is None:
        return
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        raise DiscordStartError(INTENT_REFUSED) from None
    if isinstance(exc, discord.LoginFailure):
        raise DiscordStartError(BAD_TOKEN) from None
    if isinstance(exc, discord.ConnectionClosed):
        if exc.code == 4014:
            raise DiscordStartError(INTENT_REFUSED) from None
        if exc.code == 4004:
            raise DiscordStartError(BAD_TOKEN) from None
        if exc.code == 4011:
            raise DiscordStartError(SHARDING_REQUIRED) from None
        raise DiscordStartError(
            f"Discord closed the gateway connection with code {exc.code}: {_brief(exc)}"
        ) from None
    raise DiscordStartError(f"the Discord client stopped: {_brief(exc)}") from None


def _brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]
