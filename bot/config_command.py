"""`/config`: how admins shape the bot per team and per channel (DESIGN "settings per place").

`show` lists the effective settings here with where each comes from; `set [team] K=V ...` and
`unset [team] K ...` change this channel's (or, with `team`, the team's) settings, admins only,
all or nothing: every key and value is checked first (`bot.policy.parse_value`), and one bad
one refuses the whole command, naming what is allowed. `history` lists the last changes here.

Decisions: in a DM, `set` without `team` shapes that DM (it is a place like any other). Values
with spaces are written in double quotes and parsed with shlex after the command's length is
bounded. Every change is logged with its keys and who made it, never the values (instructions
may hold anything an admin pasted).
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from bot.command_registry import CONFIG
from bot.core import CommandReply, CommandRequest
from bot.keys import PersonKey, TeamKey
from bot.place_settings_cache import CachedPlaceSettings
from bot.policy import BUDGET_KEYS, KEYS, PlacePolicy, PolicyResolver, parse_value
from bot.stores.approvals import ApprovalStore
from bot.stores.place_settings import FORGOTTEN, TEAM_WIDE, SettingChange

log = logging.getLogger(__name__)

HISTORY_SHOWN = 20
# The keys `/config` changes.
SETTABLE = KEYS
NOT_YET: dict[str, str] = {}
PREVIEW_CHARS = 80
GRANTS_SHOWN = 30
CONFIG_HELP = CONFIG.help
NOT_ADMIN = (
    "Sorry, only admins can change settings. `/config` shows what is set here; ask an admin "
    "to change it."
)


def _shown(key: str, value: str) -> str:
    if not value:
        return "_(none)_"
    one_line = " ".join(value.split())
    if len(one_line) > PREVIEW_CHARS:
        one_line = one_line[: PREVIEW_CHARS - 1] + "…"
    return f"`{one_line}`" if "`" not in one_line else one_line


def effective_value(policy: PlacePolicy, key: str, default_model: str) -> str:
    """A key's value as `/config show` names it (`tools`: all, none or a list; `memory`: on/off)."""
    if key == "instructions":
        return policy.instructions
    if key == "model":
        return policy.model or default_model
    if key == "tools":
        return "all" if policy.tools is None else (",".join(sorted(policy.tools)) or "none")
    if key == "memory":
        return "on" if policy.memory else "off"
    if key == "tool_risk":
        return ",".join(f"{name}={risk}" for name, risk in policy.tool_risk) or "none"
    if key in BUDGET_KEYS:
        set_here = [f"{b.layer} {b.budget.shown()}" for b in policy.budgets if b.key == key]
        return "; ".join(set_here) or "none"
    return str(getattr(policy, key))


class ConfigCommands:
    def __init__(
        self,
        settings: CachedPlaceSettings,
        policies: PolicyResolver,
        *,
        is_admin: Callable[[CommandRequest], bool],
        installed_packs: Callable[[TeamKey], Awaitable[set[str]]],
    ) -> None:
        self.settings = settings
        self.policies = policies
        self.is_admin = is_admin
        self.installed_packs = installed_packs
        self.approvals: ApprovalStore | None = None  # "Approve always" grants (bot.approvals)

    async def handle(self, req: CommandRequest) -> CommandReply:
        try:
            words = shlex.split(req.text.strip())
        except ValueError:
            return CommandReply("That has an unclosed quote. " + CONFIG_HELP, ok=False)
        action = words[0].casefold() if words else "show"
        args = words[1:]
        team = TeamKey(req.platform, req.team)
        if action == "show" and not args:
            return await self._show(team, req.channel)
        if action == "history" and not args:
            return await self._history(team, req.channel)
        if action == "grants" and not args:
            return await self._grants(team, req.channel)
        if action == "revoke" and 1 <= len(args) <= 2:
            if not self.is_admin(req):
                return CommandReply(NOT_ADMIN, ok=False)
            return await self._revoke(req, team, args)
        if action not in ("set", "unset") or not args:
            return CommandReply(CONFIG_HELP, ok=False)
        if not self.is_admin(req):
            return CommandReply(NOT_ADMIN, ok=False)
        scope = req.channel
        if args[0].casefold() == "team":
            scope, args = TEAM_WIDE, args[1:]
        elif args[0].casefold() == "channel":
            args = args[1:]
        if not args:
            return CommandReply(CONFIG_HELP, ok=False)
        changes = await self._set_values(team, args) if action == "set" else self._unset_keys(args)
        if isinstance(changes, CommandReply):
            return changes
        done = await self.settings.change(
            team, scope, changes, by=PersonKey(req.platform, req.team, req.user).id
        )
        where = "the whole team" if scope == TEAM_WIDE else "this channel"
        log.info(
            "settings_changed",
            extra={
                "fields": {
                    "team": team.id,
                    "scope": "team" if scope == TEAM_WIDE else "channel",
                    "keys": sorted(c.key for c in done),
                    "by": req.user,
                }
            },
        )
        if not done:
            return CommandReply(f"Nothing changed: {where} already had that.")
        names = ", ".join(f"`{c.key}`" for c in done)
        verb = "Set" if action == "set" else "Unset"
        return CommandReply(f"{verb} {names} for {where}. `/config` shows the result here.")

    async def _set_values(self, team: TeamKey, args: list[str]) -> dict[str, str] | CommandReply:
        values: dict[str, str] = {}
        problems: list[str] = []
        for word in args:
            key, eq, raw = word.partition("=")
            key = key.strip().casefold()
            if not eq or not key:
                problems.append(f"`{word[:40]}` is not KEY=VALUE")
                continue
            if key in NOT_YET:
                problems.append(NOT_YET[key])
                continue
            try:
                parsed = parse_value(key, raw, models=self.policies.models)
            except ValueError as exc:
                problems.append(str(exc))
                continue
            if key == "tools" and isinstance(parsed, frozenset) and parsed:
                missing = sorted(parsed - await self.installed_packs(team))
                if missing:
                    installed = sorted(await self.installed_packs(team))
                    problems.append(
                        "tools: all, none, or installed packs ("
                        + (", ".join(installed) or "none installed")
                        + f"); not installed: {', '.join(missing)[:200]}"
                    )
                    continue
            values[key] = raw.strip()
        if problems:
            return CommandReply("Nothing was changed: " + "; ".join(problems[:5]) + ".", ok=False)
        return values

    def _unset_keys(self, args: list[str]) -> dict[str, str | None] | CommandReply:
        unknown = [a for a in args if a.casefold() not in SETTABLE]
        if unknown:
            return CommandReply(
                f"Nothing was changed: unknown setting {unknown[0][:40]!r}; the keys are "
                + ", ".join(SETTABLE)
                + ".",
                ok=False,
            )
        return {a.casefold(): None for a in args}

    async def _show(self, team: TeamKey, channel: str) -> CommandReply:
        policy = await self.policies.for_place(team, channel)
        lines = [
            f"• *{key}*: {_shown(key, effective_value(policy, key, self.policies.default_model))}"
            f" — {policy.source(key)}"
            for key in SETTABLE
        ]
        return CommandReply(
            "Settings here (each with where it comes from: default, team or channel):\n"
            + "\n".join(lines)
            + "\nAdmins change them with `/config set [team] KEY=VALUE`."
        )

    async def _grants(self, team: TeamKey, channel: str) -> CommandReply:
        if self.approvals is None:
            return CommandReply("Tool calls never wait for approval in this bot.")
        grants = await self.approvals.grants(team, channel)
        if not grants:
            return CommandReply(
                "Nobody here may run a tool without asking: every call that needs approval "
                "asks the person first (`approve` setting)."
            )
        lines = [
            f"• `{g.tool[:64]}` — {g.person.rsplit(':', 1)[-1]}, since "
            + datetime.fromtimestamp(g.at, UTC).strftime("%Y-%m-%d %H:%M UTC")
            for g in grants[:GRANTS_SHOWN]
        ]
        more = f"\n… and {len(grants) - GRANTS_SHOWN} more" if len(grants) > GRANTS_SHOWN else ""
        return CommandReply(
            "Approved always here (admins revoke with `/config revoke TOOL [USER]`):\n"
            + "\n".join(lines)
            + more
        )

    async def _revoke(self, req: CommandRequest, team: TeamKey, args: list[str]) -> CommandReply:
        if self.approvals is None:
            return CommandReply("Tool calls never wait for approval in this bot.", ok=False)
        tool = args[0][:64]
        person = PersonKey(req.platform, req.team, args[1][:100]).id if len(args) > 1 else None
        gone = await self.approvals.revoke(team, req.channel, tool, person)
        log.info(
            "approval_grant_revoked",
            extra={"fields": {"team": team.id, "tool": tool, "count": gone, "by": req.user}},
        )
        if not gone:
            return CommandReply(f"Nothing to revoke: no grant of `{tool}` here matched.")
        return CommandReply(
            f"Revoked {gone} grant(s) of `{tool}` here: calls of it ask for approval again."
        )

    async def _history(self, team: TeamKey, channel: str) -> CommandReply:
        changes = await self.settings.store.history(team, channel, limit=HISTORY_SHOWN)
        if not changes:
            return CommandReply("No settings have been changed here yet.")
        return CommandReply(
            "The last changes here, newest first:\n" + "\n".join(_line(c) for c in changes)
        )


def _line(change: SettingChange) -> str:
    when = datetime.fromtimestamp(change.at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    who = change.by if change.by == FORGOTTEN else change.by.rsplit(":", 1)[-1]
    where = "team" if change.channel == TEAM_WIDE else "channel"
    old = _shown(change.key, change.old or "")
    new = "_(unset)_" if change.new is None else _shown(change.key, change.new)
    return f"• {when} — {who} ({where}) *{change.key}*: {old} → {new}"
