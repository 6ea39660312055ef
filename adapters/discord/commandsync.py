"""Slash-command sync at start-up: only when the commands changed, never a crash, no stale copies.

- **Only when changed**: Discord's copy is read first (`GET .../commands`, one cheap call) and
  compared with what this build would register, field by field after filling Discord's
  defaults; the bulk overwrite (`PUT`, rate-limited to a few a day per scope in practice) runs
  only when they differ. Comparing with Discord's own answer, not a hash kept here, also
  catches a change made by another deployment or by hand.
- **No duplicates**: with `DISCORD_COMMAND_GUILDS` the commands live in those guilds; global
  commands left from an earlier global sync would show every command twice there, so the
  global set is emptied (only when Discord still holds some).
- **Never fatal**: a refused sync (`HTTPException`) is one warning line; a rate limit longer
  than discord.py's `max_ratelimit_timeout` (`discord.RateLimited`, which is not an
  `HTTPException`) is one warning line too and the sync is tried again in the background after
  the wait Discord asked for (`MAX_ATTEMPTS` tries at most), while the bot runs: answering
  mentions does not need the commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import discord
from discord import app_commands

from adapters.common.logs import emit

_LOG = logging.getLogger(__name__)
MAX_ATTEMPTS = 5
_sleep = asyncio.sleep  # tests shorten Discord's minutes-long waits


def _option(data: dict[str, Any]) -> dict[str, Any]:
    """An option (or a command's top level) with Discord's defaults filled in."""
    choices = data.get("choices") or []
    return {
        "type": int(data.get("type") or 1),
        "name": data.get("name"),
        "description": data.get("description") or "",
        "required": bool(data.get("required", False)),
        "autocomplete": bool(data.get("autocomplete", False)),
        "choices": sorted((str(c.get("name")), str(c.get("value"))) for c in choices),
        "channel_types": sorted(data.get("channel_types") or []),
        "min_value": data.get("min_value"),
        "max_value": data.get("max_value"),
        "min_length": data.get("min_length"),
        "max_length": data.get("max_length"),
        "options": [_option(o) for o in data.get("options") or []],
    }


def normalized(command: dict[str, Any]) -> dict[str, Any]:
    """What decides how a command looks and where it may run (ids, versions, localizations
    and the deprecated `dm_permission` left out)."""
    base = _option(command)
    permissions = command.get("default_member_permissions")
    contexts = command.get("contexts")
    base.update(
        nsfw=bool(command.get("nsfw", False)),
        default_member_permissions=None if permissions is None else str(permissions),
        contexts=None if contexts is None else sorted(contexts),
        integration_types=sorted(command.get("integration_types") or [0]),
    )
    return base


def same_commands(local: list[dict[str, Any]], remote: list[dict[str, Any]]) -> bool:
    def key(item: dict[str, Any]) -> tuple[int, str]:
        return (item["type"], str(item["name"]))

    return sorted(map(normalized, local), key=key) == sorted(map(normalized, remote), key=key)


class CommandSync:
    """Syncs one tree's commands to Discord (see the module docstring)."""

    def __init__(
        self,
        tree: app_commands.CommandTree[discord.Client],
        client: discord.Client,
        guilds: tuple[int, ...],
    ) -> None:
        self.tree = tree
        self.client = client
        self.guilds = guilds
        self.synced: list[int | None] = []  # scopes whose commands are current on Discord
        self._retries: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Sync every scope now; rate-limited ones are retried in the background."""
        for guild_id in self.guilds:
            self.tree.copy_global_to(guild=discord.Object(id=guild_id))
        scopes: list[int | None] = [*self.guilds] or [None]
        for scope in scopes:
            await self._attempt(scope, 1)
        if self.guilds:
            await self._attempt("clear-global", 1)

    async def stop(self) -> None:
        for task in list(self._retries):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _attempt(self, scope: int | str | None, attempt: int) -> None:
        try:
            if scope == "clear-global":
                await self._clear_global()
            else:
                assert not isinstance(scope, str)
                await self._sync(scope)
        except discord.RateLimited as exc:
            retry = attempt < MAX_ATTEMPTS
            emit(
                _LOG,
                "discord_command_sync_rate_limited",
                logging.WARNING,
                guild=scope or "global",
                retry_after=round(exc.retry_after, 1),
                retrying=retry,
            )
            if retry:
                task = asyncio.create_task(
                    self._later(scope, attempt + 1, exc.retry_after), name="discord-command-sync"
                )
                self._retries.add(task)
                task.add_done_callback(self._retries.discard)
        except discord.HTTPException as exc:
            emit(
                _LOG,
                "discord_command_sync_failed",
                logging.WARNING,
                guild=scope or "global",
                status=exc.status,
                code=exc.code,
            )

    async def _later(self, scope: int | str | None, attempt: int, wait: float) -> None:
        await _sleep(wait)
        await self._attempt(scope, attempt)

    async def _sync(self, guild_id: int | None) -> None:
        target = discord.Object(id=guild_id) if guild_id is not None else None
        local = [c.to_dict(self.tree) for c in self.tree._get_all_commands(guild=target)]
        remote = await self._remote(guild_id)
        if same_commands(local, remote):
            emit(_LOG, "discord_commands_unchanged", guild=guild_id or "global", count=len(local))
        else:
            synced = await self.tree.sync(guild=target)
            emit(_LOG, "discord_commands_synced", guild=guild_id or "global", count=len(synced))
        self.synced.append(guild_id)

    async def _clear_global(self) -> None:
        """Guild commands are configured: global ones from an earlier sync would show twice."""
        if not await self._remote(None):
            return
        app_id = self._application_id()
        await self.client.http.bulk_upsert_global_commands(app_id, payload=[])
        emit(_LOG, "discord_global_commands_cleared", guilds=len(self.guilds))

    async def _remote(self, guild_id: int | None) -> list[dict[str, Any]]:
        http = self.client.http
        app_id = self._application_id()
        if guild_id is None:
            found: Any = await http.get_global_commands(app_id)
        else:
            found = await http.get_guild_commands(app_id, guild_id)
        return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []

    def _application_id(self) -> int:
        app_id = self.client.application_id
        if app_id is None:
            raise discord.ClientException("the application id is not known before login")
        return app_id
