"""Turn admission: per-person and per-team rates, and the per-team bound on queued turns.

The oracle is the model server's own record of chat requests: a refused message must not reach
the model, an admitted one must.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from bot.config import ConfigError, load_settings
from bot.metrics import REGISTRY
from bot.ratelimit import (
    DROP,
    TEAM_QUEUE_REPLY,
    TEAM_RATE_REPLY,
    USER_RATE_REPLY,
    Rate,
    TurnLimiter,
)
from bot.stores.memory_cache import MemoryCache
from bot.stores.redis_cache import RedisCache
from testkit.fakes.openai_server import FakeOpenAI, Step, default_brain
from tests.helpers import message, say


def chats(fake: FakeOpenAI) -> int:
    return len([r for r in fake.requests if not r.get("response_format")])


def refused(reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "bot_turns_refused_total", {"platform": "test", "reason": reason}
    )
    return value or 0.0


async def test_a_person_over_their_rate_gets_a_polite_reply_and_others_go_on(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app(bot_rate_user="2/60")
    before = refused("user_rate")
    for i in range(2):
        sink = await say(app, f"question {i}", user="U1", channel=f"C{i}")
        assert sink.final and not sink.error
    third = await say(app, "one more", user="U1", channel="C9")
    assert third.final == USER_RATE_REPLY and third.error
    assert chats(fake_openai) == 2
    other = await say(app, "hello", user="U2", channel="C9")
    assert other.final and not other.error
    assert chats(fake_openai) == 3
    assert refused("user_rate") == before + 1


async def test_a_team_over_its_rate_is_refused_and_other_teams_are_not(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app(bot_rate_team="3/60")
    for user in ("U1", "U2", "U3"):
        assert not (await say(app, "hi", user=user, team="T1")).error
    fourth = await say(app, "hi", user="U4", team="T1")
    assert fourth.final == TEAM_RATE_REPLY and fourth.error
    assert not (await say(app, "hi", user="U4", team="T2")).error
    assert chats(fake_openai) == 4


async def test_the_console_is_never_limited(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app(bot_rate_user="1/60", bot_rate_team="1/60")
    for i in range(3):
        sink = await say(app, f"line {i}", platform="console", team="local")
        assert sink.final and not sink.error
    assert chats(fake_openai) == 3


async def test_queued_turns_of_one_team_are_bounded(make_app: Any, fake_openai: FakeOpenAI) -> None:
    gate = asyncio.Event()
    arrived = asyncio.Event()
    waiting = 0

    async def held(request: dict[str, Any]) -> Step:
        nonlocal waiting
        waiting += 1
        if waiting == 2:
            arrived.set()
        await gate.wait()
        return default_brain(request)

    fake_openai.brain = held
    app = await make_app(bot_team_queue=2)
    running = [
        asyncio.create_task(say(app, "slow one", user=f"U{i}", channel=f"C{i}", team="T1"))
        for i in range(2)
    ]
    await asyncio.wait_for(arrived.wait(), timeout=30)  # both turns are at the model
    third = await say(app, "and me", user="U3", channel="C3", team="T1")
    assert third.final == TEAM_QUEUE_REPLY and third.error
    # The same person again is dropped quietly; someone else is still told once.
    fourth = await say(app, "me again", user="U3", channel="C3", team="T1")
    assert fourth.final is None
    other = await say(app, "and me too", user="U4", channel="C4", team="T1")
    assert other.final == TEAM_QUEUE_REPLY
    gate.set()
    for sink in await asyncio.gather(*running):
        assert sink.final and not sink.error
    # Finished turns leave the queue: the team is admitted again.
    again = await say(app, "and me, now", user="U3", channel="C3", team="T1")
    assert again.final and not again.error
    assert chats(fake_openai) == 3


async def test_windows_roll_over() -> None:
    now = [1_000_000.0]
    limiter = TurnLimiter(
        MemoryCache(),
        per_user=Rate.parse("1/60"),
        per_team=Rate.parse("off"),
        team_queue=0,
        clock=lambda: now[0],
    )
    first = message("hi", user="U1")
    assert await limiter.refusal(first) is None
    assert await limiter.refusal(first) == USER_RATE_REPLY
    now[0] += 60
    assert await limiter.refusal(first) is None


@pytest.mark.redis
async def test_rates_hold_across_replicas_sharing_redis(redis_url: str, redis_prefix: str) -> None:
    limiters = [
        TurnLimiter(
            RedisCache.from_url(redis_url, prefix=redis_prefix),
            per_user=Rate.parse("2/60"),
            per_team=Rate.parse("off"),
            team_queue=0,
        )
        for _ in range(2)
    ]
    try:
        person = message("hi", user=f"U{uuid.uuid4().hex[:6]}")
        assert await limiters[0].refusal(person) is None
        assert await limiters[1].refusal(person) is None
        assert await limiters[0].refusal(person) == USER_RATE_REPLY
        assert await limiters[1].refusal(person) == DROP  # told once, across replicas too
    finally:
        for limiter in limiters:
            await limiter.cache.close()


async def test_an_unreachable_cache_never_refuses_a_turn() -> None:
    dead = RedisCache.from_url("redis://127.0.0.1:1", timeout=0.5)
    limiter = TurnLimiter(
        dead, per_user=Rate.parse("1/60"), per_team=Rate.parse("1/60"), team_queue=0
    )
    try:
        for _ in range(3):
            assert await limiter.refusal(message("hi")) is None
    finally:
        await dead.close()


@pytest.mark.parametrize("value", ["fast", "10", "0/60", "5/0", "-1/60", "1/99999999"])
def test_a_malformed_rate_fails_at_start_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(_env_file=None, bot_rate_user=value)
    assert str(err.value).startswith("BOT_RATE_USER is invalid")
    assert "\n" not in str(err.value)


def test_off_and_a_rate_parse() -> None:
    assert not Rate.parse("off").enabled
    assert Rate.parse(" 30/60 ") == Rate(30, 60)


async def test_a_flood_is_refused_once_per_window_then_dropped_quietly(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    """Posting a refusal per attempt would amplify the flood: only the first attempt past the
    limit is told; the rest end without a word (the sink is abandoned, not finished)."""
    app = await make_app(bot_rate_user="2/60")
    before = refused("user_rate")
    sinks = [await say(app, f"q{i}", user="U1", channel="C1") for i in range(12)]
    answered = [s for s in sinks if s.final and not s.error]
    told = [s for s in sinks if s.final == USER_RATE_REPLY]
    assert len(answered) == 2 and len(told) == 1
    assert all(s.final is None and not s.working_calls for s in sinks[3:])
    assert chats(fake_openai) == 2
    assert refused("user_rate") == before + 10  # every refusal counted, only one posted
    other = await say(app, "hello", user="U2", channel="C1")
    assert other.final and not other.error
