"""The slash commands, declared once.

Every surface is made from this table, so a command (or a subcommand, an argument, who may run
it, its help) is added in one place: Discord's application commands are built from it
(`adapters.discord.command_tree`), Slack's manifest is checked against it (a test compares
`manifest.yaml` with `SLACK_MANIFEST` below), Slack knows from it which subcommands need the
admin lookup, the console recognises its names, and `/help` and each command's usage line are
written from it. What a command does stays in `bot.commands` / `bot.config_command`.

A subcommand with structured arguments (Discord's options) is turned into the same text a
person types on Slack or the console by its `compose` function, so the core parses one form.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from bot.policy import KEYS

Values = Mapping[str, str | bool | None]


@dataclass(frozen=True)
class Arg:
    """One argument of a subcommand (a Discord option; a word on Slack and the console)."""

    name: str
    description: str
    required: bool = True
    flag: bool = False  # yes/no
    choices: tuple[tuple[str, str], ...] = ()  # (label, value); "{team}" in a label: the
    # platform's word for a team ("server", "workspace")
    complete: str | None = None  # a completion source the adapter provides ("packs")


@dataclass(frozen=True)
class Subcommand:
    name: str
    description: str
    usage: str  # the typed form after the command name, e.g. "forget <id>"
    compose: Callable[[Values], str]
    args: tuple[Arg, ...] = ()
    admin: bool = False  # changes something only admins may change
    answers_admins: bool = False  # anyone may run it; admins are answered more


@dataclass(frozen=True)
class Command:
    name: str
    description: str  # at most 100 characters (Discord's limit)
    usage_hint: str  # Slack's one-line hint
    subcommands: tuple[Subcommand, ...]
    in_dms: bool = True  # False: only in a team's channels (per-team state)
    extra_help: str = ""

    def sub(self, name: str) -> Subcommand | None:
        return next((s for s in self.subcommands if s.name == name), None)

    def needs_admin(self, text: str) -> bool:
        """Whether `text` asks for an admin-only subcommand, so an adapter looks up the
        person's admin flag (a platform call) only then. No words: the first subcommand."""
        words = text.split(maxsplit=1)
        first = words[0].casefold() if words else self.subcommands[0].name
        sub = self.sub(first)
        return sub is not None and (sub.admin or sub.answers_admins)

    @property
    def help(self) -> str:
        parts = [
            f"`/{self.name} {s.usage}` {s.description[0].lower()}{s.description[1:]}"
            for s in self.subcommands
        ]
        return (
            "Usage: " + "; ".join(parts) + "." + (f" {self.extra_help}" if self.extra_help else "")
        )


def _word(name: str) -> Callable[[Values], str]:
    return lambda _values: name


def _config_text(action: str) -> Callable[[Values], str]:
    """`set key:K value:V scope:team` as typed text: `set team K='V'` (quoted, so a value with
    spaces stays one word)."""

    def compose(values: Values) -> str:
        where = "team " if values.get("scope") == "team" else ""
        key = str(values.get("key") or "")
        value = values.get("value")
        if value is None:
            return f"{action} {where}{key}"
        return f"{action} {where}{key}={shlex.quote(str(value))}"

    return compose


_SCOPE = Arg(
    "scope",
    "Where it applies",
    required=False,
    choices=(("this channel", "channel"), ("the whole {team}", "team")),
)
_KEY = Arg("key", "Setting", choices=tuple((k, k) for k in KEYS))

MEMORY = Command(
    name="memory",
    description="See or erase what the bot remembers about you",
    usage_hint="[show | forget <id> | forget all]",
    subcommands=(
        Subcommand(
            "show",
            "Lists what I remember about you; with history, replaced and closed facts too",
            "show [history]",
            lambda v: "show history" if v.get("history") else "show",
            (Arg("history", "Also list facts that were replaced or closed", False, flag=True),),
        ),
        Subcommand(
            "forget",
            "Erases one fact, or everything I hold about you (all)",
            "forget <id | all>",
            lambda v: f"forget {str(v.get('id') or '').strip()}",
            (Arg("id", "The fact id from /memory show, or all"),),
        ),
    ),
)

TOOLS = Command(
    name="tools",
    description="List the tool packs; admins install or remove them",
    usage_hint="[install <pack> [key=value ...] | remove <pack> | connections | disconnect <name>]",
    in_dms=False,
    subcommands=(
        Subcommand("list", "Lists the tool packs installed here", "list", _word("list")),
        Subcommand(
            "install",
            "Installs a tool pack (admins)",
            "install <pack> [key=value ...]",
            lambda v: f"install {v.get('pack') or ''} {v.get('settings') or ''}".strip(),
            (
                Arg("pack", "Pack name", complete="packs"),
                Arg("settings", "key=value settings, space-separated", required=False),
            ),
            admin=True,
        ),
        Subcommand(
            "remove",
            "Removes a tool pack (admins)",
            "remove <pack>",
            lambda v: f"remove {v.get('pack') or ''}".strip(),
            (Arg("pack", "Pack name"),),
            admin=True,
        ),
        Subcommand(
            "audit",
            "Lists tool approvals and decisions, installs, removals and failures (admins)",
            "audit",
            _word("audit"),
            admin=True,
        ),
        Subcommand(
            "connections",
            "Lists the tool servers you connected with your own account",
            "connections",
            _word("connections"),
        ),
        Subcommand(
            "disconnect",
            "Removes your own connection to a tool server",
            "disconnect <name>",
            lambda v: f"disconnect {v.get('name') or ''}".strip(),
            (Arg("name", "The server's pack name, from /tools connections"),),
        ),
    ),
)

CONFIG = Command(
    name="config",
    description="How the bot behaves here; admins change it",
    usage_hint="[show | set [team] key=value ... | unset [team] key ... | history]",
    in_dms=False,
    extra_help="Keys: " + ", ".join(KEYS) + ".",
    subcommands=(
        Subcommand(
            "show", "Shows the settings here, with where each comes from", "show", _word("show")
        ),
        Subcommand(
            "set",
            "Changes a setting for this channel or the whole team (admins)",
            "set [team] KEY=VALUE ...",
            _config_text("set"),
            (_KEY, Arg("value", "New value"), _SCOPE),
            admin=True,
        ),
        Subcommand(
            "unset",
            "Goes back to the team's value or the default (admins)",
            "unset [team] KEY ...",
            _config_text("unset"),
            (_KEY, _SCOPE),
            admin=True,
        ),
        Subcommand(
            "history", "Lists the last changes of the settings here", "history", _word("history")
        ),
        Subcommand(
            "grants",
            "Lists who may run which tool here without asking (Approve always)",
            "grants",
            _word("grants"),
        ),
        Subcommand(
            "revoke",
            "Revokes an Approve always grant of a tool here, one person's or everyone's (admins)",
            "revoke <tool> [user]",
            lambda v: f"revoke {v.get('tool') or ''} {v.get('user') or ''}".strip(),
            (
                Arg("tool", "Tool name, as /config grants lists it"),
                Arg("user", "Whose grant (a user id); everyone's when left out", required=False),
            ),
            admin=True,
        ),
    ),
)

USAGE = Command(
    name="usage",
    description="Your tokens and cost; admins also see the team's",
    usage_hint="[show]",
    subcommands=(
        Subcommand(
            "show",
            "Shows your usage today, this week and this month (admins: the team's too)",
            "show",
            _word("show"),
            answers_admins=True,
        ),
    ),
)

COMMANDS: tuple[Command, ...] = (MEMORY, TOOLS, CONFIG, USAGE)
BY_NAME: dict[str, Command] = {c.name: c for c in COMMANDS}


@dataclass(frozen=True)
class LocalCommand:
    """A command of one surface only (the console's `/attach`, `/quit`), listed by `/help`."""

    usage: str
    description: str


# The console's answers to an approval request (`bot.approvals`); Slack and Discord show
# buttons instead.
APPROVE = LocalCommand(
    "/approve [always]",
    "run the tool call waiting for your approval (always: that tool, here, from now on)",
)
DENY = LocalCommand("/deny", "decline the tool call waiting for your approval")


@dataclass(frozen=True)
class HelpText:
    commands: tuple[Command, ...] = COMMANDS
    local: tuple[LocalCommand, ...] = field(default_factory=tuple)

    def render(self) -> str:
        lines = ["Commands:"]
        for command in self.commands:
            lines.append(f"/{command.name}: {command.description}")
            lines.extend(
                f"  /{command.name} {s.usage}: {s.description}" for s in command.subcommands
            )
        lines.extend(f"{c.usage}: {c.description}" for c in self.local)
        lines.append("Anything else is a message to me.")
        return "\n".join(lines)


def help_text(local: tuple[LocalCommand, ...] = ()) -> str:
    """`/help`: every command with its subcommands, then the surface's own."""
    return HelpText(COMMANDS, local).render()
