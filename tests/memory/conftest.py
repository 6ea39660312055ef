"""Fixtures for the long-term memory tests: a real SQLite store and a model client on the fake
OpenAI server (whose memory brain answers reconciliation and extraction requests)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.model import ModelClient
from bot.stores.sqlite import SqliteStore
from testkit.fakes.openai_server import FakeOpenAI


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = await SqliteStore.open(tmp_path / "bot.db")
    yield store
    await store.close()


@pytest.fixture
async def model(fake_openai: FakeOpenAI) -> AsyncIterator[ModelClient]:
    client = ModelClient(
        api_key="sk-test", base_url=fake_openai.base_url, model="gpt-4o-mini", max_retries=0
    )
    yield client
    await client.close()
