"""Shared fixtures: the repo root on sys.path (for `tests.*` helpers) and service fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from collections.abc import AsyncIterator, Awaitable, Callable  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from bot.app import BotApp  # noqa: E402
from bot.config import Settings  # noqa: E402
from bot.model import ModelClient  # noqa: E402
from bot.stores.factory import open_cache, open_store  # noqa: E402
from bot.stores.memory_cache import MemoryCache  # noqa: E402
from bot.stores.redis_cache import RedisCache  # noqa: E402
from bot.stores.resilient_cache import ResilientCache  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.support.fixtures import (  # noqa: E402
    mongo_uri,
    mongoeco_uri,
    redis_prefix,
    redis_proxy,
    redis_url,
)

__all__ = ["mongo_uri", "mongoeco_uri", "redis_prefix", "redis_proxy", "redis_url"]

MakeApp = Callable[..., Awaitable[BotApp]]


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def make_app(
    tmp_path: Any, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[MakeApp]:
    """Build a real BotApp (SQLite in tmp_path, in-process cache unless given) on FakeOpenAI.

    The bot's own environment variables are cleared first, so a developer's MONGODB_URI or
    REDIS_URL never silently changes what a test runs against (overrides name them explicitly).
    """
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    apps: list[BotApp] = []

    async def build(
        *, redis_key_prefix: str | None = None, cache: Any = None, **overrides: Any
    ) -> BotApp:
        values: dict[str, Any] = {
            "openai_api_key": "sk-test",
            "openai_base_url": fake_openai.base_url,
            "bot_model": "gpt-4o-mini",
            "bot_data_dir": tmp_path / "data",
            "bot_model_retries": 1,
            "bot_model_timeout": 10.0,
        }
        values.update(overrides)
        settings = Settings(_env_file=None, **values)  # type: ignore[call-arg]
        store = await open_store(
            mongodb_uri=settings.mongodb_uri,
            mongodb_db=settings.mongodb_db,
            data_dir=settings.bot_data_dir,
        )
        if cache is not None:
            pass
        elif settings.redis_url and redis_key_prefix:
            cache = ResilientCache(
                RedisCache.from_url(settings.redis_url, prefix=redis_key_prefix), MemoryCache()
            )
        else:
            cache = open_cache(redis_url=settings.redis_url)
        model = ModelClient(
            api_key="sk-test",
            base_url=fake_openai.base_url,
            model=settings.bot_model,
            timeout=settings.bot_model_timeout,
            max_retries=settings.bot_model_retries,
        )
        app = BotApp(settings, store=store, cache=cache, model=model)
        apps.append(app)
        return app

    yield build
    for app in apps:
        await app.close()
