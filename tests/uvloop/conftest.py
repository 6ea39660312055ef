"""Every test in this directory runs on uvloop, the loop `bot slack` and `bot discord` run on
(bot.eventloop): the adapters' servers, clients and thread hand-offs, on libuv's transports, which
do not subclass asyncio's classes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from tests.discord.conftest import (  # noqa: F401 - the fixtures these tests use
    _restore_endpoints,
    discord_real,
    fake_discord,
    start_discord,
)
from tests.slack.conftest import fake_slack, slack_real, start_harness  # noqa: F401

uvloop = pytest.importorskip("uvloop")


def pytest_asyncio_loop_factories(config: Any, item: Any) -> Mapping[str, Callable[[], Any]]:
    return {"uvloop": uvloop.new_event_loop}
