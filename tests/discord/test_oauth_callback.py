"""Discord's HTTP server (the one of /healthz) ends people's tool sign-ins too: `GET
/oauth/callback` answers a small page, and refuses a state it never issued."""

from __future__ import annotations

from typing import Any

import aiohttp

from testkit.fakes.discord_api import FakeDiscord
from tests.discord.conftest import StartDiscord


async def test_callback_is_served_and_refuses_an_unknown_state(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    core = await make_app(
        bot_public_url="https://bot.example.test", bot_secret_key="a passphrase for tests"
    )
    h = await start_discord(core)
    url = f"http://127.0.0.1:{h.runtime.http_port}/oauth/callback"
    async with aiohttp.ClientSession() as http:
        async with http.get(url, params={"state": "never-issued", "code": "c"}) as response:
            assert response.status == 400
            assert response.headers["Cache-Control"] == "no-store"
            page = await response.text()
        async with http.get(url, params={"state": "x" * 5000}) as response:
            assert response.status == 400 and "too large" in await response.text()
    assert "Not connected" in page and "already used or has expired" in page
