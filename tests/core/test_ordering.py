"""One turn at a time per session, in arrival order; different sessions run concurrently."""

from __future__ import annotations

import asyncio
from typing import Any

from testkit.fakes.openai_server import FakeOpenAI, Step, default_brain, message_text
from tests.helpers import say


class CountingBrain:
    """Tracks how many chat requests are in flight, per session marker and overall."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, request: dict[str, Any]) -> Step:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.05)
            return default_brain(request)
        finally:
            self.in_flight -= 1


async def test_one_session_is_answered_in_order(make_app: Any, fake_openai: FakeOpenAI) -> None:
    brain = CountingBrain()
    fake_openai.brain = brain
    app = await make_app()
    texts = [f"message {i}" for i in range(6)]
    sinks = []
    for text in texts:  # arrival order is creation order; all are in flight at once
        sinks.append(asyncio.create_task(say(app, text, channel="C-order")))
        await asyncio.sleep(0)
    done = await asyncio.gather(*sinks)
    assert [s.final for s in done] == [f"ok: {t}" for t in texts]
    assert brain.max_in_flight == 1
    # Each request saw every earlier message and its answer, in order.
    last = [message_text(m) for m in fake_openai.requests[-1]["messages"] if m["role"] != "system"]
    assert last == [x for t in texts[:-1] for x in (t, f"ok: {t}")] + [texts[-1]]


async def test_different_sessions_run_concurrently(make_app: Any, fake_openai: FakeOpenAI) -> None:
    brain = CountingBrain()
    fake_openai.brain = brain
    app = await make_app()
    done = await asyncio.gather(*(say(app, "hi", channel=f"C{i}") for i in range(6)))
    assert all(s.final == "ok: hi" for s in done)
    assert brain.max_in_flight > 1


async def test_two_processes_take_turns_in_one_session(
    make_app: Any, fake_openai: FakeOpenAI, redis_url: str, redis_prefix: str
) -> None:
    """Two bot processes sharing Redis: the cross-process session lock serialises their turns."""
    brain = CountingBrain()
    fake_openai.brain = brain
    a = await make_app(redis_url=redis_url, bot_redis_prefix=redis_prefix)
    b = await make_app(redis_url=redis_url, bot_redis_prefix=redis_prefix)
    done = await asyncio.gather(
        *(say(app, f"m{i}", channel="C-x") for i, app in enumerate([a, b, a, b]))
    )
    assert all(s.final and not s.error for s in done)
    assert brain.max_in_flight == 1
