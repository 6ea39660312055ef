"""Fixtures for the model client tests: a FakeOpenAI server and ModelClients pointed at it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

# `tests` is not an installed package; make the repo root importable even when
# pytest runs with rootdir-relative sys.path handling (no tests/__init__.py).
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bot.model import ModelClient  # noqa: E402
from testkit.fakes.openai_server import FakeOpenAI  # noqa: E402

API_KEY = "sk-test-SECRET-0123456789abcdef"


@pytest.fixture
def api_key() -> str:
    """The key every `make_client` client uses (tests check it never leaks)."""
    return API_KEY


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


MakeClient = Callable[..., ModelClient]


@pytest.fixture
async def make_client(fake: FakeOpenAI) -> AsyncIterator[MakeClient]:
    """Build ModelClients against `fake` with test-friendly timeouts; closed afterwards."""
    made: list[ModelClient] = []

    def build(**overrides: Any) -> ModelClient:
        options: dict[str, Any] = {
            "api_key": API_KEY,
            "base_url": fake.base_url,
            "model": "fake-model",
            "timeout": 5.0,
            "max_retries": 2,
        }
        options.update(overrides)
        client = ModelClient(**options)
        made.append(client)
        return client

    yield build
    for client in made:
        await client.close()


@pytest.fixture
def collect() -> tuple[list[str], Callable[[str], Awaitable[None]]]:
    """An on_delta callback that keeps the chunks."""
    chunks: list[str] = []

    async def on_delta(text: str) -> None:
        chunks.append(text)

    return chunks, on_delta
