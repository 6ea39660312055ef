"""Fixtures: a FakeDiscord (REST + gateway), the real discord.py client on a core between them.

`echo_core` is the small core the Slack tests use; `make_app` (tests/conftest.py) builds the
real BotApp (SQLite, in-process cache, FakeOpenAI).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route

from bot.core import BotCore
from testkit.fakes.discord_api import FakeDiscord
from tests.discord.harness import DiscordHarness

StartDiscord = Callable[..., Awaitable[DiscordHarness]]


@pytest.fixture(autouse=True)
def _restore_endpoints() -> Iterator[None]:
    """The adapter points discord.py at the fake process-wide; put the real ones back."""
    base, gateway = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    yield
    Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = base, yarl.URL(str(gateway))


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    fake = await FakeDiscord().start()
    yield fake
    await fake.close()


@pytest.fixture
async def start_discord(fake_discord: FakeDiscord) -> AsyncIterator[StartDiscord]:
    started: list[DiscordHarness] = []

    async def start(core: BotCore, **overrides: Any) -> DiscordHarness:
        harness = await DiscordHarness.start(fake_discord, core, **overrides)
        started.append(harness)
        return harness

    yield start
    for harness in started:
        await harness.close()


@pytest.fixture
async def discord_real(start_discord: StartDiscord, make_app: Any) -> DiscordHarness:
    return await start_discord(await make_app())
