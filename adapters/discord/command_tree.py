"""Discord's application commands, built from the command registry (`bot.command_registry`).

Each registry command becomes a top-level group and each subcommand one of its commands, with
the registry's descriptions, options, choices and places. discord.py reads a command's options
from its callback's signature, so the callback is given one made from the registry's arguments
(`inspect.Signature`); whatever options Discord sends are composed into the text a person would
type (`Subcommand.compose`) and run through the one shared path.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import discord
from discord import app_commands

from bot.command_registry import Arg, Command, Subcommand

Run = Callable[[discord.Interaction, str, str], Awaitable[None]]
Complete = Callable[[str], list[app_commands.Choice[str]]]

TEAM_WORD = "server"
IN_GUILDS_AND_DMS = app_commands.AppCommandContext(
    guild=True, dm_channel=True, private_channel=False
)
IN_GUILDS = app_commands.AppCommandContext(guild=True, dm_channel=False, private_channel=False)
GUILD_INSTALL = app_commands.AppInstallationType(guild=True, user=False)


class CommandGroup(app_commands.Group):
    """A top-level command whose places are given by `contexts` and `integration_types`
    alone: Discord deprecated `dm_permission` for them, and discord.py still sends it."""

    def to_dict(self, tree: app_commands.CommandTree[Any]) -> dict[str, Any]:
        data = super().to_dict(tree)
        data.pop("dm_permission", None)
        return data


def _described(text: str) -> str:
    """Registry descriptions say "admins"; on Discord they are the server's."""
    return text.replace("(admins)", f"({TEAM_WORD} admins)")[:100]


def _annotation(arg: Arg) -> Any:
    if arg.flag:
        return bool
    if arg.choices:
        return app_commands.Choice[str]
    return str


def _parameter(arg: Arg) -> inspect.Parameter:
    default: Any = inspect.Parameter.empty
    if not arg.required:
        default = False if arg.flag else None
    return inspect.Parameter(
        arg.name, inspect.Parameter.KEYWORD_ONLY, annotation=_annotation(arg), default=default
    )


def _value(raw: object) -> str | bool | None:
    if isinstance(raw, app_commands.Choice):
        return str(raw.value)
    if raw is None or isinstance(raw, bool):
        return raw
    return str(raw)


def _callback(
    command: Command, sub: Subcommand, run: Run
) -> Callable[..., Coroutine[Any, Any, None]]:
    async def callback(interaction: discord.Interaction, **options: object) -> None:
        values = {name: _value(raw) for name, raw in options.items()}
        await run(interaction, command.name, sub.compose(values))

    params = [
        inspect.Parameter("interaction", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        *(_parameter(a) for a in sub.args),
    ]
    callback.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    callback.__qualname__ = callback.__name__ = f"{command.name}_{sub.name}"
    if sub.args:
        app_commands.describe(**{a.name: a.description[:100] for a in sub.args})(callback)
    choices = {
        a.name: [
            app_commands.Choice(name=label.format(team=TEAM_WORD)[:100], value=value)
            for label, value in a.choices
        ]
        for a in sub.args
        if a.choices
    }
    if choices:
        app_commands.choices(**choices)(callback)
    return callback


def _completer(
    complete: Complete,
) -> Callable[[discord.Interaction, str], Coroutine[Any, Any, list[app_commands.Choice[str]]]]:
    async def autocomplete(
        interaction: discord.Interaction, current: str
    ) -> list[app_commands.Choice[str]]:
        return complete(current)

    return autocomplete


def build_group(command: Command, run: Run, completions: dict[str, Complete]) -> app_commands.Group:
    group = CommandGroup(
        name=command.name,
        description=_described(command.description),
        allowed_contexts=IN_GUILDS_AND_DMS if command.in_dms else IN_GUILDS,
        allowed_installs=GUILD_INSTALL,
    )
    for sub in command.subcommands:
        child: app_commands.Command[Any, ..., None] = app_commands.Command(
            name=sub.name,
            description=_described(sub.description),
            callback=_callback(command, sub, run),
            parent=group,
        )
        for arg in sub.args:
            if arg.complete is not None:
                child.autocomplete(arg.name)(_completer(completions[arg.complete]))
        group.add_command(child)
    return group
