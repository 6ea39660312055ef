"""`bot discord` start-up as an operator sees it: refused intent, bad token, sharding."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from adapters.discord.config import DiscordConfig
from adapters.discord.main import preflight
from testkit.fakes.discord_api import FakeDiscord
from tests.discord.conftest import StartDiscord

ROOT = Path(__file__).resolve().parents[2]


async def _bot_discord(fake: FakeDiscord, tmp_path: Path, **env_extra: str) -> tuple[int, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "BOT_", "MONGODB", "REDIS", "SLACK_", "DISCORD_"))
    }
    env.update(
        {
            "BOT_DATA_DIR": str(tmp_path / "data"),
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            "DISCORD_TOKEN": fake.token,
            "DISCORD_API_URL": fake.api_url,
            "DISCORD_GATEWAY_URL": fake.gateway_url,
            "BOT_HTTP_HOST": "127.0.0.1",
            "BOT_HTTP_PORT": "0",
            "BOT_LOG_LEVEL": "ERROR",
            **env_extra,
        }
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "discord",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode or 0, err.decode()


async def test_a_refused_message_content_intent_is_one_line_naming_the_portal_setting(
    tmp_path: Path,
) -> None:
    """With DISCORD_MESSAGE_CONTENT=on (auto runs on without it: test_message_content.py)."""
    fake = await FakeDiscord(allow_message_content=False).start()
    fake.content_flag = True  # the flags say yes, the gateway says no
    try:
        code, err = await _bot_discord(fake, tmp_path, DISCORD_MESSAGE_CONTENT="on")
    finally:
        await fake.close()
    assert code == 2
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "4014" in lines[0]
    assert "Developer Portal" in lines[0] and "Privileged Gateway Intents" in lines[0]
    assert "Message Content" in lines[0]
    assert fake.identifies, "the refusal came from the gateway, not before it"


async def test_a_bad_token_is_one_line(tmp_path: Path) -> None:
    fake = await FakeDiscord().start()
    try:
        code, err = await _bot_discord(fake, tmp_path, DISCORD_TOKEN="not-the-token")
    finally:
        await fake.close()
    assert code == 2 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.strip()]
    assert "DISCORD_TOKEN" in line and "Reset Token" in line
    assert not fake.identifies  # refused at the REST login, before any gateway connection


async def test_sharded_when_discord_recommends_more_than_one_shard(
    start_discord: StartDiscord, make_app: Any
) -> None:
    fake = await FakeDiscord(shards=2).start()
    try:
        config = DiscordConfig(token=fake.token, api_url=fake.api_url, gateway_url=fake.gateway_url)
        assert (await preflight(config)).shard_count == 2
        single = await FakeDiscord().start()
        try:
            solo = DiscordConfig(
                token=single.token, api_url=single.api_url, gateway_url=single.gateway_url
            )
            assert (await preflight(solo)).shard_count is None
        finally:
            await single.close()
    finally:
        await fake.close()


async def test_an_auto_sharded_client_answers_on_every_shard(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    guilds = [fake_discord.add_guild(f"G{i}") for i in range(4)]
    dm = fake_discord.dm_channel(ada)
    h = await start_discord(await make_app(), shard_count=2)
    assert sorted(tuple(i["shard"]) for i in fake_discord.identifies) == [(0, 2), (1, 2)]
    channels = [
        next(c for c, v in fake_discord.channels.items() if v.get("guild_id") == g) for g in guilds
    ]
    for channel in channels:
        await fake_discord.user_says(
            channel, ada, f"{h.mention()} hi", mentions=[fake_discord.app_id]
        )
    await fake_discord.user_says(dm, ada, "hi in a DM")
    await fake_discord.wait_for(
        lambda: all(fake_discord.bot_messages(c) for c in [*channels, dm]), timeout=15
    )
    await h.idle()
    assert all(len(fake_discord.bot_messages(c)) == 1 for c in [*channels, dm])


async def test_healthz_reports_the_stores_and_the_gateway(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    import aiohttp

    h = await start_discord(await make_app())
    url = f"http://127.0.0.1:{h.runtime.http_port}"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/healthz") as response:
            assert response.status == 200
            body = await response.json()
        async with http.get(f"{url}/metrics") as response:
            assert response.status == 200 and "bot_" in await response.text()
    assert body["components"] == {"store": True, "cache": True, "inbox": True, "discord": True}


async def test_sharding_required_is_one_line_saying_what_to_set(tmp_path: Path) -> None:
    fake = await FakeDiscord().start()
    fake.close_on_identify = 4011
    try:
        code, err = await _bot_discord(fake, tmp_path)
    finally:
        await fake.close()
    assert code == 2 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.strip()]
    assert "4011" in line and "DISCORD_SHARD_COUNT" in line
