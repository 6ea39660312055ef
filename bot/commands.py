"""Slash-command logic, platform-neutral: `/memory` and `/tools`.

Adapters parse nothing beyond the command name and its text; the wording of every answer lives
here so Slack, Discord and the console say the same thing. All answers are meant to be shown
only to the person who ran the command.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager

from bot.command_registry import MEMORY, TOOLS, help_text
from bot.config_command import ConfigCommands
from bot.connections.commands import ConnectionCommands
from bot.core import CommandReply, CommandRequest
from bot.keys import PersonKey, SessionKey, TeamKey
from bot.memory.erasure import Eraser, ErasureCounts, counts_of
from bot.memory.show import render_facts
from bot.memory.speaker_facts import (
    everywhere,
    facts_for,
    has_dm_scope,
    scope_name,
    spans_platform,
    team_word,
)
from bot.secrets import SecretBox
from bot.stores.ids import canonical_fact_id
from bot.stores.protocols import CommandStore
from bot.stores.records import ToolInstall
from bot.usage.command import UsageCommands
from tools.packs import PackConfigError, parse_settings

log = logging.getLogger(__name__)

MEMORY_HELP = MEMORY.help
TOOLS_HELP = TOOLS.help


def _erased(counts: ErasureCounts) -> str:
    return (
        f"{counts.facts} fact(s) (every version), {counts.messages} message(s) from your "
        f"conversations (yours and my answers to them), {counts.tool_calls} tool call "
        f"record(s), {counts.memories} long-term memory(ies), and {counts.summaries} "
        "conversation summary(ies) that drew on them."
        + (
            f" Your words were also cut out of {counts.copies} other record(s) that quoted "
            "them (the rest of those kept)."
            if counts.copies
            else ""
        )
    )


class PackProbeError(ValueError):
    """An install's service failed its check; `forceable`: `force=yes` may install it anyway
    (a server that is down), otherwise never (a host the operator does not allow)."""

    def __init__(self, message: str, *, forceable: bool) -> None:
        super().__init__(message)
        self.forceable = forceable


# Bounds checked before any parsing (shlex is pure Python; a member's 1 MB word must cost
# nothing). No command needs more: pack settings are a few URLs and tokens.
MAX_COMMAND_CHARS = 2000
MAX_WORDS = 32
MAX_SHOWN = 40  # characters of a person's own word echoed back in an answer
MAX_NAMED = 10  # places (and receipts) named in one answer; the rest are counted


def echo_word(word: str) -> str:
    """A word the person typed, safe to echo in `code`: short, printable, no backticks."""
    if len(word) > MAX_SHOWN or not word.isprintable() or "`" in word:
        return "that"
    return f"`{word}`"


def too_long(text: str) -> CommandReply | None:
    """The refusal for input over the bounds, or None. O(1) in the text's length."""
    if len(text) > MAX_COMMAND_CHARS:
        return CommandReply(
            f"That command is too long ({len(text):,} characters; the most is "
            f"{MAX_COMMAND_CHARS:,}). Nothing was changed.",
            ok=False,
        )
    return None


class PackCatalog:
    """What the command layer needs to know about installable packs (see bot.toolbox)."""

    def __init__(
        self,
        names: Callable[[], Iterable[str]],
        describe: Callable[[str], str],
        validate: Callable[[str, dict[str, str]], dict[str, str]],
        redact: Callable[[str, dict[str, str]], dict[str, str]],
        secret_keys: Callable[[str], frozenset[str]] = lambda _pack: frozenset(),
        *,
        install_name: Callable[[str, dict[str, str]], str] = lambda pack, _cfg: pack,
        probe: Callable[[TeamKey, str, str, dict[str, str]], Awaitable[str]] | None = None,
        status: Callable[[TeamKey, ToolInstall], Awaitable[str]] | None = None,
        on_removed: Callable[[TeamKey, str, str, str], Awaitable[None]] | None = None,
        on_installed: Callable[[TeamKey, str, str, str], Awaitable[None]] | None = None,
        history: Callable[[TeamKey, set[str]], Awaitable[list[str]]] | None = None,
    ) -> None:
        self.names = names
        self.describe = describe
        self.validate = validate  # raises ValueError with a user-facing message
        self.redact = redact
        self.secret_keys = secret_keys  # settings sealed at rest when a SecretBox is given
        self.install_name = install_name  # `mcp name=crm` is installed (and removed) as `crm`
        self.probe = probe  # checks the service before storing; PackProbeError, or a summary
        self.status = status  # health of one install, for the listing
        # (team, install name, pack type, who): drop pooled sessions/breakers; audit
        self.on_removed = on_removed
        self.on_installed = on_installed
        self.history = history  # the team's last installs, removals and breaker openings


class CommandHandler:
    def __init__(
        self,
        store: CommandStore,
        catalog: PackCatalog,
        *,
        admins: frozenset[str],
        on_erased: Callable[[list[str]], Awaitable[None]] | None = None,
        box: SecretBox | None = None,
        lock_session: Callable[[SessionKey], AbstractAsyncContextManager[None]] | None = None,
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.admins = admins
        self.on_erased = on_erased  # drops hot caches of sessions whose data changed
        self.box = box  # BOT_SECRET_KEY set: pack secrets are stored sealed
        self.lock_session = lock_session  # the turns' per-session lock (see forget_all)
        self.eraser = Eraser(store, lock_session=lock_session, on_erased=on_erased)
        self.config: ConfigCommands | None = None  # `/config`, where settings can be kept
        # `/tools audit`: the team's audit lines, oldest first (the app's; None: none kept)
        self.audit: Callable[[TeamKey], Awaitable[list[str]]] | None = None
        self.usage: UsageCommands | None = None  # `/usage`
        # `/tools connections` / `disconnect`: where people's own connections are kept
        self.connections: ConnectionCommands | None = None

    async def handle(self, req: CommandRequest) -> CommandReply:
        refusal = too_long(req.text)
        if refusal is not None:
            return refusal
        words = req.text.strip().split()
        if len(words) > MAX_WORDS:
            return CommandReply(
                f"That command has too many words (the most is {MAX_WORDS}). Nothing was changed.",
                ok=False,
            )
        try:
            if req.command.lstrip("/") == "memory":
                # Phones capitalise the first word: "Forget ALL" is "forget all" (fact ids are
                # matched without case anyway).
                return await self._memory(req, [w.casefold() for w in words])
            if req.command.lstrip("/") == "tools":
                return await self._tools(req, req.text.strip())
            if req.command.lstrip("/") == "config" and self.config is not None:
                return await self.config.handle(req)
            if req.command.lstrip("/") == "usage" and self.usage is not None:
                return await self.usage.handle(req)
            if req.command.lstrip("/") == "help":
                return CommandReply(help_text())
        except Exception:
            log.exception("command_failed", extra={"fields": {"command": req.command}})
            return CommandReply("Sorry, I couldn't do that right now. Please try again.", ok=False)
        return CommandReply(f"I don't know the command {echo_word('/' + req.command)}.", ok=False)

    # /memory ---------------------------------------------------------------------------------

    async def _memory(self, req: CommandRequest, words: list[str]) -> CommandReply:
        person = PersonKey(req.platform, req.team, req.user)
        if not words or words == ["show"] or words == ["list"]:
            return await self._show(person)
        if words in (["show", "history"], ["history"], ["show", "history:true"]):
            return await self._show(person, history=True)
        if words[0] == "forget" and len(words) == 2:
            if words[1] == "all":
                return await self._forget_all(person, req)
            fact_id = words[1].strip("`")
            if len(fact_id) <= MAX_SHOWN:
                where = await self._forget_one(person, fact_id)
                if where is not None:
                    await self.store.compact()
                    return CommandReply(f"Forgotten: fact {echo_word(fact_id)}{where} is erased.")
            return CommandReply(
                f"I have no fact {echo_word(fact_id)} about you. `/memory show` lists the ids.",
                ok=False,
            )
        return CommandReply(MEMORY_HELP, ok=False)

    async def _show(self, person: PersonKey, *, history: bool = False) -> CommandReply:
        """Every fact of the person's scope, whatever the audience and wherever it is asked (the
        answer is the person's alone), each saying where it may be used; in a DM scope, the
        person's facts on the whole platform, each saying where it was remembered."""
        facts = await facts_for(self.store, person, None, history=history)
        wide = everywhere(person) if spans_platform(person) else ""
        return CommandReply(
            render_facts(facts, history=history, here=person.id, platform_wide=wide)
        )

    async def _forget_one(self, person: PersonKey, fact_id: str) -> str | None:
        """Erase the fact (and its older versions) wherever `/memory show` here lists it; None
        if it lists none. Returns " (remembered in ...)" for a fact of another scope."""
        if not spans_platform(person):
            return "" if await self.eraser.forget_fact(person, fact_id) else None
        wanted = canonical_fact_id(fact_id)
        facts = await self.store.list_user_facts(person, history=True)
        # Ids are unique per scope: the same id in two scopes (rare) is erased in both.
        scopes = sorted({f.person for f in facts if f.id == wanted})
        erased = [s for s in scopes if await self.eraser.forget_fact(PersonKey.parse(s), wanted)]
        if not erased:
            return None
        places = [scope_name(s) for s in erased if s != person.id]
        return f" (remembered in {' and '.join(places)})" if places else ""

    async def _forget_all(self, person: PersonKey, req: CommandRequest) -> CommandReply:
        """In a DM scope: every scope of the platform (what the DM shows); elsewhere: here."""
        word = team_word(person.platform)
        if spans_platform(person):
            done = await self.eraser.forget_on_platform(person, requested_by=req.platform)
            names = [scope_name(s.id) for s in done.scopes]
            held = (
                f" (I held something in {', '.join(names[:MAX_NAMED])}"
                + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")
                + ")"
                if names
                else ""
            )
            ids = ", ".join(f"`{r.id}`" for r in done.receipts[:MAX_NAMED])
            more = (
                f" and {len(done.receipts) - MAX_NAMED} more"
                if len(done.receipts) > MAX_NAMED
                else ""
            )
            return CommandReply(
                f"Done. I erased everything I held about you on {everywhere(person)}{held}: "
                f"{_erased(done.counts)} Receipt(s): {ids}{more} (one per place; each keeps "
                "the date and its counts, no content)."
            )
        receipt = await self.eraser.forget_all(person, requested_by=req.platform)
        other = (
            f" Other {word}s and your DMs keep theirs: `/memory forget all` in a DM with me "
            "erases everything."
            if has_dm_scope(person.platform)
            else ""
        )
        return CommandReply(
            f"Done. I erased everything I held about you in this {word}: "
            f"{_erased(counts_of(receipt))} Receipt: `{receipt.id}` (it keeps the date and "
            f"these counts, no content).{other}"
        )

    async def forget_all(self, person: PersonKey, *, requested_by: str = "") -> ErasureCounts:
        """Erase everything about the person in every tier (see `bot.memory.erasure`)."""
        receipt = await self.eraser.forget_all(person, requested_by=requested_by)
        return counts_of(receipt)

    # /tools ----------------------------------------------------------------------------------

    def is_admin(self, req: CommandRequest) -> bool:
        return self.is_admin_user(req.user, is_platform_admin=req.is_platform_admin)

    def is_admin_user(self, user: str, *, is_platform_admin: bool) -> bool:
        """The one admin rule: the platform's own flag (checked by the adapter) or BOT_ADMINS."""
        return is_platform_admin or user in self.admins

    async def _tools(self, req: CommandRequest, text: str) -> CommandReply:
        team = TeamKey(req.platform, req.team)
        try:
            words = shlex.split(text)
        except ValueError:
            return CommandReply(TOOLS_HELP, ok=False)
        if not words or words == ["list"]:
            return await self._list_tools(team)
        if words == ["audit"]:
            return await self._audit(req, team)
        if words[0] in ("connections", "disconnect") and self.connections is not None:
            person = PersonKey(req.platform, req.team, req.user)
            if words == ["connections"]:
                return await self.connections.list(person)
            if words[0] == "disconnect" and len(words) == 2:
                return await self.connections.disconnect(person, words[1])
            return CommandReply(TOOLS_HELP, ok=False)
        action, args = words[0], words[1:]
        if action not in ("install", "remove") or not args:
            return CommandReply(TOOLS_HELP, ok=False)
        if not self.is_admin(req):
            return CommandReply(
                "Sorry, only workspace admins can install or remove tool packs. "
                "Ask an admin, or see what's installed with `/tools`.",
                ok=False,
            )
        pack = args[0]
        if action == "remove":
            return await self._remove_pack(team, pack, req.user)
        if pack not in set(self.catalog.names()):
            available = ", ".join(sorted(self.catalog.names()))
            return CommandReply(
                f"There is no tool pack {echo_word(pack)}. Available: {available}.", ok=False
            )
        try:
            raw = parse_settings(args[1:])  # never echoes a word: it may be a bare token
        except PackConfigError as exc:
            return CommandReply(f"Can't install `{pack}`: {exc}. {TOOLS_HELP}", ok=False)
        force = raw.pop("force", "").strip().lower() in ("yes", "true", "1")
        try:
            config = self.catalog.validate(pack, raw)
        except ValueError as exc:
            return CommandReply(f"Can't install `{pack}`: {exc}", ok=False)
        return await self._install_pack(req, team, pack, config, force=force)

    async def _install_pack(
        self, req: CommandRequest, team: TeamKey, pack: str, config: dict[str, str], *, force: bool
    ) -> CommandReply:
        name = self.catalog.install_name(pack, config)
        if name != pack and name in set(self.catalog.names()):
            return CommandReply(
                f"Can't install `{pack}` as `{name}`: that is the name of a tool pack. "
                "Pick another name.",
                ok=False,
            )
        existing = {i.pack: i for i in await self.store.installed(TeamKey(req.platform, req.team))}
        other = existing.get(name)
        if other is not None and other.config.get("pack", other.pack) != pack:
            return CommandReply(
                f"Can't install `{pack}` as `{name}`: `{name}` is already installed here. "
                f"Remove it first with `/tools remove {name}`, or pick another name.",
                ok=False,
            )
        summary = ""
        if self.catalog.probe is not None:
            try:
                summary = await self.catalog.probe(team, pack, name, config)
            except PackProbeError as exc:
                if not (force and exc.forceable):
                    hint = " Check the URL and token, or add `force=yes` to install it anyway."
                    return CommandReply(
                        f"Can't install `{name}`: {exc}." + (hint if exc.forceable else ""),
                        ok=False,
                    )
                summary = f"installed anyway, but {exc}"
        stored = dict(config) if name == pack else {**config, "pack": pack}
        await self.store.install(team, name, self._sealed(pack, stored), by=req.user)
        if self.catalog.on_installed is not None:
            await self.catalog.on_installed(team, name, pack, req.user)
        shown = self.catalog.redact(pack, config)
        settings = ", ".join(f"{k}={v}" for k, v in sorted(shown.items()))
        label = f"`{pack}` tool pack" if name == pack else f"`{pack}` tool pack as `{name}`"
        return CommandReply(
            f"Installed the {label}"
            + (f" ({settings})" if settings else "")
            + (f": {summary}." if summary else ".")
        )

    async def _remove_pack(self, team: TeamKey, name: str, by: str) -> CommandReply:
        kinds = {i.pack: i.config.get("pack", i.pack) for i in await self.store.installed(team)}
        if await self.store.remove(team, name):
            if self.catalog.on_removed is not None:
                await self.catalog.on_removed(team, name, kinds.get(name, name), by)
            return CommandReply(f"Removed the `{name}` tool pack.")
        return CommandReply(f"The `{name}` tool pack isn't installed here.", ok=False)

    def _sealed(self, pack: str, config: dict[str, str]) -> dict[str, str]:
        if self.box is None:
            return config
        secret = self.catalog.secret_keys(pack)
        return {k: self.box.seal(v) if k in secret else v for k, v in config.items()}

    async def _audit(self, req: CommandRequest, team: TeamKey) -> CommandReply:
        """`/tools audit` (admins): tool approvals and decisions, installs, removals and
        breaker openings, oldest first."""
        if not self.is_admin(req):
            return CommandReply("Sorry, only admins can see the tools audit.", ok=False)
        if self.audit is None:
            return CommandReply("This bot keeps no tools audit.")
        lines = await self.audit(team)
        if not lines:
            return CommandReply("Nothing in the tools audit yet.")
        return CommandReply("Tools audit, oldest first:\n" + "\n".join(f"• {x}" for x in lines))

    async def _list_tools(self, team: TeamKey) -> CommandReply:
        installed = await self.store.installed(team)
        available = sorted(self.catalog.names())
        if not installed:
            return CommandReply(
                "No tool packs are installed here yet. Available: "
                + ", ".join(f"`{n}`" for n in available)
                + ". An admin can run `/tools install <pack>`."
            )
        statuses = [""] * len(installed)
        if self.catalog.status is not None:
            statuses = list(
                await asyncio.gather(*(self.catalog.status(team, i) for i in installed))
            )
        lines = []
        for install, status in zip(installed, statuses, strict=True):
            kind = install.config.get("pack", install.pack)
            label = f"`{install.pack}`" + (f" ({kind})" if kind != install.pack else "")
            line = f"• {label} — {self.catalog.describe(kind)}"
            lines.append(line + (f" — _{status}_" if status else ""))
        if self.catalog.history is not None:
            kinds = {i.config.get("pack", i.pack) for i in installed}
            recent = await self.catalog.history(team, kinds)
            if recent:
                lines.append("Recent changes:")
                lines.extend(f"• {r}" for r in recent)
        return CommandReply("Tool packs installed here:\n" + "\n".join(lines))
