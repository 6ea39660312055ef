"""Shards split across `bot discord` processes (DISCORD_SHARDS=first-last of DISCORD_SHARD_COUNT).

The oracle for routing is Discord's documented rule, computed here: a guild's events go to shard
`(guild_id >> 22) % num_shards`; the fake records what each gateway session was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.discord.config import DiscordConfig, DiscordConfigError
from adapters.discord.settings import load_discord_settings
from adapters.discord.shards import IDENTIFY_WINDOW, IdentifyPacer, ShardPlan
from bot.config import ConfigError, Settings
from testkit.fakes.discord_api import FakeDiscord
from testkit.fakes.openai_server import FakeOpenAI
from tests.discord.conftest import StartDiscord
from tests.discord.test_startup import _bot_discord
from tests.slack.echo_core import EchoCore

_OWN = ("OPENAI_", "BOT_", "MONGODB", "REDIS", "SLACK_", "DISCORD_")


def _config(**env: str) -> DiscordConfig:
    own = load_discord_settings(_env_file=None, discord_token="t", **env)
    return DiscordConfig.from_settings(Settings(_env_file=None), own)  # type: ignore[call-arg]


def test_a_range_runs_those_shards_of_the_count() -> None:
    config = _config(discord_shards="2-3", discord_shard_count="4")
    assert config.shard_ids == (2, 3) and config.shard_count == 4
    assert not config.shards.syncs_commands
    assert _config(discord_shards=" 0 ", discord_shard_count="2").shards.syncs_commands
    assert _config(discord_shard_count="2").shard_ids is None  # every shard here


@pytest.mark.parametrize(
    ("env", "error", "says"),
    [
        ({"discord_shards": "a-b"}, ConfigError, "DISCORD_SHARDS is invalid"),
        ({"discord_shards": "-1-2"}, ConfigError, "DISCORD_SHARDS is invalid"),
        ({"discord_shards": "3-1", "discord_shard_count": "4"}, ConfigError, "first ≤ last"),
        ({"discord_shards": "٣"}, ConfigError, "DISCORD_SHARDS is invalid"),
        ({"discord_shards": "1" * 100}, ConfigError, "DISCORD_SHARDS is invalid"),
        ({"discord_shards": "0-1"}, DiscordConfigError, "needs DISCORD_SHARD_COUNT"),
        (
            {"discord_shards": "2-4", "discord_shard_count": "4"},
            DiscordConfigError,
            "goes past DISCORD_SHARD_COUNT=4",
        ),
    ],
)
def test_bad_shard_settings_are_one_line_naming_the_variable(
    env: dict[str, str], error: type[Exception], says: str
) -> None:
    with pytest.raises(error) as caught:
        _config(**env)
    assert says in str(caught.value) and "\n" not in str(caught.value)


async def test_a_bad_range_stops_bot_discord_with_one_line(tmp_path: Path) -> None:
    fake = await FakeDiscord().start()
    try:
        code, err = await _bot_discord(
            fake, tmp_path, DISCORD_SHARDS="0-3", DISCORD_SHARD_COUNT="2"
        )
    finally:
        await fake.close()
    assert code == 2 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.strip()]
    assert "DISCORD_SHARDS=0-3" in line and "DISCORD_SHARD_COUNT=2" in line
    assert not fake.identifies


async def test_past_the_guilds_one_shard_may_hold_discord_closes_4011_and_one_line_says_what_to_set(
    tmp_path: Path,
) -> None:
    fake = await FakeDiscord(max_guilds_per_shard=2).start()
    for i in range(3):
        fake.add_guild(f"G{i}")
    try:
        code, err = await _bot_discord(fake, tmp_path)
    finally:
        await fake.close()
    assert code == 2 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.strip()]
    assert "4011" in line and "DISCORD_SHARD_COUNT" in line and "DISCORD_SHARDS" in line
    assert len(fake.identifies) == 1 and not fake.sessions  # closed at identify


async def test_identifies_wait_for_their_bucket_only() -> None:
    """max_concurrency 2: shards 0 and 1 (buckets 0, 1) go at once, shard 2 (bucket 0 again)
    waits out the window counted from shard 0's identify."""
    window = 0.3
    pacer = IdentifyPacer(2, window=window)
    started = time.monotonic()
    await pacer.wait(0)
    await pacer.wait(1)
    both = time.monotonic() - started
    await pacer.wait(2)
    third = time.monotonic() - started
    assert third >= window
    assert both < window <= third  # the second bucket did not wait for the first
    assert ShardPlan(count=4, ids=(1, 2)).syncs_commands is False


async def test_shards_in_other_buckets_identify_without_waiting(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    """max_concurrency 2, four shards: 1 goes right after 0 (discord.py alone sleeps 5 s
    before every identify after the first), 2 and 3 wait out the 5 s of their bucket."""
    h = await start_discord(EchoCore(), shard_count=4, max_concurrency=2)
    await fake_discord.wait_for(lambda: len(fake_discord.identify_times) == 4, timeout=30)
    at = {tuple(shard or ()): t for shard, t in fake_discord.identify_times}
    assert at[(1, 4)] - at[(0, 4)] < IDENTIFY_WINDOW
    assert at[(2, 4)] - at[(0, 4)] >= IDENTIFY_WINDOW - 0.01
    assert at[(3, 4)] - at[(1, 4)] >= IDENTIFY_WINDOW - 0.01
    assert h.runtime.ready.is_set()


# -- two processes, one gateway ------------------------------------------------------------------


class BotProcess:
    """A `bot discord` running a shard range until stopped (stderr kept for the failure)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(
        cls, fake: FakeDiscord, model: FakeOpenAI, data: Path, shards: str, count: int
    ) -> BotProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN)}
        env.update(
            {
                "BOT_DATA_DIR": str(data),
                "OPENAI_API_KEY": "sk-test",
                "OPENAI_BASE_URL": model.base_url,
                "DISCORD_TOKEN": fake.token,
                "DISCORD_API_URL": fake.api_url,
                "DISCORD_GATEWAY_URL": fake.gateway_url,
                "DISCORD_SHARDS": shards,
                "DISCORD_SHARD_COUNT": str(count),
                "BOT_HTTP_HOST": "127.0.0.1",
                "BOT_HTTP_PORT": "0",
                "BOT_LOG_LEVEL": "ERROR",
            }
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "discord",
            cwd=data.parent,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def stop(self) -> str:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = await asyncio.wait_for(self.proc.communicate(), timeout=60)
        except TimeoutError:
            self.proc.kill()
            _, err = await self.proc.communicate()
        return err.decode(errors="replace")


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAI]:
    fake = await FakeOpenAI().start()
    yield fake
    await fake.close()


def _shard_of(guild_id: str, count: int) -> int:
    return (int(guild_id) >> 22) % count


async def test_two_shard_range_processes_each_receive_and_answer_their_guilds_only(
    tmp_path: Path, model: FakeOpenAI
) -> None:
    fake = await FakeDiscord().start()
    ada = fake.add_user("Ada")
    guilds = [fake.add_guild(f"G{i}") for i in range(4)]
    channel = {
        g: next(c for c, v in fake.channels.items() if v.get("guild_id") == g) for g in guilds
    }
    on = {s: [g for g in guilds if _shard_of(g, 2) == s] for s in (0, 1)}
    assert on[0] and on[1], "the guilds must spread over both shards"
    bots: list[BotProcess] = []
    try:
        # The process without shard 0 first: it connects and must leave the commands alone.
        bots.append(await BotProcess.start(fake, model, tmp_path / "b", "1-1", 2))
        await fake.wait_for(lambda: fake.connected == 1, timeout=60)
        for g in guilds:
            await fake.user_says(
                channel[g], ada, f"<@{fake.app_id}> hi from {g}", mentions=[fake.app_id]
            )
        await fake.wait_for(lambda: all(fake.bot_messages(channel[g]) for g in on[1]), timeout=30)
        assert fake.command_puts == []
        # Nobody holds shard 0 yet: Discord sends its guilds' events to no one.
        [only] = fake.sessions.values()
        assert only.shard == [1, 2]
        # Then the process holding shard 0: it syncs the commands, once.
        bots.append(await BotProcess.start(fake, model, tmp_path / "a", "0-0", 2))
        await fake.wait_for(lambda: fake.connected == 2 and fake.command_puts != [], timeout=60)
        for g in on[0]:
            await fake.user_says(
                channel[g], ada, f"<@{fake.app_id}> again {g}", mentions=[fake.app_id]
            )
        await fake.wait_for(lambda: all(fake.bot_messages(channel[g]) for g in on[0]), timeout=30)
    finally:
        errors = [await b.stop() for b in bots]
        await fake.close()
    assert all("Traceback" not in e for e in errors), errors
    assert sorted(tuple(i["shard"]) for i in fake.identifies) == [(0, 2), (1, 2)]
    assert fake.command_puts == [None]  # one global sync, by the shard-0 process
    for session in fake.sessions.values():
        assert session.shard is not None
        got = {
            f["d"]["guild_id"]
            for f in session.sent
            if isinstance(f.get("d"), dict) and "guild_id" in f["d"]
        }
        assert got and all(_shard_of(g, 2) == session.shard[0] for g in got)
    # Each shard-1 guild got one answer; a shard-0 guild only the one asked after its process
    # came (the first mention there went to no session, as on Discord).
    assert all(len(fake.bot_messages(channel[g])) == 1 for g in guilds)


# -- the fake keeps Discord's documented rules -------------------------------------------------


async def _identify(fake: FakeDiscord, shard: object) -> int | None:
    """Identify with `shard` over a raw websocket; the close code, or None when READY came."""
    import aiohttp

    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(f"{fake.gateway_url}?v=10&encoding=json") as ws:
            hello = await ws.receive_json(timeout=10)
            assert hello["op"] == 10
            identify = {"token": fake.token, "intents": 1, "shard": shard, "properties": {}}
            await ws.send_json({"op": 2, "d": identify})
            reply = await ws.receive(timeout=10)
            if reply.type == aiohttp.WSMsgType.TEXT:
                assert reply.json()["t"] == "READY"
                return None
            return ws.close_code


async def test_the_fake_refuses_an_invalid_shard_and_reports_its_concurrency() -> None:
    import aiohttp

    fake = await FakeDiscord(shards=4, max_concurrency=16).start()
    try:
        assert await _identify(fake, [2, 2]) == 4010  # shard_id must be below num_shards
        assert await _identify(fake, [0, 0]) == 4010
        assert await _identify(fake, "0,2") == 4010
        assert await _identify(fake, [1, 2]) is None
        async with aiohttp.ClientSession() as http:
            headers = {"Authorization": f"Bot {fake.token}"}
            async with http.get(f"{fake.api_url}/gateway/bot", headers=headers) as resp:
                body = await resp.json()
    finally:
        await fake.close()
    assert body["shards"] == 4
    assert body["session_start_limit"]["max_concurrency"] == 16
    assert body["session_start_limit"]["remaining"] == 999  # one session was started
