"""Redis goes down mid-conversation: the bot keeps answering from the durable store, then
goes back to Redis when it returns. The outage is real (a TCP proxy in front of Redis is cut)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from bot.stores.memory_cache import MemoryCache
from bot.stores.redis_cache import RedisCache
from bot.stores.resilient_cache import ResilientCache
from testkit.fakes.openai_server import FakeOpenAI
from tests.helpers import say
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.redis


async def test_bot_answers_through_a_redis_outage(
    make_app: Any, fake_openai: FakeOpenAI, redis_proxy: TcpProxy, redis_prefix: str
) -> None:
    cache = ResilientCache(
        RedisCache.from_url(
            f"redis://127.0.0.1:{redis_proxy.port}/0", prefix=redis_prefix, timeout=0.5
        ),
        MemoryCache(),
        probe_interval=0.2,
    )
    app = await make_app(cache=cache)
    assert (await say(app, "first: my favourite colour is teal")).final
    assert await app.first_delivery("Ev1")

    await redis_proxy.stop()
    during = await say(app, "second: and my dog is called Rex")
    assert during.final and not during.error
    assert await app.first_delivery("Ev2")
    assert not await app.first_delivery("Ev2")  # de-duplicated in the outage too
    assert (await app.health())["cache"] is False

    await redis_proxy.start()
    await asyncio.sleep(0.3)
    after = await say(app, "third: what do you know?")
    assert after.final and not after.error
    assert (await app.health()) == {"store": True, "cache": True}
    assert not await app.first_delivery("Ev1") and not await app.first_delivery("Ev2")
    # Nothing said during the outage was lost: the last request holds all three turns.
    seen = json.dumps(fake_openai.requests[-1]["messages"])
    assert "teal" in seen and "Rex" in seen
