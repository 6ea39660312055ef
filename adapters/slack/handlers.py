"""Bolt listeners: Slack events and slash commands in, core calls out.

Listeners run after Bolt has acked (events) or ack themselves before any work (commands,
`adapters/slack/commands.py`). Event listeners only route and hand the turn to the task
tracker; everything slow (de-duplication, user lookups, the turn itself) happens in that task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from cachetools import TTLCache
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common.loadguard import LoopGuard
from adapters.common.logs import emit
from adapters.common.tasks import TaskTracker
from adapters.slack.approvals import ACTIONS as APPROVAL_ACTIONS
from adapters.slack.approvals import SlackApprovals
from adapters.slack.channels import ChannelDirectory
from adapters.slack.commands import COMMANDS, SlashCommands
from adapters.slack.config import SlackConfig
from adapters.slack.errors import api_failed
from adapters.slack.feedback import ACTION_ID as FEEDBACK_ACTION
from adapters.slack.feedback import SlackFeedback, own_reply_deleted
from adapters.slack.files import SlackFiles
from adapters.slack.heard import hear_event
from adapters.slack.home import AppHome
from adapters.slack.normalize import mentioned_users, normalize_text
from adapters.slack.routing import Route, first_mention_by_edit, route_change, route_event
from adapters.slack.sink import Capabilities, EarlierReply, ReplyTarget, SlackReplySink
from adapters.slack.threads import ThreadTracker, earlier_fetcher, find_earlier_reply
from adapters.slack.traits import INBOX_KIND as INBOX_KIND
from adapters.slack.users import UserDirectory
from bot import metrics
from bot.approvals.desk import Resume
from bot.core import BotCore, NotifiesAdmins, heard_all
from bot.feedback import reply_deleted
from bot.inbox import Delivery, InboxItem, RetryLater
from bot.keys import SessionKey, TeamKey
from bot.messages import IncomingMessage, MessageRef

_LOG = logging.getLogger(__name__)
PLATFORM = "slack"
APOLOGY = "Sorry, something went wrong while answering. Please try again."
SHUTDOWN_APOLOGY = "Sorry, I was restarting and had to stop before answering. Please ask again."
# Message events that are a change to an earlier message: applied, not answered (except an
# edit that adds the bot's first mention: `first_mention_by_edit`).
CHANGE_SUBTYPES = frozenset({"message_deleted", "message_changed"})
# Parts of an event the turn never reads, left out of the inbox entry (blocks can be large).
_UNUSED_EVENT_FIELDS = frozenset({"blocks", "attachments", "client_msg_id", "team", "user_team"})

# Finds the Web API client (with that workspace's bot token) for an inbox entry's team.
ClientFor = Callable[[str, str | None], Awaitable[AsyncWebClient | None]]


async def _no_client(team: str, enterprise: str | None) -> AsyncWebClient | None:
    return None


async def _acked() -> None:
    """The listener behind the inbox middleware: Bolt acks; the turn runs from the inbox."""


def _team(context: AsyncBoltContext, body: dict[str, Any]) -> str:
    return str(context.team_id or body.get("team_id") or context.enterprise_id or "")


def _handled(body: dict[str, Any], outcome: str) -> None:
    """One line for every event the adapter is done with, answered or dropped, so an operator
    can follow each event to its end and a test knows nothing more will come of it. Outcomes:
    answered | failed | cancelled | handed_back (a durable entry at shutdown: another worker
    runs it) | retry_later (its workspace's installation could not be read, or a platform change
    could not be applied: handed back, to run again) | not_authorized | edited (an edit applied
    to what the bot keeps, not answered; also an `app_mention` Slack re-sends for an edited
    message; an edit that adds the bot's first mention is answered: `answered`) | deleted (a
    deletion applied; also a message deleted before its turn ran) | duplicate | not_in_thread |
    ignored (not for the bot: every channel message reaches us, so that one is DEBUG; also
    the Messages tab's `app_home_opened`) | done (other event kinds; the Home view published;
    `failed` when it was not)."""
    event = body.get("event")
    emit(
        _LOG,
        "slack_event_handled",
        logging.DEBUG if outcome == "ignored" else logging.INFO,
        event_id=body.get("event_id"),
        kind=event.get("type") if isinstance(event, dict) else None,
        outcome=outcome,
    )


class SlackHandlers:
    """Holds the per-process helpers (dedup, users, threads) and the listener functions."""

    def __init__(
        self,
        core: BotCore,
        config: SlackConfig,
        tasks: TaskTracker,
        installation_store: AsyncInstallationStore | None = None,
        client_for: ClientFor | None = None,
    ) -> None:
        self.core = core
        self.config = config
        self.tasks = tasks
        self.installation_store = installation_store
        self.client_for: ClientFor = client_for or _no_client
        self.users = UserDirectory()
        self.channels = ChannelDirectory()
        self.threads = ThreadTracker()
        self.caps = Capabilities()
        self._titled: TTLCache[tuple[str, str, str], bool] = TTLCache(50_000, 86400.0)
        self._turns = asyncio.Semaphore(config.max_concurrent_turns)
        self.guard = LoopGuard()
        self.files = SlackFiles(config.base_url)
        self.commands = SlashCommands(core, config, tasks, self.users)
        if isinstance(core, NotifiesAdmins):
            from adapters.slack.notices import SlackAdminNotice

            core.set_admin_notice(SlackAdminNotice(self.client_for))
        self.home = AppHome(core, self.users)
        self.feedback = SlackFeedback(core, tasks)
        self.approvals = SlackApprovals(core, tasks, self.resumed_sink, self.turn_slot)
        # Messages deleted in Slack, seen here: a turn still waiting for one is not run (the
        # deletion, queued after it in the same conversation, erases what it stored anyway).
        self.deleted: TTLCache[tuple[str, str, str], bool] = TTLCache(20_000, 3600.0)

    def register(self, app: AsyncApp) -> None:
        # The middleware writes the event to the core's durable inbox before Bolt acks it; the
        # turn runs when an inbox worker (in any replica) takes it (`on_queued`).
        app.event("app_mention", middleware=[self.accept])(_acked)
        app.event("message", middleware=[self.accept])(_acked)
        app.event("assistant_thread_started")(self.on_thread_started)
        app.event("assistant_thread_context_changed")(self.on_ignored_event)
        app.event("app_home_opened")(self.on_home_opened)
        # Every command takes one path: acked at once, answered through its response_url.
        for name in COMMANDS:
            app.command(f"/{name}")(self.commands.on_command)
        # Thumbs up/down on final replies (`block_actions` of the feedback buttons).
        app.action(FEEDBACK_ACTION)(self.feedback.on_click)
        # Approve / Approve always / Deny on an approval request (`block_actions`).
        app.action(APPROVAL_ACTIONS)(self.approvals.on_click)
        # Subscribed in the manifest in both modes: acknowledged and logged even without an
        # installation store (single workspace), so Bolt never answers Slack 404.
        app.event("app_uninstalled")(self.on_app_uninstalled)
        app.event("tokens_revoked")(self.on_tokens_revoked)
        app.error(self.on_error)

    # -- events ------------------------------------------------------------------------------

    async def accept(
        self,
        body: dict[str, Any],
        context: AsyncBoltContext,
        request: AsyncBoltRequest,
        next_: Callable[[], Awaitable[None]],  # not called: the returned response is the ack
    ) -> BoltResponse:
        """Route the event (pure, no I/O) and put the ones the bot answers in the inbox; the
        returned response is the ack. A re-delivery (same event id or message, to any replica)
        is dropped by the inbox itself."""
        event = body.get("event") if isinstance(body.get("event"), dict) else {}
        assert isinstance(event, dict)
        metrics.EVENTS.labels(PLATFORM, str(event.get("type"))).inc()
        hear_event(  # kept for later mentions here (bot.memory.heard): pure, no I/O
            self.core,
            event,
            team=_team(context, body),
            bot_user_id=context.bot_user_id,
            bot_id=context.bot_id,
        )
        if event.get("type") == "message" and event.get("subtype") in CHANGE_SUBTYPES:
            return await self._accept_change(body, event, context)
        if event.get("edited"):
            # Slack re-sends app_mention for an edited message: the original was answered.
            metrics.DROPPED_MESSAGES.labels(PLATFORM, "edited").inc()
            _handled(body, "edited")
            return BoltResponse(status=200, body="")
        team = _team(context, body)
        route = route_event(
            event,
            team=team,
            bot_user_id=context.bot_user_id,
            bot_id=context.bot_id,
            allow_bots=self.config.allow_bot_messages,
            plain_messages=True,
            bot_mentions=True,
        )
        if route is None or not await self._wanted_here(route, intake=True):
            _handled(body, "ignored")
            return BoltResponse(status=200, body="")
        retries = request.headers.get("x-slack-retry-num") or []
        event_id = str(body.get("event_id") or "")
        item = InboxItem(
            kind=INBOX_KIND,
            session=SessionKey(PLATFORM, route.team, route.channel, route.session_thread).id,
            body={
                "event": {k: v for k, v in event.items() if k not in _UNUSED_EVENT_FIELDS},
                "event_id": event_id,
                "team": team,
                "enterprise": context.enterprise_id,
                "bot_user_id": context.bot_user_id,
                "bot_id": context.bot_id,
                "retry": retries[0] if retries else None,
                "received_at": time.time(),
            },
            dedup=(
                *((f"slack:{route.team}:event:{event_id}",) if event_id else ()),
                # The same message can reach us under another event id (a second subscription).
                f"slack:{route.team}:msg:{route.channel}:{route.message_ts}",
            ),
        )
        if not await self.core.enqueue(item):
            metrics.DEDUPLICATED_EVENTS.labels(PLATFORM).inc()
            _handled(body, "duplicate")
        return BoltResponse(status=200, body="")

    async def _wanted_here(self, route: Route, *, intake: bool = False) -> bool:
        """The place's `reply` setting (`/config`) for a message that does not mention the
        bot: a top-level one is answered only with `all`; a thread follow-up not with
        `mention` (and with `all` in any thread: see `_answer`); another bot's mention only
        with `bots=mentions`, within the pair budget (`bot.bot_pairs`). One cached read, no
        store round trip (`bot.place_settings_cache`). People's DMs and mentions: always."""
        if not (route.plain or route.needs_thread_check or route.from_bot):
            return True
        team = TeamKey(PLATFORM, route.team)
        policy = await self.core.place_policy(team, route.channel)
        if route.from_bot:  # the budget is spent once, when the mention is taken in
            if policy.bots != "mentions":
                return False
            return not intake or await self.core.admit_bot(team, route.channel, route.user)
        if route.plain:
            return policy.reply == "all"
        return policy.reply != "mention"

    async def _answers_all(self, route: Route) -> bool:
        policy = await self.core.place_policy(TeamKey(PLATFORM, route.team), route.channel)
        return policy.reply == "all"

    async def _accept_change(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> BoltResponse:
        """A message deleted or edited in Slack: into the inbox, in the order of its own
        conversation (so it runs after the message's turn), to be applied, never answered.
        The inbox entry keeps the ids and, for an edit, the new text: never the words of a
        deleted message (`previous_message` is left out)."""
        team = _team(context, body)
        change = route_change(
            event,
            team=team,
            bot_user_id=context.bot_user_id,
            bot_id=context.bot_id,
            allow_bots=self.config.allow_bot_messages,
        )
        if change is None:
            gone = own_reply_deleted(
                event, team=team, bot_user_id=context.bot_user_id, bot_id=context.bot_id
            )
            if gone is not None:  # one of the bot's replies: the votes on it go (no inbox)
                with contextlib.suppress(RuntimeError):  # shutting down: they stay
                    self.tasks.spawn(reply_deleted(self.core, gone), name="slack-reply-deleted")
            _handled(body, "deleted" if gone is not None else "ignored")
            return BoltResponse(status=200, body="")
        if change.kind == "deleted":
            self.deleted[(change.team, change.channel, change.message_ts)] = True
        mention = (
            first_mention_by_edit(event, bot_user_id=context.bot_user_id)
            if change.kind == "edited"
            else None
        )
        event_id = str(body.get("event_id") or "")
        version = f":{change.version}" if change.version else ""
        item = InboxItem(
            kind=INBOX_KIND,
            session=SessionKey(PLATFORM, change.team, change.channel, change.session_thread).id,
            body={
                "change": change.kind,
                "event": {"type": "message", "subtype": event.get("subtype")},
                "event_id": event_id,
                "team": change.team,
                "enterprise": context.enterprise_id,
                "bot_user_id": context.bot_user_id,
                "channel": change.channel,
                "ts": change.message_ts,
                "thread": change.thread_ts,
                "text": change.text,
                # An edit that adds the bot's first mention: answered as that mention (once).
                **({"mention": mention, "bot_id": context.bot_id} if mention else {}),
                "received_at": time.time(),
            },
            dedup=(
                *((f"slack:{change.team}:event:{event_id}",) if event_id else ()),
                f"slack:{change.team}:{change.kind}:{change.channel}:{change.message_ts}{version}",
            ),
        )
        if not await self.core.enqueue(item):
            metrics.DEDUPLICATED_EVENTS.labels(PLATFORM).inc()
            _handled(body, "duplicate")
        return BoltResponse(status=200, body="")

    async def on_queued(self, delivery: Delivery) -> None:
        """An inbox entry taken by this process: the turn (after the thread check)."""
        outcome = "failed"
        try:
            outcome = await self._queued(delivery)
        except asyncio.CancelledError:
            outcome = "handed_back" if delivery.durable else "cancelled"
            raise
        except RetryLater:
            outcome = "retry_later"
            raise
        finally:
            _handled(delivery.body, outcome)

    async def _queued(self, delivery: Delivery) -> str:
        data = delivery.body
        if data.get("change") in ("deleted", "edited"):
            return await self._apply_change(delivery)
        event = data.get("event") or {}
        team = str(data.get("team") or "")
        bot_user_id, bot_id = data.get("bot_user_id"), data.get("bot_id")
        route = route_event(
            event,
            team=team,
            bot_user_id=bot_user_id,
            bot_id=bot_id,
            allow_bots=self.config.allow_bot_messages,
            plain_messages=True,
            bot_mentions=True,
        )
        if route is None or not await self._wanted_here(route):
            return "ignored"  # (the place's `reply` may have changed since it was taken in)
        try:
            client = await self.client_for(team, data.get("enterprise"))
        except Exception as exc:  # the installation store is down: the message waits, kept
            emit(_LOG, "slack_authorize_failed", logging.WARNING, error=type(exc).__name__)
            raise RetryLater("no Slack installation available now") from None
        if client is None:
            metrics.DROPPED_MESSAGES.labels(PLATFORM, "not_authorized").inc()
            emit(_LOG, "slack_turn_unauthorized", logging.WARNING, team=team)
            return "not_authorized"
        if (route.team, route.channel, route.message_ts) in self.deleted:
            return "deleted"  # deleted in Slack before its turn ran: not answered
        received = float(data.get("received_at") or time.time())
        return await self._answer(
            route, data, event, client, bot_user_id, bot_id, received, delivery
        )

    async def _apply_change(self, delivery: Delivery) -> str:
        """A deletion or edit taken from the inbox: applied by the core; outcome `deleted` /
        `edited`. A store that cannot be reached hands the entry back (RetryLater). An edit that
        adds the bot's first mention is then answered as that mention (`_answer_edit`)."""
        data = delivery.body
        kind = str(data["change"])
        team, channel = str(data.get("team") or ""), str(data.get("channel") or "")
        thread = data.get("thread")
        ref = MessageRef(
            PLATFORM,
            team,
            (str(data.get("ts") or ""),),
            channel=channel,
            thread=str(thread) if thread else None,
        )
        if kind == "deleted":
            result = await self.core.message_deleted(ref)
        else:
            text = await self._edited_text(data, team)
            result = await self.core.message_edited(ref, text)
        if result.failed:
            raise RetryLater(f"a Slack message {kind} could not be applied now")
        mention = data.get("mention")
        # Nothing stored of the message: never answered. Or claimed by an earlier attempt of
        # this entry, which may have stored the message before it died: finish that answer.
        first = not result.found or delivery.entry.notes.get("edit_mention")
        if kind == "edited" and isinstance(mention, dict) and first:
            return await self._answer_edit(mention, delivery)
        return kind

    async def _answer_edit(self, mention: dict[str, Any], delivery: Delivery) -> str:
        """Answer an edit that added the bot's first mention, as if the message had been
        written so. Decisions: only when the core keeps nothing of the message (`found` 0: it
        was never answered; a thread follow-up the bot already answered is not answered
        again); at most once per message (a claim in the shared cache, noted with the entry so
        a re-run after a crash still answers); later edits of it are applied, never answered.
        Outcome `answered` (or what `_answer` says), else `edited`."""
        data = delivery.body
        team = str(data.get("team") or "")
        bot_user_id, bot_id = data.get("bot_user_id"), data.get("bot_id")
        route = route_event(
            mention,
            team=team,
            bot_user_id=bot_user_id,
            bot_id=bot_id,
            allow_bots=self.config.allow_bot_messages,
        )
        if route is None or (route.team, route.channel, route.message_ts) in self.deleted:
            return "edited"
        if not delivery.entry.notes.get("edit_mention"):
            claim = f"slack:{team}:edit-mention:{route.channel}:{route.message_ts}"
            if not await self.core.first_delivery(claim):
                return "edited"  # answered for an earlier edit (any replica)
            await delivery.note(edit_mention=True)
        try:
            client = await self.client_for(team, data.get("enterprise"))
        except Exception as exc:
            emit(_LOG, "slack_authorize_failed", logging.WARNING, error=type(exc).__name__)
            raise RetryLater("no Slack installation available now") from None
        if client is None:
            metrics.DROPPED_MESSAGES.labels(PLATFORM, "not_authorized").inc()
            return "not_authorized"
        received = float(data.get("received_at") or time.time())
        return await self._answer(
            route, data, mention, client, bot_user_id, bot_id, received, delivery
        )

    async def _edited_text(self, data: dict[str, Any], team: str) -> str:
        """The edited text as the core saw the message's own: Slack markup made readable, with
        the names of the people it mentions (looked up as for a message)."""
        raw = str(data.get("text") or "")
        bot_user_id = data.get("bot_user_id")
        wanted = [u for u in mentioned_users(raw) if u != bot_user_id]
        names: dict[str, str] = {}
        if wanted:
            try:
                client = await self.client_for(team, data.get("enterprise"))
            except Exception as exc:
                emit(_LOG, "slack_authorize_failed", logging.WARNING, error=type(exc).__name__)
                client = None
            if client is not None:
                names = await self.users.names(client, team, wanted)
        return normalize_text(raw, bot_user_id=bot_user_id, names=names)

    async def _answer(
        self,
        route: Route,
        data: dict[str, Any],
        event: dict[str, Any],
        client: AsyncWebClient,
        bot_user_id: str | None,
        bot_id: str | None,
        received: float,
        delivery: Delivery,
    ) -> str:
        """Answer the event's message; returns the outcome (see `_handled`)."""
        if route.needs_thread_check and await self._answers_all(route):
            route = replace(route, needs_thread_check=False)  # reply=all: every message here
        if route.needs_thread_check and not await self.threads.bot_in_thread(
            client,
            team=route.team,
            channel=route.channel,
            thread_ts=str(route.reply_thread_ts),
            bot_user_id=bot_user_id,
            bot_id=bot_id,
            parent_user_id=event.get("parent_user_id"),
            known_to_core=lambda: self.core.in_conversation(
                SessionKey(PLATFORM, route.team, route.channel, route.session_thread)
            ),
            heard_all=lambda: heard_all(
                self.core, SessionKey(PLATFORM, route.team, route.channel, route.session_thread)
            ),
        ):
            return "not_in_thread"
        if route.reply_thread_ts and not route.is_dm:
            self.threads.mark(route.team, route.channel, route.reply_thread_ts)

        wanted = [u for u in mentioned_users(str(event.get("text") or "")) if u != bot_user_id]
        # Both are cached Web API lookups; on a miss each is a request: ask both at once.
        names, private = await asyncio.gather(
            self.users.names(client, route.team, [route.user, *wanted]),
            self._is_private(client, route),
        )
        text = normalize_text(str(event.get("text") or ""), bot_user_id=bot_user_id, names=names)
        # An empty text (a bare mention) still goes to the core: it owns the reply policy.
        if route.assistant_thread and route.reply_thread_ts:
            self._maybe_title(client, route, text)

        message = IncomingMessage(
            platform=PLATFORM,
            team=route.team,
            channel=route.channel,
            thread=route.session_thread,
            user=route.user,
            text=text,
            message_id=route.message_ts,
            user_name=names.get(route.user),
            is_dm=route.is_dm,
            admission=delivery.admission,  # a re-run of this event is not counted again
            # Only this event's files: a thread's earlier files are never fetched again.
            attachments=self.files.attachments(event, client.token),
            is_private=private,
            sent_at=_sent_at(route.message_ts),
            # Asked only when the record of heard messages has no coverage here.
            earlier=earlier_fetcher(
                client,
                team=route.team,
                channel=route.channel,
                thread_ts=route.session_thread
                if route.session_thread != route.message_ts
                else None,
                before_ts=route.message_ts,
                bot_user_id=bot_user_id,
                bot_id=bot_id,
            ),
        )
        target = ReplyTarget(
            team=route.team,
            channel=route.channel,
            user=route.user,
            message_ts=route.message_ts,
            thread_ts=route.reply_thread_ts,
            assistant_thread=route.assistant_thread,
        )
        earlier = EarlierReply.from_notes(delivery.entry.notes)
        if earlier is None and delivery.retried:
            # The first attempt may have died between posting and noting it: ask Slack once.
            found = await find_earlier_reply(
                client,
                channel=route.channel,
                thread_ts=route.reply_thread_ts,
                after_ts=route.message_ts,
                bot_user_id=bot_user_id,
                bot_id=bot_id,
            )
            if found:
                earlier = EarlierReply(found, streamed=bool(route.reply_thread_ts))
        sink = SlackReplySink(
            client,
            target,
            self.config,
            self.caps,
            earlier=earlier,
            on_posted=lambda posted: delivery.note(**posted.as_notes()),
            retried=delivery.retried,
        )
        emit(
            _LOG,
            "slack_turn_start",
            team=route.team,
            channel=route.channel,
            event_id=data.get("event_id"),
            retry=data.get("retry"),
            tries=delivery.entry.tries,
            dm=route.is_dm,
            mention=route.via_mention,
            queued_ms=round(max(0.0, time.time() - received) * 1000, 1),
        )
        async with self.turn_slot():
            return await self._run_turn(message, sink, durable=delivery.durable)

    @contextlib.asynccontextmanager
    async def turn_slot(self) -> AsyncIterator[None]:
        """A turn's place: admitted by the loop's load guard, within the turn-concurrency
        limit. New messages' turns and turns resumed after their approvals both take one."""
        waiting = metrics.TURNS_WAITING.labels(PLATFORM)
        waiting.inc()
        try:
            await self.guard.admit()
            await self._turns.acquire()
        finally:
            waiting.dec()
        try:
            yield
        finally:
            self._turns.release()

    def resumed_sink(self, client: AsyncWebClient, resume: Resume) -> SlackReplySink:
        """The sink of a turn resumed after its approvals, in the thread it was asked in: built
        from what the approval stored, so a process that never saw the turn can answer."""
        msg = resume.message
        target = ReplyTarget(
            team=msg.team,
            channel=msg.channel,
            user=msg.user,
            message_ts=msg.message_id or msg.thread or "",
            thread_ts=msg.thread,
            assistant_thread=msg.is_dm and msg.thread is not None,
        )
        return SlackReplySink(client, target, self.config, self.caps)

    async def _is_private(self, client: AsyncWebClient, route: Route) -> bool:
        if route.is_dm:
            return False
        return await self.channels.is_private(client, route.team, route.channel)

    async def _run_turn(
        self, message: IncomingMessage, sink: SlackReplySink, *, durable: bool
    ) -> str:
        outcome = "answered"
        try:
            await self.core.handle_message(message, sink)
        except asyncio.CancelledError:
            # Shutdown ran out of grace. A durable entry is handed back and answered by another
            # replica (or this one after its restart); otherwise Slack will not redeliver an
            # acked event, so say so and clear the working reaction/status.
            if not sink.finished and not durable:
                emit(_LOG, "slack_turn_cancelled", logging.WARNING, channel=message.channel)
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(
                        asyncio.shield(sink.finish(SHUTDOWN_APOLOGY, error=True)), timeout=3.0
                    )
            elif not sink.finished:
                sink.abandon()  # no late progress or reaction after the hand-back
            raise
        except Exception as exc:
            outcome = "failed"
            metrics.ERRORS.labels(PLATFORM, "turn_failed").inc()
            emit(
                _LOG,
                "slack_turn_failed",
                logging.ERROR,
                channel=message.channel,
                error=type(exc).__name__,
            )
        if not sink.finished:  # the core must always finish; never leave the person hanging
            emit(_LOG, "slack_turn_unfinished", logging.WARNING, channel=message.channel)
            await sink.finish(APOLOGY, error=True)
        return outcome

    def _maybe_title(self, client: AsyncWebClient, route: Route, text: str) -> None:
        key = (route.team, route.channel, str(route.reply_thread_ts))
        if route.team in self.caps.no_assistant or key in self._titled:
            return
        self._titled[key] = True
        title = " ".join(text.split())[:60] or "New chat"

        async def set_title() -> None:
            try:
                await client.assistant_threads_setTitle(
                    channel_id=route.channel, thread_ts=str(route.reply_thread_ts), title=title
                )
            except Exception as exc:
                api_failed(_LOG, "assistant.threads.setTitle", exc)

        self.tasks.spawn(set_title(), name="slack-set-title")

    async def on_thread_started(
        self, body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient
    ) -> None:
        metrics.EVENTS.labels(PLATFORM, "assistant_thread_started").inc()
        thread = event.get("assistant_thread") or {}
        channel, thread_ts = thread.get("channel_id"), thread.get("thread_ts")
        if not channel or not thread_ts or not self.config.suggested_prompts:
            _handled(body, "done")
            return
        prompts = [{"title": t, "message": m} for t, m in self.config.suggested_prompts[:4]]
        try:
            await client.assistant_threads_setSuggestedPrompts(
                channel_id=channel, thread_ts=thread_ts, title="Try asking", prompts=prompts
            )
        except Exception as exc:
            api_failed(_LOG, "assistant.threads.setSuggestedPrompts", exc)
        _handled(body, "done")

    async def on_home_opened(
        self,
        body: dict[str, Any],
        event: dict[str, Any],
        context: AsyncBoltContext,
        client: AsyncWebClient,
    ) -> None:
        """The App Home tab opened: publish that person's view (`adapters/slack/home.py`).
        Not through the inbox: publishing again is harmless, and a lost one is redone at the
        next open."""
        metrics.EVENTS.labels(PLATFORM, "app_home_opened").inc()
        _handled(body, await self.home.opened(event, team=_team(context, body), client=client))

    async def on_ignored_event(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        metrics.EVENTS.labels(PLATFORM, str(event.get("type"))).inc()
        _handled(body, "ignored")

    async def on_app_uninstalled(self, body: dict[str, Any], context: AsyncBoltContext) -> None:
        metrics.EVENTS.labels(PLATFORM, "app_uninstalled").inc()
        if self.installation_store is not None:
            await self.installation_store.async_delete_all(
                enterprise_id=context.enterprise_id, team_id=context.team_id
            )
        emit(_LOG, "slack_app_uninstalled", team=context.team_id, enterprise=context.enterprise_id)
        _handled(body, "done")

    async def on_tokens_revoked(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        metrics.EVENTS.labels(PLATFORM, "tokens_revoked").inc()
        store = self.installation_store
        tokens = event.get("tokens") or {}
        if store is None:
            emit(_LOG, "slack_tokens_revoked", team=context.team_id, bot=bool(tokens.get("bot")))
            _handled(body, "done")
            return
        for user_id in tokens.get("oauth") or []:
            await store.async_delete_installation(
                enterprise_id=context.enterprise_id, team_id=context.team_id, user_id=user_id
            )
        if tokens.get("bot"):
            await store.async_delete_all(
                enterprise_id=context.enterprise_id, team_id=context.team_id
            )
        emit(_LOG, "slack_tokens_revoked", team=context.team_id, bot=bool(tokens.get("bot")))
        _handled(body, "done")

    async def on_error(self, error: Exception, body: dict[str, Any]) -> None:
        metrics.ERRORS.labels(PLATFORM, "listener_failed").inc()
        kind = body.get("event", {}).get("type") if isinstance(body.get("event"), dict) else None
        emit(
            _LOG,
            "slack_listener_failed",
            logging.ERROR,
            error=type(error).__name__,
            kind=kind or body.get("type") or body.get("command"),
        )


def _sent_at(ts: str | None) -> datetime | None:
    """A Slack message ts ("1700000000.000100", Unix seconds) as a UTC date."""
    try:
        return datetime.fromtimestamp(float(ts), UTC) if ts else None
    except (TypeError, ValueError, OverflowError, OSError):
        return None
