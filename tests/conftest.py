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

from adapters.discord.settings import DiscordSettings  # noqa: E402
from adapters.platforms import register_platforms  # noqa: E402
from adapters.slack.settings import SlackSettings  # noqa: E402
from bot.app import BotApp, build_app  # noqa: E402
from bot.config import Settings  # noqa: E402
from bot.stores.protocols import Cache  # noqa: E402
from testkit.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.support.fixtures import (  # noqa: E402
    mongo_uri,
    mongoeco_uri,
    redis_prefix,
    redis_proxy,
    redis_url,
)

__all__ = ["mongo_uri", "mongoeco_uri", "redis_prefix", "redis_proxy", "redis_url"]

# Tests that count tokens with tiktoken itself (an oracle independent of `bot.tokens`) call
# `tiktoken.get_encoding` at import, before any TokenCounter seeded tiktoken's cache from the
# packaged rank files: seed it first, or a fresh offline machine fails at collection.
from bot.tokens import get_encoding  # noqa: E402

get_encoding("gpt-4o-mini")  # o200k_base
get_encoding("gpt-4")  # cl100k_base

# The core's rules per platform come from the composition root, as `bot` registers them.
register_platforms()

MakeApp = Callable[..., Awaitable[BotApp]]


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def make_app(
    tmp_path: Any, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[MakeApp]:
    """Build a real BotApp through the production factory (`build_app`) on FakeOpenAI: SQLite
    in tmp_path and the in-process cache unless overrides name others (`redis_url=...,
    bot_redis_prefix=...` for Redis under a test's own prefix; `cache=` an already-open one).

    The bot's own environment variables are cleared first, so a developer's MONGODB_URI or
    REDIS_URL never silently changes what a test runs against (overrides name them explicitly).
    """
    for name in [
        *Settings.model_fields,
        *SlackSettings.model_fields,
        *DiscordSettings.model_fields,
    ]:
        monkeypatch.delenv(name.upper(), raising=False)
    apps: list[BotApp] = []

    async def build(
        *, cache: Cache | None = None, episodic: bool = False, **overrides: Any
    ) -> BotApp:
        """`episodic=True` adds long-term episodic memory (lexical only unless
        `bot_embedding_model` names an embedder)."""
        values: dict[str, Any] = {
            "openai_api_key": "sk-test",
            "openai_base_url": fake_openai.base_url,
            "bot_model": "gpt-4o-mini",
            "bot_data_dir": tmp_path / "data",
            "bot_model_retries": 1,
            "bot_model_timeout": 10.0,
            # Tests send far faster than people type; tests of admission turn these back on.
            "bot_rate_user": "off",
            "bot_rate_team": "off",
        }
        if episodic:
            values["bot_embedding_model"] = "none"
        values.update(overrides)
        settings = Settings(_env_file=None, **values)  # type: ignore[call-arg]
        app = await build_app(settings, cache=cache, episodic=episodic)
        apps.append(app)
        return app

    yield build
    for app in apps:
        await app.close()
