"""The tools offered in one turn: the built-in `remember` plus the packs installed in the team.

Built per turn from the team's install records (one indexed query) so an install or removal in
any process takes effect on the next message; a pack whose stored settings no longer validate, or
whose sealed secrets cannot be opened (BOT_SECRET_KEY unset or changed), is skipped with a warning
instead of breaking the turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx

from bot.commands import PackCatalog, PackProbeError
from bot.config import Settings
from bot.connections.base import NOT_OFFERED, NeedsSignIn, Owner
from bot.connections.lifecycle import remove_install
from bot.keys import PersonKey, SessionKey, TeamKey
from bot.memory.reconcile import Reconciler
from bot.memory.remember import remember
from bot.metrics import TOOL_BREAKER_OPENS, TOOL_BREAKER_STATE
from bot.policy import DEFAULT_POLICY, PlacePolicy
from bot.secrets import SecretBox, SecretsUnavailable, open_value
from bot.stores.connections import ConnectionStore, connections_of
from bot.stores.protocols import Cache, JsonKV, ToolboxStore
from bot.stores.records import ToolCallLog, ToolInstall
from bot.tool_audit import ALL_TEAMS, ToolAudit
from tools.breaker import BreakerBoard, BreakerState
from tools.declare import Tool
from tools.executor import ExecutorConfig, ToolExecutor
from tools.mcp.connection import McpPool
from tools.netguard import BlockedHost, event_hooks
from tools.packs import PACKS, PackConfigError, PackEnv, PackUnavailable
from tools.registry import ToolRegistry
from tools.selection import ToolSelector
from tools.types import ToolCallRecord, ToolCallRequest, ToolContext

if TYPE_CHECKING:
    from bot.connections.chat import ChatSignIn
    from bot.connections.signin import ServerAuth

log = logging.getLogger(__name__)

BUILD_TIMEOUT = 8.0  # most a turn waits for one install's tool list (an MCP server's)


class Toolbox:
    """A registry plus the shared executor; what the turn loop calls.

    `notes` tell the model which installed tools are missing this turn (server down), so it can
    say so instead of guessing. With many tools, `prepare` picks the ones to offer for the
    message (`tools.selection`); a tool the model calls that was installed but not offered is
    run all the same (its arguments are validated as always) and offered from the next round.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        executor: ToolExecutor,
        notes: list[str] | None = None,
        *,
        selector: ToolSelector | None = None,
        always: frozenset[str] = frozenset(),
        count_tokens: Callable[[list[dict[str, Any]]], int] | None = None,
        budget: int = 0,
    ) -> None:
        self.registry = registry
        self.executor = executor
        self._notes = notes or []
        self._selector = selector
        self._always = always
        self._count = count_tokens
        self._budget = budget
        self.offered: set[str] | None = None  # None: everything installed is offered

    async def prepare(self, text: str, earlier: list[str], used: set[str]) -> None:
        if self._selector is None or len(self.registry) <= 1:
            return
        schemas = self.registry.openai_schemas()
        tokens = self._count(schemas) if self._count is not None else 0
        if not self._selector.needed(len(schemas), tokens, self._budget):
            return
        keep = self._always | (used & set(self.registry.names()))
        self.offered = set(await self._selector.choose(schemas, text, earlier, always=keep))

    def schemas(self) -> list[dict[str, Any]]:
        schemas = self.registry.openai_schemas()
        if self.offered is None:
            return schemas
        return [s for s in schemas if s["function"]["name"] in self.offered]

    def notes(self) -> list[str]:
        return list(self._notes)

    def call_allowance(self, prior_calls: int) -> int:
        """Calls of the next model response that will run (see `ExecutorConfig.allowance`)."""
        return self.executor.config.allowance(prior_calls)

    async def run(
        self, calls: list[ToolCallRequest], ctx: ToolContext, *, prior_calls: int = 0
    ) -> list[ToolCallRecord]:
        if self.offered is not None:
            self.offered |= {c.name for c in calls if c.name in self.registry}
        return await self.executor.execute(calls, ctx, self.registry, prior_calls=prior_calls)


class ToolboxFactory:
    def __init__(
        self,
        settings: Settings,
        *,
        store: ToolboxStore,
        cache: Cache,
        config: ExecutorConfig | None = None,
        reconciler: Reconciler,
        write_marks: JsonKV | None = None,
    ) -> None:
        self.store = store
        self.box = SecretBox.from_settings(settings)  # None: secrets are stored in plain text
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=5.0))
        self.host_policy = settings.host_policy()
        # URLs typed by a team's admin go through this one: only hosts the operator allows.
        self.tool_http = httpx.AsyncClient(
            timeout=httpx.Timeout(10.0, connect=5.0), event_hooks=event_hooks(self.host_policy)
        )
        self.mcp = McpPool(self.host_policy)
        # People's own connections to `auth=user` servers (bot.connections), on the same store.
        self.connections: ConnectionStore | None = connections_of(store)
        self.chat_signin: ChatSignIn | None = None
        if (
            self.connections is not None
            and self.box is not None
            and settings.bot_public_url is not None
        ):
            self.chat_signin = _chat_signin(
                self.connections, self.box, self.mcp, settings.bot_public_url
            )
        self.env = PackEnv(
            http=self.http,
            weather_api_url=settings.weather_api_url,
            geocoding_api_url=settings.geocoding_api_url,
            tool_http=self.tool_http,
            mcp=self.mcp,
        )
        self.audit = ToolAudit(cache, durable=write_marks)  # durable on the embedded store
        self._kinds: dict[str, str] = {}  # breaker provider -> pack type, for the audit
        self._audit_tasks: set[asyncio.Task[None]] = set()
        self.breakers = BreakerBoard()
        self.breakers.add_listener(self._breaker_changed)
        config = config or ExecutorConfig(
            max_calls_per_round=settings.bot_max_tool_calls_per_round,
            max_calls_per_turn=settings.bot_max_tool_calls,
        )
        self.executor = ToolExecutor(
            config,
            idempotency=write_marks or cache,  # durable marks when a restart re-runs turns
            on_record=self._record,
            breakers=self.breakers,
        )
        self.reconciler = reconciler  # `remember` writes facts through it (the app's)
        self.base = ToolRegistry([remember.bind(reconciler=self.reconciler)])
        self.build_timeout = BUILD_TIMEOUT
        # Many tools: offer the relevant ones per turn. The embedder (episodic memory's, when
        # the app has one) is optional; set `selector.embed` to use it.
        self.selector = ToolSelector()
        self.count_tokens: Callable[[list[dict[str, Any]]], int] | None = None
        self.budget = settings.bot_context_tokens

    async def for_team(
        self,
        team: TeamKey,
        policy: PlacePolicy = DEFAULT_POLICY,
        person: PersonKey | None = None,
    ) -> Toolbox:
        """The team's tools that `policy` allows here: packs outside its `tools` setting are
        not built at all (never offered; a call to one is an unknown tool), and `remember` is
        left out where memory is off. `auth=user` servers are built for `person` only (the
        speaker): their own session and token, or a tool to connect."""
        base = self.base if policy.memory else ToolRegistry([])
        installs = [i for i in await self.store.installed(team) if policy.allows_pack(i.pack)]
        if not installs:
            return self._toolbox(base, [])
        built = await asyncio.gather(*(self._build(team, i, person) for i in installs))
        tools: list[Tool] = []
        taken = set(self.base.names())
        notes: list[str] = []
        for install, (pack_tools, note) in zip(installs, built, strict=True):
            if note:
                notes.append(note)
            for t in pack_tools:
                if t.name in taken:  # e.g. an MCP pack whose namespaced name hits a built-in
                    log.warning(
                        "tool_name_clash",
                        extra={"fields": {"team": team.id, "pack": install.pack, "tool": t.name}},
                    )
                    continue
                taken.add(t.name)
                tools.append(t)
        return self._toolbox(base | tools if tools else base, notes)

    def _toolbox(self, registry: ToolRegistry, notes: list[str]) -> Toolbox:
        return Toolbox(
            registry,
            self.executor,
            notes,
            selector=self.selector,
            always=frozenset(self.base.names()),
            count_tokens=self.count_tokens,
            budget=self.budget,
        )

    async def _build(
        self, team: TeamKey, install: ToolInstall, person: PersonKey | None = None
    ) -> tuple[list[Tool], str]:
        """One install's tools, or none and a note for the model when its service is down."""
        kind = install.config.get("pack", install.pack)
        pack = PACKS.get(kind)
        fields = {"team": team.id, "pack": install.pack}
        if pack is None:
            return [], ""
        try:
            config = {k: open_value(self.box, v) for k, v in install.config.items() if k != "pack"}
        except SecretsUnavailable as exc:
            log.warning("pack_secret_unavailable", extra={"fields": {**fields, "error": str(exc)}})
            return [], ""
        provider = pack.name if pack.breaker_scope == "pack" else self.provider(team, install.pack)
        try:
            async with asyncio.timeout(self.build_timeout):
                if pack.name == "mcp" and config.get("auth") == "user":
                    built, note = await self._personal(team, install.pack, config, person)
                    if note:
                        return [], note
                else:
                    built = await pack.build_async(
                        config, self.env, self.provider(team, install.pack)
                    )
        except PackConfigError as exc:
            log.warning("pack_config_invalid", extra={"fields": {**fields, "error": str(exc)}})
            return [], ""
        except (PackUnavailable, TimeoutError) as exc:
            why = str(exc) if isinstance(exc, PackUnavailable) else "it did not answer in time"
            conn = self.mcp.get(self.provider(team, install.pack))
            if isinstance(exc, TimeoutError) and conn is not None:
                conn.mark_down("the server did not answer in time")  # not again next turn
            log.warning("pack_unavailable", extra={"fields": {**fields, "reason": why}})
            return [], (
                f"The tools of the `{install.pack}` pack are unavailable right now ({why}). "
                "If the user needs them, say so instead of guessing."
            )
        self._kinds[provider] = pack.name
        return [t.with_provider(provider) for t in built], ""

    async def _personal(
        self, team: TeamKey, name: str, config: dict[str, str], person: PersonKey | None
    ) -> tuple[list[Tool], str]:
        """An `auth=user` server for the speaker: their tools, or the tool that connects it."""
        if person is None:  # not a person's turn (a status check): nothing to build
            return [], ""
        chat = self.chat_signin
        if chat is None:
            return [], NOT_OFFERED.format(name=name)
        server = _server_auth(config)
        install = self.provider(team, name)
        owner = Owner(team.id, person.id, name)
        allow = PACKS["mcp"].load_config(config).allowed  # type: ignore[attr-defined]
        try:
            return await chat.people.tools(owner, install, server, allow), ""
        except NeedsSignIn:
            return [chat.connect_tool(team.id, install, name, server)], ""

    def catalog(self) -> PackCatalog:
        """The command layer's view of the packs, with install-time checks of this bot."""
        return PackCatalog(
            names=lambda: PACKS.keys(),
            describe=lambda name: PACKS[name].description if name in PACKS else "(unknown pack)",
            validate=_validate,
            redact=lambda name, cfg: PACKS[name].redacted(cfg) if name in PACKS else {},
            secret_keys=lambda name: PACKS[name].secret_keys if name in PACKS else frozenset(),
            install_name=lambda name, cfg: PACKS[name].install_name(cfg) if name in PACKS else name,
            probe=self._probe,
            status=self._status,
            on_removed=self._removed,
            on_installed=self._installed,
            history=self._history,
        )

    async def _probe(self, team: TeamKey, pack: str, name: str, config: dict[str, str]) -> str:
        """Before an install is stored: is its URL allowed, and does its server answer?"""
        p = PACKS[pack]
        url = config.get("url")
        if url:
            try:
                await self.host_policy.check_url(url)
            except BlockedHost as exc:
                raise PackProbeError(str(exc), forceable=False) from None
        if p.loader is None:
            return ""
        if pack == "mcp" and config.get("auth") == "user":
            if self.chat_signin is None:
                raise PackProbeError(
                    "auth=user servers need BOT_PUBLIC_URL and BOT_SECRET_KEY set by the "
                    "operator (people sign in through the bot's HTTP server)",
                    forceable=False,
                )
            return "each person connects it with their own account on first use"
        try:
            async with asyncio.timeout(self.build_timeout):
                tools = await p.build_async(config, self.env, self.provider(team, name))
        except PackUnavailable as exc:
            raise PackProbeError(str(exc), forceable=True) from None
        except TimeoutError:
            raise PackProbeError("the server did not answer in time", forceable=True) from None
        names = sorted(t.name for t in tools)
        shown = ", ".join(f"`{n}`" for n in names[:15]) + (" …" if len(names) > 15 else "")
        return f"{len(names)} tool(s): {shown}" if names else "the server lists no tools"

    async def _status(self, team: TeamKey, install: ToolInstall) -> str:
        """Health of one install for `/tools`: its server (checked now, briefly) and breaker."""
        pack = PACKS.get(install.config.get("pack", install.pack))
        provider = self.provider(team, install.pack)
        parts: list[str] = []
        if install.config.get("auth") == "user":
            parts.append("each person connects their own account")
        elif pack is not None and pack.loader is not None:
            _tools, note = await self._build(team, install)
            conn = self.mcp.get(provider)
            if note or conn is None or conn.health != "ok":
                detail = conn.detail if conn is not None and conn.detail else "not reachable"
                parts.append(f"unhealthy: {detail}")
            else:
                parts.append("healthy")
        key = pack.name if pack is not None and pack.breaker_scope == "pack" else provider
        state = self.breakers.state(key)
        if state != "closed":
            brk = self.breakers.get(key)
            wait = f", retry in {round(brk.retry_in())}s" if state == "open" else ""
            parts.append(f"breaker {state.replace('_', '-')} after repeated failures{wait}")
        return "; ".join(parts)

    async def _removed(self, team: TeamKey, name: str, kind: str, by: str) -> None:
        provider = self.provider(team, name)
        await self.mcp.forget(provider)
        if self.connections is not None:  # everyone's own connections to it go too
            await remove_install(self.connections, self.mcp, team.id, name, provider)
        self.breakers.forget(provider)
        await self.audit.record(team.id, "removed", name, kind=kind, by=by)

    async def drain_audit(self) -> None:
        """Wait for audit entries being written (tests, shutdown)."""
        if self._audit_tasks:
            await asyncio.gather(*self._audit_tasks, return_exceptions=True)

    async def _installed(self, team: TeamKey, name: str, kind: str, by: str) -> None:
        await self.audit.record(team.id, "installed", name, kind=kind, by=by)

    async def _history(self, team: TeamKey, kinds: set[str]) -> list[str]:
        return [e.line() for e in await self.audit.recent(team.id, kinds)]

    def _breaker_changed(self, provider: str, old: BreakerState, new: BreakerState) -> None:
        _breaker_metrics(provider, old, new)
        if new != "open" or old == "half_open":  # record the first opening, not each re-open
            return
        name, _, team = provider.partition("@")
        kind = self._kinds.get(provider, name)
        coro = self.audit.record(team or ALL_TEAMS, "breaker_opened", name, kind=kind)
        task = asyncio.get_running_loop().create_task(coro)
        self._audit_tasks.add(task)
        task.add_done_callback(self._audit_tasks.discard)

    @staticmethod
    def provider(team: TeamKey, install_name: str) -> str:
        """The circuit-breaker (and MCP session) key of one install."""
        return f"{install_name}@{team.id}"

    async def _record(self, record: ToolCallRecord, ctx: ToolContext) -> None:
        try:
            session = SessionKey.parse(ctx.session_id)
        except ValueError:  # not a bot session (a bench or a bare executor): nothing to log
            return
        try:
            await self.store.log_call(
                session,
                ToolCallLog(
                    call_id=record.call_id,
                    session=session.id,
                    speaker=ctx.speaker_id,
                    tool=record.name,
                    arguments=record.arguments,
                    outcome=record.outcome,
                    duration_ms=record.duration_ms,
                    result_size=record.result_size,
                ),
            )
        except Exception:  # tracing must never break a turn
            log.warning("tool_call_log_failed", extra={"fields": {"call_id": record.call_id}})

    async def close(self) -> None:
        await self.drain_audit()
        await self.mcp.aclose()
        await self.http.aclose()
        await self.tool_http.aclose()


_STATE_VALUE = {"closed": 0, "half_open": 1, "open": 2}


def _breaker_metrics(provider: str, old: BreakerState, new: BreakerState) -> None:
    TOOL_BREAKER_STATE.labels(provider).set(_STATE_VALUE[new])
    if new == "open":
        TOOL_BREAKER_OPENS.labels(provider).inc()
    level = logging.WARNING if new == "open" else logging.INFO
    log.log(level, "tool_breaker", extra={"fields": {"provider": provider, "from": old, "to": new}})


def _validate(pack: str, raw: dict[str, str]) -> dict[str, str]:
    p = PACKS[pack]
    try:
        return p.dump_config(p.load_config(raw))
    except PackConfigError as exc:
        raise ValueError(str(exc)) from None


def _chat_signin(
    store: ConnectionStore, box: SecretBox, pool: McpPool, public_url: str
) -> ChatSignIn:
    """Per-person sign-ins (imports the `mcp` SDK's auth: only when BOT_PUBLIC_URL is set)."""
    from bot.connections.chat import ChatSignIn
    from bot.connections.person_tools import PersonTools
    from bot.connections.signin import SignIns

    return ChatSignIn(
        SignIns(store, box, public_url, policy=pool.policy),
        PersonTools(store, box, pool, public_url),
    )


def _server_auth(config: dict[str, str]) -> ServerAuth:
    from bot.connections.signin import ServerAuth

    return ServerAuth(
        url=config["url"],
        client_id=config.get("client_id") or None,
        client_secret=config.get("client_secret") or None,
        scopes=config.get("scopes") or None,
    )
