"""Secrets sealed at rest end to end: `/tools install` with BOT_SECRET_KEY, and Slack
installation documents through `SealedInstallations`, both on a real SQLite file."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from slack_sdk.oauth.installation_store.models.installation import Installation

from adapters.slack.installations import SealedInstallations, installation_docs
from adapters.slack.oauth import StorageInstallationStore
from bot.core import CommandRequest
from bot.keys import TeamKey
from bot.secrets import PREFIX, SecretBox, SecretsUnavailable
from bot.stores.factory import open_store
from bot.stores.protocols import Store
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.helpers import say
from tools.orders_demo import create_app

KEY = "a passphrase that is long enough"
TOKEN = "s3cr3t"
ORDER = {"order_id": "#W1", "user_id": "u1", "status": "delivered", "items": []}


def cmd(text_: str, *, team: str = "T1", admin: bool = True) -> CommandRequest:
    return CommandRequest("test", team, "C1", "U1", "tools", text_, is_platform_admin=admin)


@asynccontextmanager
async def orders_service(token: str) -> AsyncIterator[tuple[str, list[str]]]:
    """The reference order service on 127.0.0.1 (a free port); yields its URL and the
    Authorization headers it received."""
    seen: list[str] = []

    @web.middleware
    async def record(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization", ""))
        return await handler(request)

    app = create_app({"#W1": ORDER}, token)
    app.middlewares.append(record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()


def store_bytes(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(data_dir.iterdir()) if p.is_file())


def offered(fake: FakeOpenAI, n: int = -1) -> str:
    return json.dumps(fake.requests[n].get("tools", []))


async def test_install_with_key_seals_the_token_and_the_tool_still_works(
    make_app: Any, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    app = await make_app(bot_secret_key=KEY)
    async with orders_service(TOKEN) as (url, seen):
        done = await app.handle_command(cmd(f"install orders url={url} token={TOKEN}"))
        assert done.ok and TOKEN not in done.text and "********" in done.text
        [install] = await app.store.installed(TeamKey("test", "T1"))
        assert install.config["url"] == url and install.config["token"].startswith(PREFIX)

        listed = await app.handle_command(cmd("list"))
        assert "orders" in listed.text and TOKEN not in listed.text and PREFIX not in listed.text

        fake_openai.push(
            tool_calls([("get_order_status", {"order_id": "#W1"})]), text("It was delivered.")
        )
        sink = await say(app, "where is my order #W1?")
        assert sink.final is not None and "delivered" in sink.final
        assert "get_order_status" in offered(fake_openai, 0)
        assert seen == [f"Bearer {TOKEN}"]
        tool_results = [m for m in fake_openai.requests[1]["messages"] if m["role"] == "tool"]
        assert len(tool_results) == 1 and "delivered" in tool_results[0]["content"]

    await app.store.compact()
    data_dir = app.settings.bot_data_dir
    assert (data_dir / "bot.db").exists()
    assert TOKEN.encode() not in store_bytes(data_dir)
    assert TOKEN not in caplog.text


async def test_without_key_the_token_is_stored_as_before(make_app: Any) -> None:
    app = await make_app()
    done = await app.handle_command(cmd(f"install orders url=http://127.0.0.1:9 token={TOKEN}"))
    assert done.ok and TOKEN not in done.text
    [install] = await app.store.installed(TeamKey("test", "T1"))
    assert install.config["token"] == TOKEN


async def test_plain_installs_keep_working_and_unopenable_ones_are_skipped(
    make_app: Any, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    app = await make_app(bot_secret_key=KEY)
    url = "http://127.0.0.1:9"
    # Stored before BOT_SECRET_KEY was set: plain, still used.
    await app.store.install(TeamKey("test", "T1"), "orders", {"url": url, "token": "old"}, by="U")
    await say(app, "hello", team="T1")
    assert "get_order_status" in offered(fake_openai)

    # Sealed with another key: the pack is left out, the turn still answers, nothing leaks.
    foreign = SecretBox("some other passphrase entirely").seal(TOKEN)
    await app.store.install(TeamKey("test", "T2"), "orders", {"url": url, "token": foreign}, by="U")
    caplog.set_level(logging.WARNING, logger="bot.toolbox")
    sink = await say(app, "hello", team="T2")
    assert sink.final and not sink.error
    assert "get_order_status" not in offered(fake_openai)
    assert "remember" in offered(fake_openai)
    warnings = [r for r in caplog.records if r.getMessage() == "pack_secret_unavailable"]
    assert len(warnings) == 1
    assert "BOT_SECRET_KEY" in str(warnings[0].__dict__.get("fields"))
    assert TOKEN not in caplog.text and foreign not in caplog.text


async def test_sealed_token_without_a_key_skips_the_pack(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()  # BOT_SECRET_KEY unset, but the stored token is sealed
    sealed = SecretBox(KEY).seal(TOKEN)
    await app.store.install(
        TeamKey("test", "T1"), "orders", {"url": "http://127.0.0.1:9", "token": sealed}, by="U"
    )
    sink = await say(app, "hello")
    assert sink.final and not sink.error
    assert "get_order_status" not in offered(fake_openai)


# -- Slack installation documents -------------------------------------------------------------


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    store = await open_store(mongodb_uri=None, mongodb_db="bot", data_dir=tmp_path / "data")
    yield store
    await store.close()


async def test_slack_documents_are_sealed_on_disk(sqlite_store: Store, tmp_path: Path) -> None:
    sealed = SealedInstallations(installation_docs(sqlite_store), SecretBox(KEY))
    doc = {"bot_token": "xoxb-secret-123", "bot_id": "B1", "installed_at": 1.5, "scopes": ["a"]}
    await sealed.put_doc("-", "T1", "bot", doc)
    raw = await installation_docs(sqlite_store).get_doc("-", "T1", "bot")
    assert raw is not None and set(raw) == {"sealed"} and raw["sealed"].startswith(PREFIX)
    assert await sealed.get_doc("-", "T1", "bot") == doc
    await sqlite_store.compact()
    assert b"xoxb-secret-123" not in store_bytes(tmp_path / "data")

    # Documents stored before the key was set pass through.
    await installation_docs(sqlite_store).put_doc("-", "T2", "bot", {"bot_token": "xoxb-old"})
    assert await sealed.get_doc("-", "T2", "bot") == {"bot_token": "xoxb-old"}
    assert await sealed.get_doc("-", "T3", "bot") is None

    # Another key cannot open them, and says so without the token.
    wrong = SealedInstallations(
        installation_docs(sqlite_store), SecretBox("some other passphrase entirely")
    )
    with pytest.raises(SecretsUnavailable, match="BOT_SECRET_KEY") as info:
        await wrong.get_doc("-", "T1", "bot")
    assert "xoxb" not in str(info.value)

    # Deletes and OAuth states go straight to the store.
    await sealed.put_oauth_state("state-1", 4_000_000_000.0)
    assert await sealed.consume_oauth_state("state-1") is True
    assert await sealed.consume_oauth_state("state-1") is False
    assert await sealed.delete_docs("-", "T1") == 1
    assert await sealed.get_doc("-", "T1", "bot") is None


async def test_slack_installation_store_over_sealed_documents(
    sqlite_store: Store, tmp_path: Path
) -> None:
    installs = StorageInstallationStore(
        SealedInstallations(installation_docs(sqlite_store), SecretBox(KEY))
    )
    await installs.async_save(
        Installation(
            team_id="T1",
            user_id="U1",
            bot_token="xoxb-secret-123",
            bot_id="B1",
            bot_user_id="UB",
            bot_scopes="chat:write",
            user_token="xoxp-user-456",
        )
    )
    fresh = StorageInstallationStore(
        SealedInstallations(installation_docs(sqlite_store), SecretBox(KEY))
    )
    bot = await fresh.async_find_bot(enterprise_id=None, team_id="T1")
    assert bot is not None and bot.bot_token == "xoxb-secret-123"
    found = await fresh.async_find_installation(enterprise_id=None, team_id="T1", user_id="U1")
    assert found is not None and found.user_token == "xoxp-user-456"
    await sqlite_store.compact()
    raw = store_bytes(tmp_path / "data")
    assert b"xoxb-secret-123" not in raw and b"xoxp-user-456" not in raw
