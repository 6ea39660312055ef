"""The discord.py client wired to the core: intents, events, app commands, clean shutdown.

Intents: Guilds, Guild Messages, Direct Messages and Message Content (privileged: enable it in
the Developer Portal). The client keeps no message cache (the bot never needs old messages)
and never chunks members. Rate limits are discord.py's job (per-route buckets, 429 retries);
messages carry nonces, so a retried create cannot post twice (see sink.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import discord
from discord import app_commands

from adapters.common.logs import emit
from adapters.common.tasks import TaskTracker
from adapters.discord.approvals import DiscordApprovals
from adapters.discord.commands import DiscordCommands
from adapters.discord.commandsync import CommandSync
from adapters.discord.config import DiscordConfig
from adapters.discord.feedback import DiscordFeedback
from adapters.discord.gateway_guard import guard_gateway, log_event_error
from adapters.discord.handlers import DiscordHandlers
from adapters.discord.intents import (
    asks_for_content,
    bot_intents,
    content_granted,
    go_without_content,
)
from adapters.discord.interactions import GuardedTree
from adapters.discord.notices import DiscordAdminNotice
from adapters.discord.shards import IdentifyPacer, ShardPlan
from adapters.discord.traits import DISCORD, INBOX_KIND
from bot.core import BotCore, NotifiesAdmins
from bot.eventloop import running_loop_name
from bot.platforms import register

_LOG = logging.getLogger(__name__)


def _quiet_voice_warnings() -> None:
    """A text bot needs no voice: skip discord.py's start-up warnings about voice libraries."""
    discord.VoiceClient.warn_nacl = False
    discord.VoiceClient.warn_dave = False


class DiscordRuntime:
    """One client (sharded or not), its command tree and the adapter's helpers."""

    def __init__(
        self,
        core: BotCore,
        config: DiscordConfig,
        *,
        shard_count: int | None = None,
        max_concurrency: int = 1,
    ) -> None:
        register(DISCORD)  # the core's rules for Discord's keys (bot.platforms)
        self.core = core
        self.config = config
        self.tasks = TaskTracker("discord")
        _quiet_voice_warnings()
        options: dict[str, Any] = {
            "intents": bot_intents(config.message_content),
            "allowed_mentions": discord.AllowedMentions.none(),
            "max_messages": None,
            "chunk_guilds_at_startup": False,
            "max_ratelimit_timeout": config.max_ratelimit_timeout,
        }
        self.client: discord.Client
        shard_count = config.shard_count if shard_count is None else shard_count
        self.shards = ShardPlan(count=shard_count, ids=config.shard_ids)
        if shard_count is not None:
            if config.shard_ids is not None:
                options["shard_ids"] = list(config.shard_ids)
            self.client = discord.AutoShardedClient(shard_count=shard_count, **options)
            pacer = IdentifyPacer(max_concurrency)

            async def before_identify(shard_id: int | None, *, initial: bool = False) -> None:
                await pacer.wait(shard_id)

            self.client.before_identify_hook = before_identify  # type: ignore[method-assign]
        else:
            self.client = discord.Client(**options)
        guard_gateway(self.client)
        self.tree: app_commands.CommandTree[discord.Client] = GuardedTree(self.client, core)
        self.handlers = DiscordHandlers(core, config, self.tasks, self.client)
        if isinstance(core, NotifiesAdmins):
            core.set_admin_notice(DiscordAdminNotice(self.client))
        self.commands = DiscordCommands(core, config)
        self.commands.register(self.tree)
        self.command_sync = CommandSync(self.tree, self.client, config.command_guilds)
        self.http_port = 0  # where /healthz and /metrics listen, once serving
        self.ready = asyncio.Event()
        self.client.setup_hook = self._setup_hook  # type: ignore[method-assign]
        self.client.event(self.on_message)
        self.client.event(self.on_raw_message_delete)
        self.client.event(self.on_raw_bulk_message_delete)
        self.client.event(self.on_raw_message_edit)
        self.client.event(self.on_ready)
        self.feedback = DiscordFeedback(core)
        self.approvals = DiscordApprovals(
            core, config, self.client, self.tasks, self.handlers.turn_slot
        )
        self.client.event(self.on_interaction)
        self.client.event(self.on_resumed)
        self.client.on_error = log_event_error  # type: ignore[method-assign]

    async def _setup_hook(self) -> None:
        """After login, before the gateway: start helpers and sync the app commands."""
        self.handlers.guard.start()
        self.core.serve_inbox(INBOX_KIND, self.handlers.on_queued)
        self.approvals.start()
        if (
            self.config.message_content == "auto"
            and asks_for_content(self.client)
            and not content_granted(self.client)
        ):
            go_without_content(self.client, "not enabled for the application")
        if self.shards.syncs_commands:
            await self.command_sync.start()
        else:
            emit(_LOG, "discord_command_sync_skipped", reason="shard 0 runs elsewhere")

    async def on_ready(self) -> None:
        user = self.client.user
        emit(
            _LOG,
            "discord_ready",
            user=user.id if user else None,
            guilds=len(self.client.guilds),
            shards=self.client.shard_count,
            shard_ids=list(self.shards.ids) if self.shards.ids is not None else None,
            event_loop=running_loop_name(),
        )
        self.ready.set()

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """Clicks on the feedback and approval buttons (slash commands go through the command
        tree); each ignores the other's."""
        await self.feedback.on_interaction(interaction)
        await self.approvals.on_interaction(interaction)

    async def on_resumed(self) -> None:
        emit(_LOG, "discord_resumed")

    async def on_message(self, message: discord.Message) -> None:
        me = self.client.user
        if me is None:
            return
        if not asks_for_content(self.client) and _unread_without_content(message, me):
            return  # its text was withheld (no Message Content intent): nothing to answer
        await self.handlers.on_message(message, me)

    # Raw events: the client keeps no message cache, so only these see every delete and edit.
    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        await self.handlers.on_deleted([payload.message_id], payload.channel_id, payload.guild_id)

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        await self.handlers.on_deleted(payload.message_ids, payload.channel_id, payload.guild_id)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        me = self.client.user
        if me is None:
            return
        if not asks_for_content(self.client) and _unread_without_content(payload.message, me):
            return  # its new text was withheld: keep what the bot has, never blank it
        await self.handlers.on_edited(payload.message, me)

    async def stop(self) -> int:
        """Take no new messages, let answers in flight finish (bounded; the rest are handed back
        to the inbox for another process), then disconnect."""
        await self.approvals.stop()
        handed_back = await self.core.stop_inbox(self.config.shutdown_grace_seconds)
        if handed_back:
            emit(_LOG, "discord_handed_back", entries=handed_back)
        left = await self.tasks.drain(self.config.shutdown_grace_seconds)
        await self.handlers.guard.stop()
        await self.command_sync.stop()
        with contextlib.suppress(Exception):
            await self.client.close()
        emit(_LOG, "discord_stopped", cancelled=left)
        return left


def _unread_without_content(message: discord.Message, me: discord.ClientUser) -> bool:
    """A guild message Discord sent without its content (the intent is off), so empty, and
    not one it would have given the content of (a mention of the bot or a reply to it)."""
    if message.guild is None or message.content or message.attachments:
        return False
    return not any(user.id == me.id for user in message.mentions)
