"""MongoDB goes away mid-conversation (a real outage: the TCP proxy in front of it is cut).

The person gets a clear answer, nothing crashes, /healthz reports it, and when the server is back
the conversation continues with everything stored before the outage.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest

from bot.turn import STORE_DOWN_REPLY
from testkit.fakes.openai_server import FakeOpenAI
from tests.helpers import say
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.mongo


async def test_mongo_outage_mid_conversation(
    make_app: Any, fake_openai: FakeOpenAI, mongoeco_uri: str
) -> None:
    target = urlsplit(mongoeco_uri)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 27017)
    await proxy.start()
    try:
        app = await make_app(
            mongodb_uri=f"mongodb://127.0.0.1:{proxy.port}/?directConnection=true&serverSelectionTimeoutMS=500",
            mongodb_db=f"outage{uuid.uuid4().hex[:8]}",
        )
        assert (await say(app, "before: the project is called Nightjar")).final == (
            "ok: before: the project is called Nightjar"
        )

        await proxy.stop()
        during = await say(app, "during: are you there?")
        assert during.error and during.final == STORE_DOWN_REPLY
        assert (await app.health())["store"] is False

        await proxy.start()
        for _ in range(50):  # the driver rediscovers the server within a few heartbeats
            if (await app.health())["store"]:
                break
            await asyncio.sleep(0.2)
        after = await say(app, "after: what is the project called?")
        assert after.final and not after.error
        seen = json.dumps(fake_openai.requests[-1]["messages"])
        assert "Nightjar" in seen
    finally:
        await proxy.stop()
