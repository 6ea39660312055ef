"""The tools offered in one turn: the built-in `remember` plus the packs installed in the team.

Built per turn from the team's install records (one indexed query) so an install or removal in
any process takes effect on the next message; a pack whose stored settings no longer validate, or
whose sealed secrets cannot be opened (BOT_SECRET_KEY unset or changed), is skipped with a warning
instead of breaking the turn.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from bot.commands import PackCatalog
from bot.config import Settings
from bot.keys import SessionKey, TeamKey
from bot.memory.reconcile import Reconciler
from bot.memory.remember import remember
from bot.secrets import SecretBox, SecretsUnavailable, open_value
from bot.stores.protocols import Cache, Store
from bot.stores.records import ToolCallLog
from tools.executor import ExecutorConfig, ToolExecutor
from tools.packs import PACKS, PackConfigError, PackEnv
from tools.registry import ToolRegistry
from tools.types import ToolCallRecord, ToolCallRequest, ToolContext

log = logging.getLogger(__name__)


class Toolbox:
    """A registry plus the shared executor; what the turn loop calls."""

    def __init__(self, registry: ToolRegistry, executor: ToolExecutor) -> None:
        self.registry = registry
        self.executor = executor

    def schemas(self) -> list[dict[str, Any]]:
        return self.registry.openai_schemas()

    def call_allowance(self, prior_calls: int) -> int:
        """Calls of the next model response that will run (see `ExecutorConfig.allowance`)."""
        return self.executor.config.allowance(prior_calls)

    async def run(
        self, calls: list[ToolCallRequest], ctx: ToolContext, *, prior_calls: int = 0
    ) -> list[ToolCallRecord]:
        return await self.executor.execute(calls, ctx, self.registry, prior_calls=prior_calls)


class ToolboxFactory:
    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        cache: Cache,
        config: ExecutorConfig | None = None,
        reconciler: Reconciler | None = None,
    ) -> None:
        self.store = store
        self.box = SecretBox.from_settings(settings)  # None: secrets are stored in plain text
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=5.0))
        self.env = PackEnv(
            http=self.http,
            weather_api_url=settings.weather_api_url,
            geocoding_api_url=settings.geocoding_api_url,
        )
        config = config or ExecutorConfig(
            max_calls_per_round=settings.bot_max_tool_calls_per_round,
            max_calls_per_turn=settings.bot_max_tool_calls,
        )
        self.executor = ToolExecutor(config, idempotency=cache, on_record=self._record)
        self.reconciler = reconciler or Reconciler(store)  # rules only without a model
        self.base = ToolRegistry([remember.bind(reconciler=self.reconciler)])

    async def for_team(self, team: TeamKey) -> Toolbox:
        tools = []
        for install in await self.store.installed(team):
            pack = PACKS.get(install.pack)
            if pack is None:
                continue
            try:
                config = {k: open_value(self.box, v) for k, v in install.config.items()}
            except SecretsUnavailable as exc:
                log.warning(
                    "pack_secret_unavailable",
                    extra={"fields": {"team": team.id, "pack": install.pack, "error": str(exc)}},
                )
                continue
            try:
                tools.extend(pack.build(config, self.env))
            except PackConfigError as exc:
                log.warning(
                    "pack_config_invalid",
                    extra={"fields": {"team": team.id, "pack": install.pack, "error": str(exc)}},
                )
        return Toolbox(self.base | tools if tools else self.base, self.executor)

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
        await self.http.aclose()


def _validate(pack: str, raw: dict[str, str]) -> dict[str, str]:
    p = PACKS[pack]
    try:
        return p.dump_config(p.load_config(raw))
    except PackConfigError as exc:
        raise ValueError(str(exc)) from None


def pack_catalog() -> PackCatalog:
    return PackCatalog(
        names=lambda: PACKS.keys(),
        describe=lambda name: PACKS[name].description if name in PACKS else "(unknown pack)",
        validate=_validate,
        redact=lambda name, cfg: PACKS[name].redacted(cfg) if name in PACKS else {},
        secret_keys=lambda name: PACKS[name].secret_keys if name in PACKS else frozenset(),
    )
