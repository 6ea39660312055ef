"""The start-up lifecycle every long-running adapter (`bot slack`, `bot discord`) shares.

`running_core(settings)` opens the core (stores, cache, model client), starts its background
jobs (`BotApp.start`: the place for the nightly consolidation and any other scheduled work) and
always closes it, so each platform's `main` only has to serve its own surface in between.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from adapters.platforms import register_platforms
from bot.app import BotApp, StartupError, build_app
from bot.config import ConfigError, Settings


@asynccontextmanager
async def running_core(settings: Settings) -> AsyncIterator[BotApp]:
    """The started core; ConfigError (one line) when a store or cache cannot be opened.

    Every platform's traits are registered first: the background jobs (consolidation,
    retention) read what every platform wrote to a shared store, not only this one's."""
    register_platforms()
    try:
        core = await build_app(settings)
    except StartupError as exc:
        raise ConfigError(str(exc)) from None
    try:
        await core.start()
        yield core
    finally:
        await core.close()
