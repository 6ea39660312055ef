"""`/memory` and `/tools` as Discord application commands, through the core's shared handler.

Each subcommand becomes the same `CommandRequest` text Slack sends (`/memory forget all` is
command "memory", text "forget all"), so the wording and the rules live in `bot.commands`.
Every answer is ephemeral (flag 64). The first response must reach Discord within 3 seconds:
the answer is sent inline when it is ready within `command_inline_seconds`, otherwise the
interaction is deferred (`ephemeral=True, thinking=True`) and the answer follows up.

Admins (`/tools install|remove`): the guild owner and members whose permissions in this
interaction (Discord sends them with it) include Manage Server or Administrator; the core adds
`BOT_ADMINS`. The check is made here on every call, not left to default member permissions
(which a server can change). Tool packs belong to a guild, so `/tools` is guild-only.
"""

from __future__ import annotations

import asyncio
import logging

import discord
from discord import app_commands

from adapters.common.logs import emit
from adapters.common.split import split_message
from adapters.discord.command_tree import build_group
from adapters.discord.config import MESSAGE_LIMIT, DiscordConfig
from adapters.discord.handlers import DM_TEAM, PLATFORM
from adapters.discord.interactions import interaction_age
from adapters.discord.rest_errors import REST_ERRORS, rest_error_fields
from bot import metrics
from bot.command_registry import BY_NAME
from bot.command_registry import COMMANDS as REGISTRY
from bot.core import BotCore, CommandReply, CommandRequest

_LOG = logging.getLogger(__name__)
FAILED = "Sorry, that command failed. Please try again."
GUILD_ONLY = "Tool packs and settings are per server: run this command in a server."


def is_guild_admin(interaction: discord.Interaction) -> bool:
    """Owner, Manage Server or Administrator, from the interaction's own permissions."""
    if interaction.guild_id is None:
        return False
    perms = interaction.permissions
    if perms.administrator or perms.manage_guild:
        return True
    guild = interaction.guild
    return guild is not None and guild.owner_id == interaction.user.id


def pack_choices(current: str) -> list[app_commands.Choice[str]]:
    """`/tools install pack:` suggestions: the packs this build offers (a static registry), those
    starting with what was typed first, at most 25 (Discord's limit), names within 100 chars."""
    from tools.packs import PACKS

    typed = str(current or "")[:100].strip().lower()
    names = sorted(PACKS, key=lambda n: (not n.startswith(typed), n))
    return [
        app_commands.Choice(name=f"{n}: {PACKS[n].description}"[:100], value=n)
        for n in names
        if typed in n
    ][:25]


class DiscordCommands:
    def __init__(self, core: BotCore, config: DiscordConfig) -> None:
        self.core = core
        self.config = config

    def register(self, tree: app_commands.CommandTree[discord.Client]) -> None:
        """Every command of the registry, as built by `command_tree`."""
        for command in REGISTRY:
            tree.add_command(build_group(command, self.run, {"packs": pack_choices}))

    async def run(self, interaction: discord.Interaction, command: str, text: str) -> None:
        metrics.EVENTS.labels(PLATFORM, command).inc()
        if not BY_NAME[command].in_dms and interaction.guild_id is None:
            await self._respond(interaction, CommandReply(GUILD_ONLY, ok=False), deferred=False)
            return
        request = CommandRequest(
            platform=PLATFORM,
            team=str(interaction.guild_id) if interaction.guild_id else DM_TEAM,
            channel=str(interaction.channel_id or "-"),
            user=str(interaction.user.id),
            command=command,
            text=text,
            is_platform_admin=is_guild_admin(interaction),
        )
        # Discord's 3 seconds count from the interaction's creation (its snowflake), not from
        # when it reached us: one delivered late has less time to be answered inline.
        budget = self.config.command_inline_seconds
        age = interaction_age(interaction).total_seconds()
        inline = min(budget, max(0.0, budget - age))
        if inline <= 0:
            # Defer before any work: if even that is too late, the command cannot be answered
            # and is not run (the person was told it did not respond, and will run it again).
            if not await self._defer(interaction):
                return
            await self._respond(interaction, await self._handle(request), deferred=True)
            return
        work = asyncio.ensure_future(self._handle(request))
        done, _ = await asyncio.wait({work}, timeout=inline)
        deferred = work not in done
        if deferred:
            await self._defer(interaction)
        await self._respond(interaction, await work, deferred=deferred)

    async def _defer(self, interaction: discord.Interaction) -> bool:
        try:
            await interaction.response.defer(ephemeral=True, thinking=True)
        except REST_ERRORS as exc:
            emit(_LOG, "discord_defer_failed", logging.WARNING, **rest_error_fields(exc))
            return False
        return True

    async def _handle(self, request: CommandRequest) -> CommandReply:
        try:
            return await self.core.handle_command(request)
        except Exception as exc:
            metrics.ERRORS.labels(PLATFORM, "command_failed").inc()
            emit(_LOG, "discord_command_failed", logging.ERROR, error=type(exc).__name__)
            return CommandReply(FAILED, ok=False)

    async def _respond(
        self, interaction: discord.Interaction, reply: CommandReply, *, deferred: bool
    ) -> None:
        parts = split_message(reply.text or "…", MESSAGE_LIMIT)
        none = discord.AllowedMentions.none()
        try:
            if deferred:
                for part in parts:
                    await interaction.followup.send(part, ephemeral=True, allowed_mentions=none)
                return
            await interaction.response.send_message(parts[0], ephemeral=True, allowed_mentions=none)
            for part in parts[1:]:
                await interaction.followup.send(part, ephemeral=True, allowed_mentions=none)
        except REST_ERRORS as exc:
            metrics.ERRORS.labels(PLATFORM, "command_reply_failed").inc()
            emit(_LOG, "discord_command_reply_failed", logging.WARNING, **rest_error_fields(exc))
