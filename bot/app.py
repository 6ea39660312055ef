"""BotApp: the core wired together, implementing `bot.core.BotCore` for every adapter.

It owns the per-session ordering (one turn at a time per session, in arrival order, across
processes through the cache's lock), the background summarisation tasks (never on the reply path)
and the per-team toolbox (the built-in `remember` tool plus the packs installed in that team).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from bot import tracing
from bot.activity import TurnActivity
from bot.approvals.desk import Answer, ApprovalDesk, Choice, Resume
from bot.approvals.render import audit_line
from bot.bot_pairs import BotPairBudget
from bot.commands import CommandHandler
from bot.config import Settings
from bot.config_command import ConfigCommands
from bot.connections.commands import ConnectionCommands
from bot.connections.lifecycle import ConnectionsTier
from bot.core import AdminNotice, CommandReply, CommandRequest, MessageChange
from bot.embeddings.endpoint import EndpointEmbedder
from bot.feedback import NO_FEEDBACK, FeedbackAnswer, FeedbackClick, FeedbackDesk
from bot.files.intake import FileLimits, too_many_files_reply
from bot.files.vision import Vision
from bot.inbox import InboxWorker, ServesInbox
from bot.keys import PersonKey, SessionKey, TeamKey
from bot.memory.context import ContextBuilder
from bot.memory.deletion import PlatformChanges
from bot.memory.episodic.service import RECALL_SHARE, EpisodicMemory, open_episodic
from bot.memory.heard import Hearing
from bot.memory.reconcile import Reconciler
from bot.memory.session import CompressionPolicy, SessionMemory
from bot.memory.structured import JsonAsker
from bot.messages import (
    MAX_REF_IDS,
    HeardMessage,
    IncomingMessage,
    MessageRef,
    ReplySink,
    drop_quietly,
)
from bot.metered import MeteredModel, record_turn
from bot.model import ModelClient, ModelError
from bot.place_settings_cache import CachedPlaceSettings
from bot.policy import (
    BUDGET_KEYS,
    DEFAULT_POLICY,
    NoPlaceSettings,
    PlacePolicy,
    PolicyResolver,
)
from bot.ratelimit import DROP, Rate, TurnLimiter
from bot.settings_overview import SettingsOverview, team_overview
from bot.stores.approvals import ApprovalPeople, approvals_of
from bot.stores.factory import open_cache, open_durable_kv, open_inbox, open_store
from bot.stores.feedback import FeedbackVoters, feedback_of
from bot.stores.heard import open_heard_store
from bot.stores.inbox import Inbox
from bot.stores.inbox_sqlite import SqliteInbox
from bot.stores.place_settings import (
    FORGOTTEN,
    TEAM_WIDE,
    SettingsAuthors,
    place_settings_of,
)
from bot.stores.protocols import Cache, JsonKV, LockTimeout, Store, StoreUnavailable
from bot.stores.usage import UsagePeople, usage_of
from bot.text import clean_message, clean_request
from bot.tokens import TokenCounter
from bot.toolbox import ToolboxFactory
from bot.turn import STORE_DOWN_REPLY, Model, TurnResult, TurnRunner
from bot.usage.bill import Bill, billed_to, team_bill
from bot.usage.command import UsageCommands
from bot.usage.gate import BudgetGate, Hold
from bot.usage.meter import UsageMeter
from bot.usage.prices import Prices
from tools.keylocks import KeyLocks

if TYPE_CHECKING:
    from bot.memory.consolidation import MemorySink
    from bot.memory.index_tiers import IndexMemories
    from bot.memory.nightly import NightlySchedule
    from bot.stores.memory_index import MemoryIndex

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 20_000
MAX_ALERTED = 5  # admins told of one budget alert
HISTORY_LOOKED_AT = 50  # settings changes read to find who set a budget
BUSY_REPLY = "I'm still working on an earlier message here — please try again in a moment."
EMPTY_MESSAGE_REPLY = "Did you mean to say something? I got an empty message."


AUDIT_SHOWN = 30  # entries `/tools audit` lists


class StartupError(Exception):
    """A store or cache could not be opened; the message is one line for the operator."""


@dataclass
class _Background:
    tasks: set[asyncio.Task[None]]
    running: dict[str, asyncio.Task[None]]


class BotApp(ServesInbox):
    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        cache: Cache,
        model: Model,
        summary_model: Model | None = None,
        episodic: EpisodicMemory | None = None,
        inbox: Inbox | None = None,
        write_marks: JsonKV | None = None,
        heard: Hearing | None = None,
    ) -> None:
        self.settings = settings
        # Messages heard where the bot is, shown to a later mention there (bot.memory.heard).
        self.heard = heard
        self.inbox = inbox  # durable events between a platform's ack and the turn; None: off
        self.episodic = episodic  # long-term episodic memory; None: the turn recalls nothing
        self.activity = TurnActivity()  # the turns running here; indexing yields to them
        if episodic is not None:
            episodic.indexer.yield_to(self.activity)
        self.store = store
        self.cache = cache
        self.model = model
        self.summary_model = summary_model or model
        self.counter = TokenCounter(settings.bot_model)
        budget = settings.bot_context_tokens
        reply_tokens = min(settings.bot_reply_tokens, budget // 4)
        recall_tokens = int(budget * RECALL_SHARE) if episodic is not None else 0
        self.builder = ContextBuilder(
            self.counter, budget=budget, reply_tokens=reply_tokens, recall_tokens=recall_tokens
        )
        self.memory = SessionMemory(
            store,
            cache,
            self.counter,
            CompressionPolicy.for_budget(budget, reply_tokens),
            idle_ttl=settings.bot_session_ttl,
        )
        # Every model request metered and priced (bot.usage); budgets per place (bot.usage.gate).
        self.usage = usage_of(store)
        self.meter = UsageMeter(
            self.usage, Prices.parse(settings.bot_prices), estimate=self._estimate_usage
        )
        self.budgets = BudgetGate(
            cache, self.usage, self.meter.prices, default_model=settings.bot_model
        )
        self.meter.on_background = self.budgets.background
        embedder = getattr(episodic, "embedder", None)
        if isinstance(embedder, EndpointEmbedder):
            embedder.meter = self.meter
        self.budgets.alert = self._budget_alert
        self.admin_notice: AdminNotice | None = None  # the adapter's way to tell an admin
        self.reconciler = Reconciler(
            store, JsonAsker(MeteredModel(self.summary_model, "memory", self.meter), max_tokens=400)
        )
        self.toolboxes = ToolboxFactory(
            settings,
            store=store,
            cache=cache,
            reconciler=self.reconciler,
            write_marks=write_marks,
        )
        self.toolboxes.count_tokens = self.counter.tools
        # Each place's settings, resolved once per turn (bot.policy); the `/config` store
        # plugs in as the source.
        kept = place_settings_of(store)
        self.place_settings = CachedPlaceSettings(kept, cache) if kept is not None else None
        self.policies = PolicyResolver(
            self.place_settings or NoPlaceSettings(),
            default_model=settings.bot_model,
            models=settings.allowed_models(),
        )
        self.bot_pairs = BotPairBudget(cache)  # how often other bots are answered (bots=)
        self.limiter = TurnLimiter(
            cache,
            per_user=Rate.parse(settings.bot_rate_user),
            per_team=Rate.parse(settings.bot_rate_team),
            team_queue=settings.bot_team_queue,
        )
        self.runner = TurnRunner(
            model=MeteredModel(model, "chat", self.meter),
            memory=self.memory,
            facts=store,
            builder=self.builder,
            max_rounds=settings.bot_max_tool_rounds,
            turn_timeout=settings.bot_turn_timeout,
            file_limits=FileLimits(
                max_files=settings.bot_max_files,
                max_file_bytes=settings.bot_file_max_bytes,
                max_total_bytes=settings.bot_files_max_total_bytes,
                download_timeout=settings.bot_file_timeout,
            ),
            vision=Vision(settings.bot_vision, settings.bot_model),
            recall=episodic.recall if episodic is not None else None,
            heard=heard.earlier if heard is not None else None,
            default_model=settings.bot_model,
        )
        self.commands = CommandHandler(
            store,
            self.toolboxes.catalog(),
            admins=settings.admin_ids,
            on_erased=self.memory.forget_hot,
            box=self.toolboxes.box,
            lock_session=self._session_turn,
        )
        # Platform deletes and edits (bot.memory.deletion); the index is attached later.
        self.changes = PlatformChanges(
            store,
            lock_session=self._session_turn,
            forget_hot=self.memory.forget_hot,
            count_tokens=self.counter.count,
            max_chars=MAX_MESSAGE_CHARS,
        )
        self.commands.eraser.heard = heard
        if self.place_settings is not None:
            self.commands.config = ConfigCommands(
                self.place_settings,
                self.policies,
                is_admin=self.commands.is_admin,
                installed_packs=self._installed_packs,
            )
            self.commands.eraser.tiers.append(SettingsAuthors(self.place_settings.store))
        if self.usage is not None:
            self.commands.eraser.tiers.append(UsagePeople(self.usage, self.meter))
        if self.toolboxes.connections is not None:  # people's own tool connections
            self.commands.eraser.tiers.append(
                ConnectionsTier(self.toolboxes.connections, self.toolboxes.mcp)
            )
            self.commands.connections = ConnectionCommands(
                self.toolboxes.connections, self.toolboxes.mcp
            )
        self.changes.heard = heard
        # Thumbs up/down on final replies (bot.feedback): one store write per click.
        votes = feedback_of(store)
        self.feedback_desk = (
            FeedbackDesk(votes, store, default_model=settings.bot_model) if votes else None
        )
        if votes is not None:
            self.runner.feedback = True
            self.commands.eraser.tiers.append(FeedbackVoters(votes))
        self.commands.usage = UsageCommands(
            self.usage,
            self.meter.pending,
            is_admin=self.commands.is_admin,
            feedback=votes.feedback_totals if votes is not None else None,
        )
        # Calls that wait for the person's approval (bot.approvals): only with a durable store,
        # the place a paused turn waits in across restarts and replicas.
        kept_approvals = approvals_of(store)
        self.approvals = (
            ApprovalDesk(
                kept_approvals,
                ttl=settings.bot_approval_ttl,
                stale_after=settings.bot_turn_timeout + 60.0,
            )
            if kept_approvals is not None
            else None
        )
        self.runner.approvals = self.approvals
        if kept_approvals is not None:
            self.commands.eraser.tiers.append(ApprovalPeople(kept_approvals))
            if self.commands.config is not None:
                self.commands.config.approvals = kept_approvals
            self.commands.audit = self._tools_audit
        if heard is not None:
            heard.apply_change = self._apply_heard_change
        if isinstance(inbox, SqliteInbox):  # its WAL holds handled messages until compacted
            self.commands.eraser.tiers.append(inbox)
            self.changes.compact_also.append(inbox)
        self.session_locks: KeyLocks[str] = KeyLocks()  # in-process, by session id
        claim = settings.bot_inbox_claim_seconds
        self.worker = InboxWorker(
            inbox,
            first_delivery=self.first_delivery,
            claim_after=claim,
            order_wait=settings.bot_turn_timeout + claim + 30.0,
        )
        # The cross-process session lock outlives a killed holder by this much only, so a turn
        # taken over from a dead replica's inbox entry never waits out the dead turn's lock.
        self.lock_lease = max(1.0, min(claim * 0.75, 30.0))
        if self.toolboxes.chat_signin is not None:  # a question waiting for a sign-in goes back
            self.toolboxes.chat_signin.inbox = self.worker
        self._bg = _Background(set(), {})
        self._summary_format = 0  # index of the structured-output form the server accepts
        self.nightly: NightlySchedule | None = None  # started by start()
        self.memory_sink: MemorySink | None = None  # where consolidated memories go
        self.memory_index: MemoryIndex | None = None  # closed with the app

    # BotCore ---------------------------------------------------------------------------------

    async def handle_message(self, message: IncomingMessage, sink: ReplySink) -> None:
        await self.run_turn(message, sink)

    async def decide_approval(
        self, person: PersonKey, choice: Choice, approval_id: str | None, session: SessionKey
    ) -> Answer:
        """A person's answer to an approval request (`bot.approvals.desk`): the request's id
        (a button), or without one the person's newest pending request in `session` (the
        console's `/approve`). The answer is shown to them; with `resume`, the caller goes on
        with the turn (`resume_turn`). Never raises for bad input."""
        if self.approvals is None:
            return Answer("Approvals are not kept by this bot.", ok=False)
        try:
            if approval_id is None:
                latest = await self.approvals.store.latest_pending(session.id, person.id)
                if latest is None:
                    return Answer("Nothing of yours is waiting for approval here.", ok=False)
                approval_id = latest.id
            return await self.approvals.decide(approval_id[:100], person.id, choice)
        except StoreUnavailable:
            return Answer("I can't reach my store right now; please try again.", ok=False)

    async def _tools_audit(self, team: TeamKey) -> list[str]:
        """`/tools audit`: approvals and decisions (from the store) with installs, removals and
        breaker openings (`bot.tool_audit`), newest last."""
        kinds = {i.config.get("pack", i.pack) for i in await self.store.installed(team)}
        entries = await self.toolboxes.audit.recent(team.id, kinds, limit=AUDIT_SHOWN)
        lines = [e.line() for e in entries]
        if self.approvals is not None:
            lines += [audit_line(a) for a in await self.approvals.store.recent(team, AUDIT_SHOWN)]
        return sorted(lines)[-AUDIT_SHOWN:]

    async def resume_turn(self, resume: Resume, sink: ReplySink) -> TurnResult | None:
        """Go on with a turn paused for approvals, now that they are decided."""
        return await self.run_turn(resume.message, sink, resume=resume)

    async def sweep_approvals(self) -> list[Resume]:
        """Pending approvals past `BOT_APPROVAL_TTL` expire; the turns to resume (the adapter
        resumes each with a sink of its place). Never raises."""
        if self.approvals is None:
            return []
        try:
            return await self.approvals.sweep()
        except Exception as exc:
            log.warning("approval_sweep_failed", extra={"fields": {"error": type(exc).__name__}})
            return []

    async def run_turn(
        self, message: IncomingMessage, sink: ReplySink, *, resume: Resume | None = None
    ) -> TurnResult | None:
        """Like handle_message, returning the turn's record (tests and benchmarks read it)."""
        message = clean_message(message)
        if not message.text.strip() and not message.attachments:
            await sink.finish(EMPTY_MESSAGE_REPLY)
            return None
        if len(message.attachments) > self.settings.bot_max_files:
            await sink.finish(
                too_many_files_reply(len(message.attachments), self.settings.bot_max_files)
            )
            return None
        if len(message.text) > MAX_MESSAGE_CHARS:
            cut = message.text[:MAX_MESSAGE_CHARS] + "\n…[message too long: the rest was cut]"
            message = replace(message, text=cut)
        session = message.session
        refusal = await self.limiter.refusal(message)
        if refusal == DROP:
            drop_quietly(sink)  # a flood: the person was told once in this window
            return None
        if refusal is not None:
            await sink.finish(refusal, error=True)
            return None
        try:
            with self.limiter.admitted(message):
                async with self._session_turn(session):
                    try:
                        policy = await self.policies.for_place(session.team_key, message.channel)
                        toolbox = await self.toolboxes.for_team(
                            session.team_key, policy, message.person
                        )
                    except StoreUnavailable:
                        log.warning(
                            "toolbox_store_unavailable", extra={"fields": {"team": session.team}}
                        )
                        await sink.finish(STORE_DOWN_REPLY, error=True)
                        return None
                    hold = await self._budget_hold(message, policy)
                    if isinstance(hold, str):  # a budget is used up: no model request
                        await sink.finish(hold)
                        return None
                    bill = Bill(
                        team=session.team_key.id,
                        place=message.channel,
                        person=message.person.id,
                        audience=message.audience.id,
                    )
                    with self.activity.turn(), billed_to(bill):
                        try:
                            result = await self.runner.run(
                                message, toolbox, sink, policy, hold, resume
                            )
                        finally:
                            if hold is not None:
                                await hold.settle(bill)
                    if self.episodic is not None:
                        self.episodic.after_turn(session)
                    record_turn(message.platform, result, set(toolbox.registry.names()))
        except LockTimeout:
            await sink.finish(BUSY_REPLY, error=True)
            return None
        if result.needs_compression:
            self.schedule_compression(session)
        return result

    async def _installed_packs(self, team: TeamKey) -> set[str]:
        return {i.pack for i in await self.store.installed(team)}

    async def handle_command(self, request: CommandRequest) -> CommandReply:
        return await self.commands.handle(clean_request(request))

    async def message_deleted(self, ref: MessageRef) -> MessageChange:
        change = await self.changes.deleted(ref)
        await self.reply_deleted(ref)
        return change

    async def reply_deleted(self, ref: MessageRef) -> int:
        """Messages of the bot deleted on the platform: the votes on them go. Never raises."""
        if self.feedback_desk is None or not isinstance(ref, MessageRef):
            return 0
        given = ref.message_ids if isinstance(ref.message_ids, tuple | list) else ()
        ids = [i for i in given[:MAX_REF_IDS] if isinstance(i, str) and 0 < len(i) <= 200]
        if not ids:
            return 0
        try:
            return await self.feedback_desk.votes.drop_replies(TeamKey(ref.platform, ref.team), ids)
        except Exception:  # a store down or a bad id: the votes stay, one line says so
            log.warning(
                "feedback_drop_failed", extra={"fields": {"platform": str(ref.platform)[:20]}}
            )
            return 0

    async def feedback(self, click: FeedbackClick) -> FeedbackAnswer:
        """A feedback button pressed (`bot.feedback`): checked against the stored turn, kept."""
        if self.feedback_desk is None:
            return FeedbackAnswer(NO_FEEDBACK, ok=False)
        return await self.feedback_desk.click(click)

    async def message_edited(self, ref: MessageRef, text: str) -> MessageChange:
        return await self.changes.edited(ref, text)

    def hear(self, message: HeardMessage) -> None:
        """A message posted where the bot is (`bot.core.Hears`): kept for later mentions."""
        if self.heard is not None:
            self.heard.hear(message)

    async def _apply_heard_change(self, ref: MessageRef, text: str | None) -> MessageChange:
        if text is None:
            return await self.changes.deleted(ref)
        return await self.changes.edited(ref, text)

    def heard_changed(self, ref: MessageRef, text: str | None) -> None:
        if self.heard is not None:
            self.heard.change_later(ref, text)

    async def heard_all(self, session: SessionKey) -> bool:
        if self.heard is None or not session.thread:
            return False
        try:
            return await self.heard.covers(
                session.platform, session.team, session.channel, session.thread
            )
        except StoreUnavailable:
            return False

    async def in_conversation(self, session: SessionKey) -> bool:
        try:
            return bool(await self.store.recent(session, limit=1))
        except StoreUnavailable:
            return False

    async def place_policy(self, team: TeamKey, channel: str) -> PlacePolicy:
        try:
            return await self.policies.for_place(team, channel)
        except Exception:  # a store or cache down: answer as by default, never fail routing
            log.warning("place_policy_unavailable", extra={"fields": {"team": team.team}})
            return DEFAULT_POLICY

    async def settings_overview(
        self, team: TeamKey, user: str, *, is_platform_admin: bool
    ) -> SettingsOverview | None:
        if not self.commands.is_admin_user(user, is_platform_admin=is_platform_admin):
            return None
        return await team_overview(self.place_settings, self.policies, team)

    async def admit_bot(self, team: TeamKey, channel: str, other_bot: str) -> bool:
        try:
            return await self.bot_pairs.admit(team, channel, other_bot)
        except Exception:  # the cache is down: do not answer bots (a loop is the worse risk)
            log.warning("bot_pair_budget_unavailable", extra={"fields": {"team": team.team}})
            return False

    async def first_delivery(self, event_id: str) -> bool:
        return await self.cache.set_nx(f"event:{event_id}", ttl=24 * 3600)

    async def health(self) -> dict[str, bool]:
        async def check(ping: Awaitable[bool]) -> bool:
            try:
                return bool(await asyncio.wait_for(ping, timeout=3.0))
            except Exception:
                return False

        store_ok, cache_ok = await asyncio.gather(
            check(self.store.ping()), check(self.cache.ping())
        )
        status = {"store": store_ok, "cache": cache_ok}
        if self.inbox is not None and self.worker.kinds:  # served here: is it keeping up?
            status["inbox"] = await check(self._inbox_keeping_up())
        return status

    async def _inbox_keeping_up(self) -> bool:
        assert self.inbox is not None
        limit = self.settings.bot_inbox_max_age_seconds
        for kind in self.worker.kinds:
            if (await self.inbox.stats(kind)).oldest_age > limit:
                return False
        return True

    async def start(self) -> None:
        """Start background jobs for a long-running surface (`bot slack`, `bot discord` call
        this through `adapters.common.startup.running_core`; `bot chat` does not). The nightly
        consolidation (BOT_CONSOLIDATE_CRON) is started here; `close()` stops what it started."""
        from bot.memory.nightly import NightlySchedule

        if self.nightly is None:
            self.nightly = NightlySchedule(self)
            self.nightly.start()
        self.meter.start()
        if self.heard is not None:
            await self.heard.start()

    def attach_memory_tier(self, tier: IndexMemories, index: MemoryIndex) -> None:
        """Consolidated memories go to `tier`; `/memory forget all` erases from it too, and
        platform deletes and edits remake what was drawn from a message there."""
        self.memory_sink = tier
        self.commands.eraser.tiers.append(tier)
        self.memory_index = index
        self.changes.index, self.changes.add, self.changes.settle = index, tier.add, tier.settle

    def lock_session(self, session: SessionKey) -> AbstractAsyncContextManager[None]:
        """The per-session turn lock (erasure and consolidation write under it too)."""
        return self._session_turn(session)

    async def close(self) -> None:
        if self.nightly is not None:
            await self.nightly.stop()
        await self.worker.stop(grace=0.0)  # adapters stop it first, with their grace period
        await self.drain(within=30.0)
        await self.budgets.close()  # alerts on their way are sent
        await self.meter.close()  # the last rows reach the store before it closes
        await self.toolboxes.close()
        await self.model.close()
        if self.summary_model is not self.model:
            await self.summary_model.close()
        if self.episodic is not None:
            await self.episodic.close()
        await self.cache.close()
        if self.memory_index is not None:
            await self.memory_index.close()
        if self.heard is not None:
            await self.heard.close()
        if self.inbox is not None:
            await self.inbox.close()
        await self.store.close()

    # ordering --------------------------------------------------------------------------------

    @asynccontextmanager
    async def _session_turn(self, session: SessionKey) -> AsyncIterator[None]:
        """In-process FIFO lock first (cheap, fair), then the cross-process cache lock."""
        timeout = self.settings.bot_turn_timeout
        async with self.session_locks.hold(session.id):
            async with self.cache.lock(
                f"lock:session:{session.id}", ttl=self.lock_lease, wait=timeout, keep_alive=True
            ):
                yield

    # background summarisation ----------------------------------------------------------------

    def schedule_compression(self, session: SessionKey) -> None:
        if session.id in self._bg.running:
            return
        task = asyncio.create_task(self._compress(session), name=f"summary:{session.id}")
        self._bg.running[session.id] = task
        self._bg.tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._bg.tasks.discard(t)
            self._bg.running.pop(session.id, None)

        task.add_done_callback(done)

    async def _compress(self, session: SessionKey) -> None:
        model = MeteredModel(self.summary_model, "summary", self.meter)

        async def summarise(messages: list[dict[str, Any]], response_format: dict[str, Any]) -> str:
            # Strict JSON schema first; servers that reject it (some local OpenAI-compatible
            # ones) get JSON mode, then a plain request; the reply is parsed leniently. The
            # first form the server accepted is remembered, so later summaries cost one call.
            formats: list[dict[str, Any] | None] = [response_format, {"type": "json_object"}, None]
            for i in range(self._summary_format, len(formats)):
                try:
                    response = await model.complete(
                        messages,
                        response_format=formats[i],
                        max_tokens=self.memory.policy.summary_tokens * 2,
                    )
                    self._summary_format = i
                    return response.content
                except ModelError as err:
                    if err.kind != "bad_request" or i == len(formats) - 1:
                        raise
                    log.info(
                        "summary_format_rejected",
                        extra={"fields": {"format": (formats[i] or {}).get("type", "none")}},
                    )
            raise AssertionError("unreachable")

        try:
            with billed_to(team_bill(session.team_key.id)):  # the team's, not the turn's
                await self.memory.compress(session, summarise)  # failures back off in state
        except Exception:
            log.exception("summary_crashed", extra={"fields": {"session": session.id}})
            with contextlib.suppress(Exception):  # e.g. the store is down: nothing to record in
                await self.memory.record_failure(session)

    async def _budget_hold(
        self, message: IncomingMessage, policy: PlacePolicy
    ) -> Hold | str | None:
        """The turn's budgets; when they cannot be read (the usage store or cache is down) the
        turn runs unbudgeted rather than not at all, and one line says so."""
        try:
            return await self.budgets.open(message, policy)
        except Exception as exc:
            log.warning("budget_unavailable", extra={"fields": {"error": type(exc).__name__}})
            return None

    def set_admin_notice(self, notice: AdminNotice) -> None:
        self.admin_notice = notice
        if self.toolboxes.chat_signin is not None:  # sign-in links go the same private way
            self.toolboxes.chat_signin.notice = notice

    async def open_sign_in(self, query: Mapping[str, str]) -> tuple[str | None, str]:
        """`GET /oauth/start`: a "Connect" link opened (bot.connections.chat)."""
        chat = self.toolboxes.chat_signin
        if chat is None:
            return None, "This bot does not offer personal connections (BOT_PUBLIC_URL unset)."
        return await chat.open_link(query)

    async def finish_sign_in(self, query: Mapping[str, str]) -> tuple[bool, str]:
        """`GET /oauth/callback`: a person's tool sign-in ends (bot.connections.chat)."""
        chat = self.toolboxes.chat_signin
        if chat is None:
            return False, "This bot does not offer personal connections (BOT_PUBLIC_URL unset)."
        return await chat.finish(query)

    async def _budget_alert(self, team: str, place: str, text: str) -> None:
        """A budget crossed 80 % or 100 %: tell `BOT_ADMINS` and whoever set that budget (from
        the settings history), at most `MAX_ALERTED` people, each once."""
        platform, _, team_id = team.partition(":")
        people: list[PersonKey] = [
            PersonKey(platform, team_id, a) for a in sorted(self.settings.admin_ids)
        ]
        if self.place_settings is not None:
            changes = await self.place_settings.store.history(
                TeamKey(platform, team_id), place or TEAM_WIDE, limit=HISTORY_LOOKED_AT
            )
            for change in changes:
                if change.key in BUDGET_KEYS and change.new and change.by != FORGOTTEN:
                    with contextlib.suppress(ValueError):
                        people.append(PersonKey.parse(change.by))
        notice = self.admin_notice
        seen: set[str] = set()
        for person in people:
            if person.id in seen or len(seen) >= MAX_ALERTED:
                continue
            seen.add(person.id)
            if notice is None:
                continue
            try:
                await notice.tell(person, text)
            except Exception as exc:
                log.warning("admin_notice_failed", extra={"fields": {"error": type(exc).__name__}})
        log.info("budget_alert_sent", extra={"fields": {"team": team, "admins": len(seen)}})

    def _estimate_usage(self, messages: Sequence[dict[str, Any]], content: str) -> tuple[int, int]:
        """Token counts of a request whose server sent no usage (tiktoken, as for budgets)."""
        return sum(self.counter.message(m) for m in messages), self.counter.count(content)

    async def drain(self, within: float) -> None:
        """Wait for background summaries (on shutdown), at most `within` seconds."""
        pending = [t for t in self._bg.tasks if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=within)


async def build_app(
    settings: Settings, *, cache: Cache | None = None, episodic: bool = True
) -> BotApp:
    """Open the stores and the model client from settings (every command and test builds the
    app here). `cache`: an already-open cache to use instead of the one the settings name (the
    app closes it, as it closes everything it was given). `episodic=False` leaves long-term
    episodic memory out (tests of other parts).

    Whatever was opened before a step that fails is closed again, in reverse order (one exit
    stack), so a failed start leaks no connection, thread or file handle."""
    api_key = settings.require_openai_key()
    try:
        tracing.configure(settings.bot_tracing)
    except tracing.TracingUnavailable as exc:
        raise StartupError(str(exc)) from None
    async with contextlib.AsyncExitStack() as opened:
        with _startup_step("the store"):
            store = await open_store(
                mongodb_uri=settings.mongodb_uri,
                mongodb_db=settings.mongodb_db,
                data_dir=settings.bot_data_dir,
            )
        opened.push_async_callback(store.close)
        with _startup_step("the cache"):
            if cache is None:
                cache = open_cache(redis_url=settings.redis_url, prefix=settings.bot_redis_prefix)
        opened.push_async_callback(cache.close)
        with _startup_step("the inbox"):
            inbox = await open_inbox(
                mode=settings.bot_inbox,
                redis_url=settings.redis_url,
                prefix=settings.bot_redis_prefix,
                data_dir=settings.bot_data_dir,
                claim_after=settings.bot_inbox_claim_seconds,
            )
            if inbox is not None:
                opened.push_async_callback(inbox.close)
            write_marks = await open_durable_kv(inbox)  # the tools' idempotency marks, if durable
        with _startup_step("the record of heard messages"):
            heard = Hearing(await open_heard_store(store, data_dir=settings.bot_data_dir))
        opened.push_async_callback(heard.close)
        model = ModelClient(
            api_key=api_key,
            base_url=settings.openai_base_url,
            model=settings.bot_model,
            timeout=settings.bot_model_timeout,
            max_retries=settings.bot_model_retries,
        )
        opened.push_async_callback(model.close)
        memory: EpisodicMemory | None = None
        if episodic:
            with _startup_step("the long-term memory"):
                memory = await open_episodic(
                    store,
                    data_dir=settings.bot_data_dir,
                    counter=TokenCounter(settings.bot_model),
                    embedding_model=settings.bot_embedding_model,
                    api_key=api_key,
                    base_url=settings.openai_base_url,
                )
            opened.push_async_callback(memory.close)
        app = BotApp(
            settings,
            store=store,
            cache=cache,
            model=model,
            episodic=memory,
            inbox=inbox,
            write_marks=write_marks,
            heard=heard,
        )
        opened.pop_all()  # from here `app.close()` closes all of the above, and its own parts
        opened.push_async_callback(app.close)
        from bot.memory.index_tiers import IndexMemories, attach_memory_index

        if memory is None:
            with _startup_step("the memory index"):
                await attach_memory_index(app, data_dir=settings.bot_data_dir)
        else:
            if memory.embedder is not None:
                # The same embedder ranks tools when a team has more than fit well in one
                # request.
                app.toolboxes.selector.embed = memory.embedder.embed
            # One index: consolidated memories are embedded by the episodic indexer, and
            # `/memory forget all` erases the person's entries through the same tier.
            app.attach_memory_tier(
                IndexMemories(
                    memory.index,
                    memory.indexer.add_entries,
                    memory.indexer.idle,
                    memory.indexer.enqueue,
                ),
                memory.index,
            )
            with _startup_step("the long-term memory"):
                await memory.start()  # indexes what a crash left unindexed, in the background
        opened.pop_all()
    return app


@contextlib.contextmanager
def _startup_step(what: str) -> Iterator[None]:
    """A failure while opening `what` is one line for the operator (a StartupError)."""
    try:
        yield
    except StartupError:
        raise
    except Exception as exc:
        raise StartupError(f"cannot open {what}: {exc}") from None
