"""Every slash command gets an answer, runs once, and is checked before it runs.

`GuardedTree` is the command tree `bot discord` uses. Before a command runs
(`interaction_check`, which discord.py calls first for every application command):

- **Once**: an interaction id seen before (a gateway replay after RESUME, a second process on
  the same token) is dropped with one log line: in this process (bounded TTL cache) and,
  through `BotCore.first_delivery`, across processes. An interaction older than Discord's
  15-minute token life (its age is read from its snowflake id) is dropped the same way: it can
  no longer be answered, and running it unseen (an erasure) would surprise.
- **Its shape**: the subcommand must be one of ours today (a stale client may send an old or
  unknown one), every option known, of the type we registered (an integer where text is
  expected is refused, not passed on), required ones present, and the options a list of
  objects. Anything else gets a clear ephemeral answer saying what to do.

An exception inside discord.py's own handling (malformed data it did not expect) becomes an
`AppCommandError`, and `on_error` answers it ephemerally with one log line, never a traceback.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import discord
from cachetools import TTLCache
from discord import app_commands
from discord.enums import AppCommandOptionType as T

from adapters.common.logs import emit
from adapters.discord.rest_errors import REST_ERRORS, rest_error_fields
from bot import metrics
from bot.core import BotCore

_LOG = logging.getLogger(__name__)
TOKEN_LIFE = timedelta(minutes=15)  # an interaction token's validity (Discord)
STALE = (
    "I don't know that command (any more): Discord may be showing an old list of my commands. "
    "Type `/` again and pick it from the list."
)
UNREADABLE = "That command arrived in a form I cannot read. Run it again from Discord's list."
FAILED = "Sorry, that command failed. Please try again."
_TYPES: dict[T, tuple[type, ...]] = {
    T.string: (str,),
    T.integer: (int,),
    T.number: (int, float),
    T.boolean: (bool,),
}
_WORDS = {
    T.string: "text",
    T.integer: "a whole number",
    T.number: "a number",
    T.boolean: "true/false",
}


def interaction_age(interaction: discord.Interaction) -> timedelta:
    """How long ago Discord created the interaction (its snowflake's time), not when it came."""
    return discord.utils.utcnow() - discord.utils.snowflake_time(interaction.id)


def option_problem(tree: app_commands.CommandTree[Any], data: Any) -> str | None:
    """What is wrong with an application command's data, for the person; None when it is ours."""
    if not isinstance(data, dict) or not isinstance(data.get("options", []), list):
        return UNREADABLE
    if not all(isinstance(o, dict) for o in _walk(data.get("options", []))):
        return UNREADABLE
    try:
        command, options = tree._get_app_command_options(data)  # type: ignore[arg-type]
    except (app_commands.CommandNotFound, app_commands.CommandSignatureMismatch):
        return STALE
    except (AttributeError, KeyError, TypeError, ValueError):
        return UNREADABLE
    if not isinstance(options, list):
        return UNREADABLE
    params = {p.name: p for p in command.parameters}
    given: set[str] = set()
    for option in options:
        name = option.get("name")
        param = params.get(name) if isinstance(name, str) else None
        if param is None:
            return STALE
        given.add(param.name)
        value = option.get("value")
        allowed = _TYPES.get(param.type)
        if allowed is None:
            continue
        if param.type is T.boolean:
            ok = isinstance(value, bool)
        else:  # a JSON true is not a number here
            ok = isinstance(value, allowed) and not isinstance(value, bool)
        if not ok:
            return (
                f"The option `{param.name}` of `/{command.qualified_name}` must be "
                f"{_WORDS[param.type]}. Run the command again from Discord's list."
            )
    missing = [p.name for p in command.parameters if p.required and p.name not in given]
    if missing:
        return (
            f"`/{command.qualified_name}` needs `{missing[0]}`. Run it again from Discord's list."
        )
    return None


def _walk(options: list[Any]) -> list[Any]:
    """Every option at every level (subcommand groups hold subcommands hold options)."""
    found: list[Any] = []
    stack = list(options)
    while stack and len(found) < 1000:
        option = stack.pop()
        found.append(option)
        if isinstance(option, dict) and isinstance(option.get("options"), list):
            stack.extend(option["options"])
        elif isinstance(option, dict) and "options" in option:
            found.append(None)  # options that are not a list
    return found


class GuardedTree(app_commands.CommandTree[discord.Client]):
    """The command tree with the checks above."""

    def __init__(self, client: discord.Client, core: BotCore) -> None:
        super().__init__(client)
        self.core = core
        self.seen: TTLCache[int, bool] = TTLCache(maxsize=50_000, ttl=TOKEN_LIFE.total_seconds())

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        if interaction.type is not discord.InteractionType.application_command:
            return True  # autocomplete: nothing runs
        if not await self._first(interaction):
            return False
        problem = option_problem(self, interaction.data)
        if problem is not None:
            metrics.ERRORS.labels("discord", "command_refused").inc()
            emit(_LOG, "discord_command_refused", logging.INFO, interaction=str(interaction.id))
            await _answer(interaction, problem)
            return False
        return True

    async def _first(self, interaction: discord.Interaction) -> bool:
        if interaction.id in self.seen:
            return _duplicate(interaction, "replayed")
        self.seen[interaction.id] = True
        if interaction_age(interaction) > TOKEN_LIFE:
            return _duplicate(interaction, "expired")
        try:
            first = await self.core.first_delivery(f"discord:interaction:{interaction.id}")
        except Exception:  # the shared cache is down: this process's own check stands
            return True
        return first or _duplicate(interaction, "replayed")

    async def _call(self, interaction: discord.Interaction) -> None:
        try:
            await super()._call(interaction)
        except app_commands.AppCommandError:
            raise
        except Exception as exc:  # discord.py met data it did not expect
            raise app_commands.AppCommandError(type(exc).__name__) from exc

    async def on_error(
        self, interaction: discord.Interaction, error: app_commands.AppCommandError, /
    ) -> None:
        cause = error.__cause__ or getattr(error, "original", None) or error
        metrics.ERRORS.labels("discord", "command_failed").inc()
        emit(
            _LOG,
            "discord_command_error",
            logging.WARNING,
            interaction=str(interaction.id),
            error=type(cause).__name__,
        )
        stale = isinstance(
            error, app_commands.CommandNotFound | app_commands.CommandSignatureMismatch
        )
        await _answer(interaction, STALE if stale else FAILED)


def _duplicate(interaction: discord.Interaction, why: str) -> bool:
    metrics.DEDUPLICATED_EVENTS.labels("discord").inc()
    emit(
        _LOG, "discord_interaction_dropped", logging.INFO, interaction=str(interaction.id), why=why
    )
    return False


async def _answer(interaction: discord.Interaction, text: str) -> None:
    """An ephemeral answer, as the first response or, once responded, as a follow-up."""
    none = discord.AllowedMentions.none()
    try:
        if interaction.response.is_done():
            await interaction.followup.send(text, ephemeral=True, allowed_mentions=none)
        else:
            await interaction.response.send_message(text, ephemeral=True, allowed_mentions=none)
    except REST_ERRORS as exc:
        emit(_LOG, "discord_command_reply_failed", logging.WARNING, **rest_error_fields(exc))
