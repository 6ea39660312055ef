"""`build_app` closes what it opened when a later step fails (issue 21: it leaked the model
client when the episodic index could not open, and everything when `memory.start()` failed).

Each test makes one real step fail and checks the real resources opened before it: the SQLite
store's connection thread, the model client's HTTP client, the heard record and the inbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import bot.app
from bot.app import StartupError, build_app
from bot.config import Settings
from bot.memory.episodic.service import EpisodicMemory
from bot.memory.heard import Hearing
from bot.model import ModelClient
from bot.stores.sqlite import SqliteStore
from testkit.fakes.openai_server import FakeOpenAI


class Opened:
    """What build_app opened, recorded by wrapping its own openers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.stores: list[SqliteStore] = []
        self.models: list[ModelClient] = []
        self.heard: list[Hearing] = []
        self.heard_closed = 0
        open_store, opened = bot.app.open_store, self

        async def recording_store(**kw: Any) -> Any:
            store = await open_store(**kw)
            opened.stores.append(store)
            return store

        class RecordingModel(ModelClient):
            def __init__(self, **kw: Any) -> None:
                super().__init__(**kw)
                opened.models.append(self)

        class RecordingHearing(Hearing):
            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, **kw)
                opened.heard.append(self)

            async def close(self) -> None:
                opened.heard_closed += 1
                await super().close()

        monkeypatch.setattr(bot.app, "open_store", recording_store)
        monkeypatch.setattr(bot.app, "ModelClient", RecordingModel)
        monkeypatch.setattr(bot.app, "Hearing", RecordingHearing)

    def assert_all_closed(self) -> None:
        assert self.stores and all(s.worker._closed for s in self.stores)
        assert all(m._client.is_closed() for m in self.models)
        assert self.heard_closed == len(self.heard)


@pytest.fixture
def settings(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    return Settings(  # type: ignore[call-arg]
        _env_file=None,
        openai_api_key="sk-test",
        openai_base_url=fake_openai.base_url,
        bot_model="gpt-4o-mini",
        bot_data_dir=tmp_path / "data",
        bot_embedding_model="none",
    )


async def test_an_episodic_index_that_cannot_open_closes_the_model_and_the_rest(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = Opened(monkeypatch)
    (settings.bot_data_dir / "memory.db").mkdir(parents=True)  # not a file SQLite can open
    with pytest.raises(StartupError, match="cannot open the long-term memory"):
        await build_app(settings, episodic=True)
    assert len(opened.models) == 1 and len(opened.heard) == 1
    opened.assert_all_closed()


async def test_a_memory_start_that_fails_closes_everything(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = Opened(monkeypatch)
    closed: list[EpisodicMemory] = []
    close = EpisodicMemory.close

    async def fail(self: EpisodicMemory) -> None:
        raise OSError("index unreadable")

    async def record_close(self: EpisodicMemory, **kw: Any) -> None:
        closed.append(self)
        await close(self, **kw)

    monkeypatch.setattr(EpisodicMemory, "start", fail)
    monkeypatch.setattr(EpisodicMemory, "close", record_close)
    with pytest.raises(StartupError, match="index unreadable"):
        await build_app(settings, episodic=True)
    assert len(closed) == 1
    opened.assert_all_closed()


async def test_a_memory_index_that_cannot_open_closes_everything_without_episodic(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = Opened(monkeypatch)
    (settings.bot_data_dir / "memory.db").mkdir(parents=True)
    with pytest.raises(StartupError, match="cannot open the memory index"):
        await build_app(settings, episodic=False)
    opened.assert_all_closed()


@pytest.mark.parametrize("step", ["open_inbox", "open_heard_store", "open_durable_kv"])
async def test_each_earlier_step_that_fails_closes_what_came_before(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    opened = Opened(monkeypatch)
    inboxes: list[Any] = []
    open_inbox = bot.app.open_inbox

    async def recording_inbox(**kw: Any) -> Any:
        inbox = await open_inbox(**kw)
        inboxes.append(inbox)
        return inbox

    async def fail(*a: Any, **kw: Any) -> Any:
        raise OSError(f"{step} refused")

    monkeypatch.setattr(bot.app, "open_inbox", recording_inbox)
    monkeypatch.setattr(bot.app, step, fail)
    with pytest.raises(StartupError, match=f"{step} refused"):
        await build_app(settings, episodic=True)
    opened.assert_all_closed()
    assert opened.models == []  # never made: nothing after the failed step ran
    for inbox in inboxes:  # the SQLite inbox's own connection thread
        assert inbox.worker._closed


async def test_a_bad_cache_setting_closes_the_store(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = Opened(monkeypatch)
    bad = settings.model_copy(update={"redis_url": "notredis://x"})
    with pytest.raises(StartupError, match="cannot open the cache"):
        await build_app(bad, episodic=True)
    opened.assert_all_closed()


async def test_a_good_start_still_builds_a_working_app(settings: Settings) -> None:
    app = await build_app(settings, episodic=True)
    try:
        assert (await app.health())["store"]
    finally:
        await app.close()
