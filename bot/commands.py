"""Slash-command logic, platform-neutral: `/memory` and `/tools`.

Adapters parse nothing beyond the command name and its text; the wording of every answer lives
here so Slack, Discord and the console say the same thing. All answers are meant to be shown
only to the person who ran the command.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager

from bot.core import CommandReply, CommandRequest
from bot.keys import PersonKey, SessionKey, TeamKey
from bot.memory.erasure import Eraser, ErasureCounts, counts_of
from bot.memory.show import render_facts
from bot.secrets import SecretBox
from bot.stores.protocols import Store
from tools.packs import PackConfigError, parse_settings

log = logging.getLogger(__name__)

MEMORY_HELP = (
    "Usage: `/memory` or `/memory show` lists what I remember about you; "
    "`/memory forget <id>` erases one fact; "
    "`/memory forget all` erases everything I hold about you."
)
TOOLS_HELP = (
    "Usage: `/tools` lists the tool packs installed here; admins can run "
    "`/tools install <pack> [key=value ...]` and `/tools remove <pack>`."
)


# Bounds checked before any parsing (shlex is pure Python; a member's 1 MB word must cost
# nothing). No command needs more: pack settings are a few URLs and tokens.
MAX_COMMAND_CHARS = 2000
MAX_WORDS = 32
MAX_SHOWN = 40  # characters of a person's own word echoed back in an answer


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
    ) -> None:
        self.names = names
        self.describe = describe
        self.validate = validate  # raises ValueError with a user-facing message
        self.redact = redact
        self.secret_keys = secret_keys  # settings sealed at rest when a SecretBox is given


class CommandHandler:
    def __init__(
        self,
        store: Store,
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
                return await self._memory(req, words)
            if req.command.lstrip("/") == "tools":
                return await self._tools(req, req.text.strip())
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
                receipt = await self.eraser.forget_all(person, requested_by=req.platform)
                counts = counts_of(receipt)
                return CommandReply(
                    "Done. I erased everything I held about you: "
                    f"{counts.facts} fact(s) (every version), {counts.messages} message(s) from "
                    f"your conversations (yours and my answers to them), {counts.tool_calls} "
                    f"tool call record(s), {counts.memories} long-term memory(ies), and "
                    f"{counts.summaries} conversation summary(ies) that drew on them. "
                    f"Receipt: `{receipt.id}` (it keeps the date and these counts, no content)."
                )
            fact_id = words[1].strip("`")
            if len(fact_id) <= MAX_SHOWN and await self.store.delete_fact(person, fact_id):
                await self.store.compact()
                return CommandReply(f"Forgotten: fact {echo_word(fact_id)} is erased.")
            return CommandReply(
                f"I have no fact {echo_word(fact_id)} about you. `/memory show` lists the ids.",
                ok=False,
            )
        return CommandReply(MEMORY_HELP, ok=False)

    async def _show(self, person: PersonKey, *, history: bool = False) -> CommandReply:
        facts = await self.store.list_facts(person, history=history)
        return CommandReply(render_facts(facts, history=history))

    async def forget_all(self, person: PersonKey, *, requested_by: str = "") -> ErasureCounts:
        """Erase everything about the person in every tier (see `bot.memory.erasure`)."""
        receipt = await self.eraser.forget_all(person, requested_by=requested_by)
        return counts_of(receipt)

    # /tools ----------------------------------------------------------------------------------

    def is_admin(self, req: CommandRequest) -> bool:
        return req.is_platform_admin or req.user in self.admins

    async def _tools(self, req: CommandRequest, text: str) -> CommandReply:
        team = TeamKey(req.platform, req.team)
        try:
            words = shlex.split(text)
        except ValueError:
            return CommandReply(TOOLS_HELP, ok=False)
        if not words or words == ["list"]:
            return await self._list_tools(team)
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
        if pack not in set(self.catalog.names()):
            available = ", ".join(sorted(self.catalog.names()))
            return CommandReply(
                f"There is no tool pack {echo_word(pack)}. Available: {available}.", ok=False
            )
        if action == "remove":
            if await self.store.remove(team, pack):
                return CommandReply(f"Removed the `{pack}` tool pack.")
            return CommandReply(f"The `{pack}` tool pack isn't installed here.", ok=False)
        try:
            raw = parse_settings(args[1:])  # never echoes a word: it may be a bare token
        except PackConfigError as exc:
            return CommandReply(f"Can't install `{pack}`: {exc}. {TOOLS_HELP}", ok=False)
        try:
            config = self.catalog.validate(pack, raw)
        except ValueError as exc:
            return CommandReply(f"Can't install `{pack}`: {exc}", ok=False)
        await self.store.install(team, pack, self._sealed(pack, config), by=req.user)
        shown = self.catalog.redact(pack, config)
        settings = ", ".join(f"{k}={v}" for k, v in sorted(shown.items()))
        return CommandReply(
            f"Installed the `{pack}` tool pack" + (f" ({settings})." if settings else ".")
        )

    def _sealed(self, pack: str, config: dict[str, str]) -> dict[str, str]:
        if self.box is None:
            return config
        secret = self.catalog.secret_keys(pack)
        return {k: self.box.seal(v) if k in secret else v for k, v in config.items()}

    async def _list_tools(self, team: TeamKey) -> CommandReply:
        installed = await self.store.installed(team)
        available = sorted(self.catalog.names())
        if not installed:
            return CommandReply(
                "No tool packs are installed here yet. Available: "
                + ", ".join(f"`{n}`" for n in available)
                + ". An admin can run `/tools install <pack>`."
            )
        lines = [f"• `{i.pack}` — {self.catalog.describe(i.pack)}" for i in installed]
        return CommandReply("Tool packs installed here:\n" + "\n".join(lines))
