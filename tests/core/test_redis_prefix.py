"""BOT_REDIS_PREFIX: every Redis key the bot writes lives under it (tests use their own)."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aredis

from bot.config import ConfigError, load_settings
from tests.helpers import say


async def test_the_app_writes_redis_keys_under_its_prefix(
    make_app: Any, redis_url: str, redis_prefix: str
) -> None:
    app = await make_app(redis_url=redis_url, bot_redis_prefix=redis_prefix)
    assert await app.first_delivery("Ev-prefix-1")
    assert (await say(app, "hello")).final
    direct = aredis.Redis.from_url(redis_url)
    try:
        assert await direct.exists(redis_prefix + "event:Ev-prefix-1")
        keys = [k.decode() async for k in direct.scan_iter(match=redis_prefix + "*")]
        assert redis_prefix + "hot:test:T1:C1:-" in keys, keys
        assert not await direct.exists("bot:event:Ev-prefix-1")
    finally:
        await direct.aclose()


@pytest.mark.parametrize("bad", ["", " ", "bot *:", "a b:"])
def test_a_bad_prefix_is_one_clear_line(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOT_REDIS_PREFIX", bad)
    with pytest.raises(ConfigError, match=r"^BOT_REDIS_PREFIX is invalid") as info:
        load_settings(_env_file=None)
    assert "\n" not in str(info.value)
