"""Fixtures: a FakeSlack Web API, a core (the echo core, or the real BotApp), the adapter between.

`slack` uses the small echo core; `slack_real` runs the real core (SQLite, in-process cache,
FakeOpenAI) behind the same harness, so the end-to-end flows run against both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from bot.core import BotCore
from testkit.fakes.slack_api import FakeSlack
from testkit.slack_harness import SlackHarness
from tests.slack.echo_core import EchoCore

StartHarness = Callable[..., Awaitable[SlackHarness]]


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    fake = await FakeSlack().start()
    yield fake
    await fake.close()


@pytest.fixture
def echo_core() -> EchoCore:
    return EchoCore()


@pytest.fixture
async def start_harness(fake_slack: FakeSlack) -> AsyncIterator[StartHarness]:
    """Start (several) adapter apps against the same FakeSlack; all are closed afterwards."""
    started: list[SlackHarness] = []

    async def start(core: BotCore, **kwargs: Any) -> SlackHarness:
        harness = await SlackHarness.start(fake_slack, core, **kwargs)
        started.append(harness)
        return harness

    yield start
    for harness in started:
        await harness.close()


@pytest.fixture
async def slack(start_harness: StartHarness, echo_core: EchoCore) -> SlackHarness:
    return await start_harness(echo_core)


@pytest.fixture
async def slack_real(start_harness: StartHarness, make_app: Any) -> SlackHarness:
    core = await make_app()
    return await start_harness(core)
