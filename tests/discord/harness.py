"""The real Discord adapter (discord.py client, `run_discord`) against a FakeDiscord."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from adapters.discord.config import DiscordConfig
from adapters.discord.main import run_discord
from adapters.discord.runtime import DiscordRuntime
from bot.core import BotCore
from testkit.fakes.discord_api import FakeDiscord


@dataclass
class DiscordHarness:
    fake: FakeDiscord
    core: BotCore
    runtime: DiscordRuntime
    config: DiscordConfig
    stop: asyncio.Event
    task: asyncio.Task[None]

    @classmethod
    async def start(
        cls,
        fake: FakeDiscord,
        core: BotCore,
        *,
        shard_count: int | None = None,
        max_concurrency: int = 1,
        **overrides: Any,
    ) -> DiscordHarness:
        config = replace(
            DiscordConfig(
                token=fake.token,
                api_url=fake.api_url,
                gateway_url=fake.gateway_url,
                http_host="127.0.0.1",
                http_port=0,
            ),
            **overrides,
        )
        runtime = DiscordRuntime(
            core, config, shard_count=shard_count, max_concurrency=max_concurrency
        )
        stop = asyncio.Event()
        task = asyncio.create_task(run_discord(core, config, stop=stop, runtime=runtime))
        ready = asyncio.create_task(runtime.ready.wait())
        await asyncio.wait({task, ready}, timeout=15, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            ready.cancel()
            await task  # raises what stopped it
        assert runtime.ready.is_set(), "the client never became ready"
        return cls(fake, core, runtime, config, stop, task)

    @property
    def bot_id(self) -> str:
        return self.fake.app_id

    def mention(self) -> str:
        return f"<@{self.fake.app_id}>"

    async def idle(self) -> None:
        """Wait until every message, delete and edit accepted here has been handled (its inbox
        entry ran) and tracked tasks are done."""
        handlers = self.runtime.handlers

        def idle() -> bool:
            return (
                len(self.runtime.tasks) == 0
                and not handlers.accepted
                and not handlers.handling
                and not handlers.pending_changes
            )

        await self.fake.wait_for(idle, timeout=15)

    async def close(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, timeout=30)
