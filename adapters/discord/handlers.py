"""Gateway messages in, core turns out.

`route` decides cheaply, on the event loop, whether a message is for the bot (a mention in a
guild channel, anything in a DM, a follow-up in a thread where the bot answers); a message that
is goes to the core's durable inbox (its ids only, never its text), and the turn runs when an
inbox worker takes it: in this process (the message object is kept at hand for it), or, if this
process died first, in another one, which fetches the message again over REST. Each message id
is accepted once (the gateway may replay dispatches after a RESUME, and several processes may
share a bot token behind a gateway proxy); a re-run posts its parts with the same nonces, so
Discord hands back what the first attempt posted and it is edited instead of sent again.

Keys: a guild conversation is `discord:<guild>:<channel>:<thread or ->`; a DM is
`discord:@dm:<DM channel>:-`, and the person in it `discord:@dm:<user>`.

Deletes and edits (raw gateway events: the client keeps no message cache) go through the same
inbox, in the order of the conversation the message belongs to, so they run after its turn:
a deletion erases the message and what was drawn from it (`BotCore.message_deleted`), an edit
rewrites it (`BotCore.message_edited`) and is never answered, except an edit that brings a
message to the bot for the first time (its first mention): the core finds nothing stored for
it, so it is answered, once (a later edit finds it stored).
A bulk deletion names at most `MAX_BULK_DELETE` messages (Discord's own limit); more are cut,
with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import discord
from cachetools import TTLCache

from adapters.common.loadguard import LoopGuard
from adapters.common.logs import emit
from adapters.common.tasks import TaskTracker
from adapters.discord.attachments import DiscordFiles
from adapters.discord.config import DiscordConfig
from adapters.discord.earlier_answer import ContinuingReplySink, as_notes, find_earlier_answer
from adapters.discord.heard import earlier_fetcher, hear_message
from adapters.discord.normalize import mentions_bot, readable_text, thread_name
from adapters.discord.quoting import compose, quoted_blocks, replied_author_id
from adapters.discord.rest_errors import REST_ERRORS, apologize_unread, rest_error_fields
from adapters.discord.traits import INBOX_KIND as INBOX_KIND
from bot import metrics
from bot.core import BotCore
from bot.inbox import Delivery, InboxItem, RetryLater
from bot.keys import SessionKey, TeamKey
from bot.messages import IncomingMessage, MessageRef
from bot.platforms import DM_SCOPE
from tools.keylocks import KeyLocks

_LOG = logging.getLogger(__name__)
PLATFORM = "discord"
DM_TEAM = DM_SCOPE  # a DM has no guild: the person's DM scope (bot.platforms)
APOLOGY = "Sorry, something went wrong while answering. Please try again."
SHUTDOWN_APOLOGY = "Sorry, I was restarting and had to stop before answering. Please ask again."
_ANSWERED_TYPES = (discord.MessageType.default, discord.MessageType.reply)
MAX_ALLOWED_USERS = 100  # allowed_mentions.users: Discord's limit
MAX_BULK_DELETE = 100  # ids one MESSAGE_DELETE_BULK may name (Discord's bulk-delete limit)
QUOTE_MEMORY_SECONDS = 7 * 86400  # how long a quoted message's replies are remembered here

Kind = Literal["dm", "reply", "new_thread", "thread", "thread_maybe"]


@dataclass(frozen=True)
class Route:
    kind: Kind
    guild: str  # guild id, or DM_TEAM
    channel: str  # the parent channel for threads
    thread: str | None

    def session(self, message_id: int) -> SessionKey:
        """The conversation whose order the message keeps (a new thread: the thread Discord
        will give the message's own id)."""
        thread = str(message_id) if self.kind == "new_thread" else self.thread
        return SessionKey(PLATFORM, self.guild, self.channel, thread)


def is_private_place(channel: object) -> bool:
    """A guild place not every member can read (the audience rule, `bot.audience`): a private
    thread, or a channel (a thread's parent) whose permissions deny @everyone VIEW_CHANNEL.
    What cannot be told (a parent not in discord.py's cache) counts as private, the narrowest."""
    if isinstance(channel, discord.Thread):
        if channel.type == discord.ChannelType.private_thread:
            return True
        parent = channel.parent
        if parent is None:
            return True
        channel = parent
    if not isinstance(channel, discord.abc.GuildChannel):
        return True
    try:
        return not channel.permissions_for(channel.guild.default_role).view_channel
    except Exception:  # a partial or unexpected channel: never widen
        return True


def addresses_bot(message: discord.Message, me: discord.abc.User, role_id: int | None) -> bool:
    """A mention of the bot (or its managed role) in the text; or a Reply to one of its
    messages: Discord puts the replied-to author in `mentions` when the reply pings, and names
    the message replied to in `referenced_message` (also when the person turned the ping off)."""
    if mentions_bot(message.content, bot_id=me.id, bot_role_id=role_id):
        return True
    if any(user.id == me.id for user in message.mentions):
        return True
    return replied_author_id(message) == me.id


def is_other_bot(message: discord.Message) -> bool:
    """A bot's or a webhook's message (never answered unless configured, `bots=`)."""
    return bool(message.author.bot) or message.webhook_id is not None


def safe_mentions(message: discord.Message) -> discord.AllowedMentions:
    """No @everyone/@here, no roles, no reply ping; only users the asker named may be pinged,
    the first `MAX_ALLOWED_USERS` of them (Discord rejects a message that allows more)."""
    named = list({u.id: u for u in message.mentions if not u.bot}.values())[:MAX_ALLOWED_USERS]
    return discord.AllowedMentions(everyone=False, roles=False, users=named, replied_user=False)


class DiscordHandlers:
    def __init__(
        self,
        core: BotCore,
        config: DiscordConfig,
        tasks: TaskTracker,
        client: discord.Client | None = None,
    ) -> None:
        self.core = core
        self.config = config
        self.tasks = tasks
        self.client = client  # fetches a message again when another process accepted it
        self.files = DiscordFiles(config.api_url)  # attachments: Discord's CDN only, capped
        self.guard = LoopGuard()
        # Messages accepted here, kept for the inbox worker: with one process it runs them here;
        # with several on one Redis, whichever worker reads first does (the others refetch).
        self.recent: TTLCache[int, discord.Message] = TTLCache(maxsize=20_000, ttl=3600)
        # Accepted here and not handled here yet (tests wait on it). Bounded: with several
        # processes on one Redis, another one may run what this one accepted.
        self.accepted: TTLCache[int, bool] = TTLCache(maxsize=20_000, ttl=3600)
        self.handling = 0
        # Threads the bot opened or answered in: follow-ups there need no mention.
        self.threads: TTLCache[int, bool] = TTLCache(maxsize=100_000, ttl=7 * 86400)
        # Threads where the store said the bot has no conversation: chatty threads the bot is
        # not part of cost one store read per 30 s, not one per message. A mention (or an
        # answer by this process) puts a thread in `threads`, which is checked first.
        self.quiet_threads: TTLCache[int, bool] = TTLCache(maxsize=100_000, ttl=30)
        self._turns = asyncio.Semaphore(config.max_concurrent_turns)
        self.arrival: KeyLocks[int] = KeyLocks()  # per channel, see on_message
        # Deleted on Discord, seen here: a turn still waiting for one is not run.
        self.deleted: TTLCache[int, bool] = TTLCache(maxsize=20_000, ttl=3600)
        # Messages quoted by replies answered here: replied-to id -> (channel, reply ids).
        self.quoted_by: TTLCache[int, tuple[int, tuple[int, ...]]] = TTLCache(
            maxsize=50_000, ttl=QUOTE_MEMORY_SECONDS
        )
        # The latest edited version of a message, kept for the inbox worker (else refetched).
        self.edits: TTLCache[int, discord.Message] = TTLCache(maxsize=20_000, ttl=3600)
        # Deletes and edits accepted here and not applied here yet (tests wait on it).
        self.pending_changes: TTLCache[str, bool] = TTLCache(maxsize=20_000, ttl=3600)

    # routing ---------------------------------------------------------------------------------

    def route(
        self,
        message: discord.Message,
        me: discord.ClientUser,
        *,
        plain: bool = False,
        bots: bool = False,
    ) -> Route | None:
        """Where a message addressed to the bot is answered, or None. `plain`: route a guild
        message that does not address it as if it did (for places with `reply=all`); `bots`:
        route another bot's message too (for places with `bots=mentions`)."""
        author = message.author
        if author.id == me.id:
            return None
        if is_other_bot(message) and not (self.config.allow_bots or bots):
            return None
        if message.type not in _ANSWERED_TYPES:
            return None
        channel = message.channel
        if message.guild is None:
            return Route("dm", DM_TEAM, str(channel.id), None)
        guild = str(message.guild.id)
        role = message.guild.self_role
        mentioned = addresses_bot(message, me, role.id if role else None)
        if isinstance(channel, discord.Thread):
            parent = str(channel.parent_id)
            if plain or mentioned or channel.owner_id == me.id or channel.id in self.threads:
                return Route("thread", guild, parent, str(channel.id))
            if channel.id in self.quiet_threads:
                return None
            return Route("thread_maybe", guild, parent, str(channel.id))
        if not mentioned and not plain:
            return None
        if self.config.threads_in(guild) and isinstance(channel, discord.TextChannel):
            return Route("new_thread", guild, str(channel.id), None)
        return Route("reply", guild, str(channel.id), None)

    async def shaped_route(self, message: discord.Message, me: discord.ClientUser) -> Route | None:
        """`route`, then the place's `reply` setting (`/config`) for a guild message that does
        not mention the bot: `mention` answers no follow-up in threads, `threads` (the default)
        follow-ups in threads the bot is in, `all` every message. One cached read, no store
        round trip (`bot.place_settings_cache`); DMs and mentions never read it."""
        route = self.route(message, me)
        if message.guild is None or (route is not None and route.kind in ("reply", "new_thread")):
            return route
        if route is None and is_other_bot(message) and not self.config.allow_bots:
            return await self._bot_route(message, me)
        if route is not None:
            role = message.guild.self_role
            if addresses_bot(message, me, role.id if role else None):
                return route
        elif self.route(message, me, plain=True) is None:
            return None  # not one the bot could answer at all (its own, another bot's, a pin)
        team = TeamKey(PLATFORM, str(message.guild.id))
        channel = message.channel
        place = str(channel.parent_id if isinstance(channel, discord.Thread) else channel.id)
        reply = (await self.core.place_policy(team, place)).reply
        if reply == "all":
            return self.route(message, me, plain=True)
        if reply == "mention":
            return None
        return route

    async def _bot_route(self, message: discord.Message, me: discord.ClientUser) -> Route | None:
        """Another bot's message in a guild: answered only when it mentions this bot where the
        place's `bots` is `mentions`, within the pair budget (`bot.bot_pairs`)."""
        guild = message.guild
        if guild is None or message.author.id == me.id:
            return None
        role = guild.self_role
        if not addresses_bot(message, me, role.id if role else None):
            return None
        channel = message.channel
        place = str(channel.parent_id if isinstance(channel, discord.Thread) else channel.id)
        team = TeamKey(PLATFORM, str(guild.id))
        if (await self.core.place_policy(team, place)).bots != "mentions":
            return None
        if not await self.core.admit_bot(team, place, str(message.author.id)):
            return None  # the pair's budget is spent: quiet until the window ends
        return self.route(message, me, bots=True)

    async def on_message(self, message: discord.Message, me: discord.ClientUser) -> None:
        hear_message(self.core, message, me)  # kept for later mentions here (bot.memory.heard)
        # In arrival order per channel up to the inbox: a message whose route reads the place's
        # settings (an await) must not be overtaken by a later one that needs none.
        async with self.arrival.hold(message.channel.id):
            await self._take(message, me)

    async def _take(self, message: discord.Message, me: discord.ClientUser) -> None:
        route = await self.shaped_route(message, me)
        if route is None:
            return
        metrics.EVENTS.labels(PLATFORM, "message").inc()
        item = InboxItem(
            kind=INBOX_KIND,
            session=route.session(message.id).id,
            body={
                "channel": str(message.channel.id),
                "message": str(message.id),
                "route": [route.kind, route.guild, route.channel, route.thread],
            },
            dedup=(f"discord:{message.id}",),
        )
        self.recent[message.id] = message  # before the put: a local worker may take it at once
        self.accepted[message.id] = True
        if not await self.core.enqueue(item):
            self.accepted.pop(message.id, None)
            metrics.DEDUPLICATED_EVENTS.labels(PLATFORM).inc()
            emit(_LOG, "discord_message_duplicate", message=str(message.id))

    # deletes and edits ------------------------------------------------------------------------

    def conversation_of(self, channel_id: int, guild_id: int | None, message_id: int) -> str:
        """The session a message of this channel belongs to, as `route` would give it, from
        the ids alone (a deleted message cannot be read): a thread's, a DM's, in a guild
        that answers in threads the thread opened on the message, else the channel's."""
        if guild_id is None:
            return SessionKey(PLATFORM, DM_TEAM, str(channel_id)).id
        guild = str(guild_id)
        channel = self.client.get_channel(channel_id) if self.client is not None else None
        if isinstance(channel, discord.Thread) and channel.parent_id:
            return SessionKey(PLATFORM, guild, str(channel.parent_id), str(channel.id)).id
        if self.config.threads_in(guild) and not isinstance(channel, discord.Thread):
            return SessionKey(PLATFORM, guild, str(channel_id), str(message_id)).id
        return SessionKey(PLATFORM, guild, str(channel_id)).id

    async def on_deleted(
        self, message_ids: Iterable[int], channel_id: int, guild_id: int | None
    ) -> None:
        """MESSAGE_DELETE / MESSAGE_DELETE_BULK: the deletions into the inbox, one entry per
        conversation, put before this handler first waits (discord.py runs the next gateway
        event meanwhile: a message after them must not overtake them)."""
        ids = sorted({int(i) for i in message_ids})
        if len(ids) > MAX_BULK_DELETE:
            emit(
                _LOG,
                "discord_bulk_delete_capped",
                logging.WARNING,
                ids=len(ids),
                kept=MAX_BULK_DELETE,
            )
            ids = ids[:MAX_BULK_DELETE]
        by_session: dict[str, list[int]] = {}
        for message_id in ids:
            metrics.EVENTS.labels(PLATFORM, "message_delete").inc()
            self.deleted[message_id] = True
            session = self.conversation_of(channel_id, guild_id, message_id)
            by_session.setdefault(session, []).append(message_id)
        guild = str(guild_id) if guild_id else DM_TEAM
        for session, group in by_session.items():
            key = f"discord:deleted:{group[0]}:{len(group)}"
            await self._put_change("deleted", group, channel_id, guild, session, key)

    async def on_edited(self, message: discord.Message, me: discord.ClientUser) -> None:
        """MESSAGE_UPDATE of a person's text (not an embed, a pin or a flag: those leave
        `edited_timestamp` as it was, unset for a message never edited). One inbox entry in
        the message's conversation; the worker applies it, or answers it (`_apply_change`)."""
        if message.edited_at is None:
            return
        author = getattr(message, "author", None)
        if author is None:
            await self._put_partial_edit(message)
            return
        if author.id == me.id:
            return
        if (author.bot or message.webhook_id is not None) and not self.config.allow_bots:
            return
        if message.type not in _ANSWERED_TYPES:
            return
        metrics.EVENTS.labels(PLATFORM, "message_update").inc()
        route = self.route(message, me)
        guild_id = message.guild.id if message.guild is not None else None
        if route is not None:
            session = route.session(message.id).id
        else:
            session = self.conversation_of(message.channel.id, guild_id, message.id)
        self.edits[message.id] = message
        await self._put_change(
            "edited",
            [message.id],
            message.channel.id,
            str(guild_id) if guild_id else DM_TEAM,
            session,
            f"discord:edited:{message.id}:{message.edited_at.timestamp()}",
            route=route,
        )

    async def _put_partial_edit(self, message: discord.Message) -> None:
        """A MESSAGE_UPDATE without `author` (a partial payload): who wrote the message, and
        whether it is for the bot, are only known from the whole message, which the worker
        fetches over REST when it applies the edit (`_apply_edit`)."""
        metrics.EVENTS.labels(PLATFORM, "message_update").inc()
        emit(_LOG, "discord_partial_update", message=str(message.id))
        guild_id = message.guild.id if message.guild is not None else None
        edited = message.edited_at.timestamp() if message.edited_at is not None else 0.0
        await self._put_change(
            "edited",
            [message.id],
            message.channel.id,
            str(guild_id) if guild_id else DM_TEAM,
            self.conversation_of(message.channel.id, guild_id, message.id),
            f"discord:edited:{message.id}:{edited}",
            refetch=True,
        )

    async def _put_change(
        self,
        kind: str,
        message_ids: list[int],
        channel_id: int,
        guild: str,
        session: str,
        key: str,
        *,
        route: Route | None = None,
        refetch: bool = False,
    ) -> None:
        body: dict[str, Any] = {
            "change": kind,
            "guild": guild,
            "channel": str(channel_id),
            "messages": [str(i) for i in message_ids],
            "key": key,
        }
        if route is not None:
            body["route"] = [route.kind, route.guild, route.channel, route.thread]
        if refetch:
            body["refetch"] = True
        self.pending_changes[key] = True
        if not await self.core.enqueue(
            InboxItem(kind=INBOX_KIND, session=session, body=body, dedup=(key,))
        ):
            self.pending_changes.pop(key, None)
            metrics.DEDUPLICATED_EVENTS.labels(PLATFORM).inc()

    async def _apply_change(self, delivery: Delivery) -> None:
        """A deletion or edit taken from the inbox, applied by the core. An edit of a message
        the bot never took that now addresses it (its first mention) is answered instead."""
        data = delivery.body
        kind, key = str(data.get("change")), str(data.get("key") or "")
        retry = False
        try:
            ids = [str(i) for i in (data.get("messages") or [])][:MAX_BULK_DELETE]
            ref = MessageRef(PLATFORM, str(data.get("guild") or ""), tuple(ids))
            if kind == "deleted":
                result = await self.core.message_deleted(ref)
                emit(_LOG, "discord_message_deleted", found=result.found, failed=result.failed)
                retry = result.failed or await self._unquote(ref)
            elif ids:
                retry = await self._apply_edit(delivery, int(ids[0]), ref)
            if retry:
                raise RetryLater(f"a Discord message {kind} could not be applied now")
        finally:
            if not retry:
                self.pending_changes.pop(key, None)

    async def _unquote(self, ref: MessageRef) -> bool:
        """The replies answered here that quoted a deleted message keep its words in what the
        bot stored of them (`quoting`): each is read again (Discord now gives it a deleted
        reference) and applied as an edit, so the quote goes with the rest of the deleted
        message. Known for replies this process answered within `QUOTE_MEMORY_SECONDS` (kept
        in memory: after a restart a deletion leaves earlier quotes in place, a known gap).
        True: try again later."""
        me = self.client.user if self.client is not None else None
        for quoted in ref.message_ids:
            found = self.quoted_by.pop(int(quoted), None)
            if found is None or me is None:
                continue
            channel_id, replies = found
            for reply_id in replies:
                reply = await self._fetch(channel_id, reply_id)
                if reply is None:
                    continue  # deleted too: its own deletion erases it
                change = await self.core.message_edited(
                    MessageRef(PLATFORM, ref.team, (str(reply_id),)), self._text(reply, me)
                )
                emit(_LOG, "discord_quote_erased", found=change.found, failed=change.failed)
                if change.failed:
                    self.quoted_by[int(quoted)] = found
                    return True
        return False

    def _remember_quote(self, message: discord.Message) -> None:
        """Note that this reply quotes another message (see `_unquote`)."""
        reference = message.reference
        if message.type != discord.MessageType.reply or reference is None:
            return
        if not isinstance(reference.resolved, discord.Message) or reference.message_id is None:
            return
        channel, replies = self.quoted_by.get(reference.message_id, (message.channel.id, ()))
        if message.id not in replies:
            self.quoted_by[reference.message_id] = (channel, (*replies, message.id)[-20:])

    async def _apply_edit(self, delivery: Delivery, message_id: int, ref: MessageRef) -> bool:
        """Apply an edit; True when the store could not be reached (try again later)."""
        data = delivery.body
        message = self.edits.pop(message_id, None)
        if message is None:
            try:
                message = await self._fetch(int(data.get("channel") or 0), message_id)
            except discord.RateLimited:
                return True  # applied later, when Discord lets the message be read
        me = self.client.user if self.client is not None else None
        if message is None or me is None:
            return False  # deleted meanwhile (its deletion follows), or not connected
        if data.get("refetch"):
            # A partial update: the message as it is now says who wrote it and whether it is
            # for the bot, as `on_edited` would have from a whole payload.
            author = message.author
            if author.id == me.id or (
                (author.bot or message.webhook_id is not None) and not self.config.allow_bots
            ):
                return False
            if message.type not in _ANSWERED_TYPES:
                return False
            found = self.route(message, me)
            data = {k: v for k, v in data.items() if k != "route"}
            if found is not None:
                data["route"] = [found.kind, found.guild, found.channel, found.thread]
        result = await self.core.message_edited(ref, self._text(message, me))
        emit(_LOG, "discord_message_edited", found=result.found, failed=result.failed)
        if result.failed:
            return True
        routed = data.get("route")
        if result.found or not routed or message_id in self.deleted:
            return False  # kept and now rewritten, or not for the bot: never answered
        # Never taken before, and it addresses the bot now: its first mention, answered once
        # (the entries of one conversation run in order, so a second edit finds it stored;
        # the key guards a process running without the inbox).
        if not await self.core.first_delivery(f"discord:edit-answer:{message_id}"):
            return False
        kind_, guild, channel, thread = routed
        route = Route(kind_, str(guild), str(channel), thread and str(thread))
        await self._answer(message, route, me, delivery)
        return False

    # the turn --------------------------------------------------------------------------------

    async def on_queued(self, delivery: Delivery) -> None:
        """An inbox entry taken by this process: the turn (or a delete or edit to apply)."""
        data = delivery.body
        message_id = int(data.get("message") or 0)
        self.handling += 1
        try:
            if data.get("change") in ("deleted", "edited"):
                await self._apply_change(delivery)
                return
            if message_id in self.deleted:
                return  # deleted on Discord before its turn ran: not answered
            kind, guild, channel, thread = data["route"]
            route = Route(kind, str(guild), str(channel), thread and str(thread))
            message = self.recent.pop(message_id, None)
            if message is None:
                try:
                    message = await self._fetch(int(data.get("channel") or 0), message_id)
                except discord.RateLimited as exc:
                    await self._unread(int(data.get("channel") or 0), message_id, exc)
                    return
            if message is None:
                return  # deleted meanwhile, or out of reach: nothing to answer
            me = self.client.user if self.client is not None else None
            if me is None:
                return
            await self._answer(message, route, me, delivery)
        finally:
            self.handling -= 1
            if not data.get("change"):
                self.accepted.pop(message_id, None)

    async def _unread(self, channel_id: int, message_id: int, exc: discord.RateLimited) -> None:
        """The message could not be read again (a long rate limit): say so, not nothing."""
        emit(_LOG, "discord_message_unread", logging.WARNING, **rest_error_fields(exc))
        if self.client is None:
            return
        try:
            await apologize_unread(self.client, channel_id, message_id, APOLOGY)
        except REST_ERRORS as failed:
            emit(_LOG, "discord_reply_failed", logging.WARNING, **rest_error_fields(failed))

    async def _fetch(self, channel_id: int, message_id: int) -> discord.Message | None:
        """The message again, over REST (another process accepted it and died); a rate limit
        past discord.py's cap (`discord.RateLimited`) is raised to the caller."""
        client = self.client
        if client is None:
            return None
        try:
            channel = client.get_channel(channel_id) or await client.fetch_channel(channel_id)
            if not isinstance(channel, discord.abc.Messageable):
                return None
            return await channel.fetch_message(message_id)
        except discord.HTTPException as exc:  # RateLimited goes to the caller (the apology)
            emit(
                _LOG,
                "discord_message_unavailable",
                logging.WARNING,
                message=str(message_id),
                status=exc.status,
            )
            return None

    async def _answer(
        self,
        message: discord.Message,
        route: Route,
        me: discord.ClientUser,
        delivery: Delivery,
    ) -> None:
        if route.kind == "thread_maybe":
            session = SessionKey(PLATFORM, route.guild, route.channel, route.thread)
            if not await self.core.in_conversation(session):
                self.quiet_threads[int(route.thread or 0)] = True
                return
            self.threads[int(route.thread or 0)] = True
        async with self.turn_slot():
            await self._run_turn(message, route, me, delivery)

    @contextlib.asynccontextmanager
    async def turn_slot(self) -> AsyncIterator[None]:
        """A turn's place: admitted by the loop's load guard, within the turn-concurrency
        limit. New messages' turns and turns resumed after their approvals both take one."""
        await self.guard.admit()
        async with self._turns:
            yield

    async def _run_turn(
        self,
        message: discord.Message,
        route: Route,
        me: discord.ClientUser,
        delivery: Delivery,
    ) -> None:
        words = self._words(message, me)
        text = compose(words, quoted_blocks(message, me))
        self._remember_quote(message)
        target: discord.abc.Messageable = message.channel
        reply_to: discord.Message | None = message if route.kind == "reply" else None
        thread = route.thread
        if route.kind == "new_thread":
            opened = await self._earlier_thread(message) if delivery.retried else None
            opened = opened or await self._open_thread(message, words or text)
            if opened is None:
                reply_to = message  # no thread (permissions): answer in place instead
            else:
                target, thread = opened, str(opened.id)
        if thread is not None:
            self.threads[int(thread)] = True
        incoming = IncomingMessage(
            platform=PLATFORM,
            team=route.guild,
            channel=route.channel,
            thread=thread,
            user=str(message.author.id),
            text=text,
            message_id=str(message.id),
            user_name=message.author.display_name,
            is_dm=route.kind == "dm",
            is_private=route.kind != "dm" and is_private_place(message.channel),
            thread_is_place=isinstance(message.channel, discord.Thread)
            and message.channel.type == discord.ChannelType.private_thread,
            attachments=tuple(self.files.attachment(a) for a in message.attachments),
            earlier=earlier_fetcher(message, me),  # asked only when the record has no coverage
            admission=delivery.admission,  # a re-run of this event is not counted again
        )
        channel_id = int(thread) if thread is not None else message.channel.id
        earlier: list[discord.Message] = []
        if delivery.retried:
            earlier = await find_earlier_answer(
                delivery.entry.notes,
                target,
                channel_id,
                message,
                me,
                replied=reply_to is not None,
                own_thread=thread == str(message.id),
            )
            emit(_LOG, "discord_turn_rerun", message=str(message.id), earlier_parts=len(earlier))

        async def noted(channel: int, parts: list[int]) -> None:
            await delivery.note(**as_notes(channel, parts))

        sink = ContinuingReplySink(
            target=target,
            config=self.config,
            allowed_mentions=safe_mentions(message),
            nonce_seed=str(message.id),
            reply_to=reply_to,
            earlier=earlier,
            on_posted=noted,
            channel_id=channel_id,
        )
        try:
            await self.core.handle_message(incoming, sink)
        except asyncio.CancelledError:
            # A durable entry is handed back and answered by another process (or this one
            # after a restart); otherwise nobody will, so say so.
            if not delivery.durable:
                await asyncio.shield(sink.finish(SHUTDOWN_APOLOGY, error=True))
            raise
        except Exception as exc:
            metrics.ERRORS.labels(PLATFORM, "turn_failed").inc()
            emit(_LOG, "discord_turn_failed", logging.ERROR, error=type(exc).__name__)
            await sink.finish(APOLOGY, error=True)
        if not sink.finished:
            await sink.finish(APOLOGY, error=True)

    @classmethod
    def _text(cls, message: discord.Message, me: discord.ClientUser) -> str:
        """The message's text as the core sees it: what it quotes or forwards (`quoting`),
        then the person's words."""
        return compose(cls._words(message, me), quoted_blocks(message, me))

    @staticmethod
    def _words(message: discord.Message, me: discord.ClientUser) -> str:
        """The person's own words (mentions made readable)."""
        role = message.guild.self_role if message.guild else None
        return readable_text(
            message.content,
            bot_id=me.id,
            bot_role_id=role.id if role else None,
            users={u.id: u.display_name for u in message.mentions},
            roles={r.id: r.name for r in message.role_mentions},
            channels={c.id: getattr(c, "name", str(c.id)) for c in message.channel_mentions},
        )

    async def _earlier_thread(self, message: discord.Message) -> discord.Thread | None:
        """The thread a first attempt opened on this message (its id is the message's)."""
        client = self.client
        if client is None:
            return None
        found = client.get_channel(message.id)
        if found is None:
            try:
                found = await client.fetch_channel(message.id)
            except REST_ERRORS:
                return None
        return found if isinstance(found, discord.Thread) else None

    async def _open_thread(self, message: discord.Message, text: str) -> discord.Thread | None:
        try:
            return await message.create_thread(
                name=thread_name(text, self.config.thread_name_chars), auto_archive_duration=1440
            )
        except REST_ERRORS as exc:  # answered in place instead
            emit(_LOG, "discord_thread_failed", logging.WARNING, **rest_error_fields(exc))
            return None
