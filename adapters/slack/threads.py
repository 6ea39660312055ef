"""Which channel threads the bot takes part in (so follow-ups need no mention).

Threads the bot answered in this process are remembered locally. Otherwise (another process
answered, or this one restarted) the core is asked whether it holds a conversation for that
thread (its durable store is shared by all processes, and the mention is stored before any reply
is posted); when the record of heard messages holds the whole thread, the core's "no" is final;
failing that Slack is asked once with conversations.replies. Answers are cached:
a "yes" for long, a "no" only briefly, because the bot may be mentioned there next.

What was said before a mention comes from the record of heard messages (`bot.memory.heard`);
`earlier_fetcher` is the one call made when that record has no coverage there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from cachetools import TLRUCache
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common.logs import emit
from adapters.slack.clients import no_wait_client
from adapters.slack.errors import api_failed
from adapters.slack.heard import heard_message
from bot import metrics
from bot.messages import FetchEarlier, HeardMessage

_LOG = logging.getLogger(__name__)

_Key = tuple[str, str, str]


class ThreadTracker:
    def __init__(
        self,
        *,
        positive_ttl: float = 7 * 86400.0,
        negative_ttl: float = 30.0,
        maxsize: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # A "yes" lives `positive_ttl`, a "no" only `negative_ttl` (the bot may be mentioned).
        self._known: TLRUCache[_Key, bool] = TLRUCache(
            maxsize, lambda _k, found, now: now + (positive_ttl if found else negative_ttl), clock
        )
        self._inflight: dict[_Key, asyncio.Task[bool]] = {}

    def mark(self, team: str, channel: str, thread_ts: str) -> None:
        """The bot is answering in this thread: later replies there are for it too."""
        self._known[(team, channel, thread_ts)] = True

    async def bot_in_thread(
        self,
        client: AsyncWebClient,
        *,
        team: str,
        channel: str,
        thread_ts: str,
        bot_user_id: str | None,
        bot_id: str | None,
        parent_user_id: str | None = None,
        known_to_core: Callable[[], Awaitable[bool]] | None = None,
        heard_all: Callable[[], Awaitable[bool]] | None = None,
    ) -> bool:
        """Whether the bot takes part in this thread. `heard_all`: the record of heard messages
        holds the whole thread (`bot.memory.heard`), so the core's "no" is the answer and Slack
        is not asked."""
        key = (team, channel, thread_ts)
        if bot_user_id and parent_user_id == bot_user_id:
            self._known[key] = True
            return True
        known = self._known.get(key)
        if known is not None:
            return known
        if known_to_core is not None and await known_to_core():
            self._known[key] = True
            return True
        if heard_all is not None and await heard_all():
            # Every message of the thread was heard and none was to the bot (it would have
            # a conversation there): no. Kept briefly, as any "no".
            self._known[key] = False
            return False
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(
                self._lookup(client, channel, thread_ts, bot_user_id, bot_id)
            )
            self._inflight[key] = task
            task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        found = await asyncio.shield(task)
        if self._known.get(key) is None:  # a concurrent mark() wins over a stale "no"
            self._known[key] = found
        return found or bool(self._known.get(key))

    async def _lookup(
        self,
        client: AsyncWebClient,
        channel: str,
        thread_ts: str,
        bot_user_id: str | None,
        bot_id: str | None,
    ) -> bool:
        # One small call, never waiting on its rate limit (apps outside the Marketplace get
        # 1 call a minute and 15 messages per call): a copy of the client without retries.
        quick = no_wait_client(client)
        try:
            resp = await quick.conversations_replies(channel=channel, ts=thread_ts, limit=15)
        except Exception as exc:
            code = api_failed(_LOG, "conversations.replies", exc, channel=channel)
            metrics.DROPPED_MESSAGES.labels("slack", "thread_lookup_failed").inc()
            emit(
                _LOG,
                "slack_follow_up_dropped",
                logging.WARNING,
                channel=channel,
                reason="thread_lookup_failed",
                error=code,
            )
            return False
        for message in resp.get("messages") or []:
            if (bot_user_id and message.get("user") == bot_user_id) or (
                bot_id and message.get("bot_id") == bot_id
            ):
                return True
        if resp.get("has_more"):
            # The bot may have answered further down: say so rather than drop it silently.
            metrics.DROPPED_MESSAGES.labels("slack", "thread_lookup_incomplete").inc()
            emit(
                _LOG,
                "slack_follow_up_dropped",
                logging.INFO,
                channel=channel,
                reason="thread_lookup_incomplete",
            )
        return False


async def find_earlier_reply(
    client: AsyncWebClient,
    *,
    channel: str,
    thread_ts: str | None,
    after_ts: str,
    bot_user_id: str | None,
    bot_id: str | None,
) -> tuple[str, ...]:
    """The bot's messages after `after_ts` in that thread (or, with no thread, in the channel):
    on a re-run whose first attempt died before it could note what it posted, they are its
    answer (a session's turns run one at a time, so nothing else of the bot's follows that
    message there). One small call that never waits on its rate limit; () when it fails."""
    quick = no_wait_client(client)
    method = "conversations.replies" if thread_ts else "conversations.history"
    try:
        if thread_ts:
            resp = await quick.conversations_replies(
                channel=channel, ts=thread_ts, oldest=after_ts, limit=15
            )
        else:
            resp = await quick.conversations_history(channel=channel, oldest=after_ts, limit=15)
    except Exception as exc:
        api_failed(_LOG, method, exc, channel=channel)
        return ()
    after = float(after_ts)
    found = [
        str(m.get("ts"))
        for m in resp.get("messages") or []
        if (
            (bot_user_id and m.get("user") == bot_user_id) or (bot_id and m.get("bot_id") == bot_id)
        )
        and _after(m.get("ts"), after)
    ]
    return tuple(sorted(found, key=float))


def _after(ts: object, after: float) -> bool:
    try:
        return float(str(ts)) > after
    except ValueError:
        return False


def earlier_fetcher(
    client: AsyncWebClient,
    *,
    team: str,
    channel: str,
    thread_ts: str | None,
    before_ts: str,
    bot_user_id: str | None,
    bot_id: str | None,
) -> FetchEarlier:
    """Asks Slack for the messages before `before_ts`: the thread's with
    `conversations.replies`, else the channel's with `conversations.history`. One call that
    never waits on its rate limit (apps outside the Marketplace get one a minute); None when
    Slack refuses. The core calls it only when its record has no coverage there."""

    async def fetch(limit: int) -> list[HeardMessage] | None:
        quick = no_wait_client(client)
        method = "conversations.replies" if thread_ts else "conversations.history"
        try:
            if thread_ts:
                resp = await quick.conversations_replies(
                    channel=channel, ts=thread_ts, latest=before_ts, limit=limit
                )
            else:
                resp = await quick.conversations_history(
                    channel=channel, latest=before_ts, limit=limit
                )
        except Exception as exc:
            api_failed(_LOG, method, exc, channel=channel)
            return None
        messages = resp.get("messages")
        out: list[HeardMessage] = []
        for item in messages if isinstance(messages, list) else []:
            if not isinstance(item, Mapping):
                continue
            event = {**item, "type": "message", "channel": channel, "channel_type": "channel"}
            record = heard_message(
                event, team=team, bot_user_id=bot_user_id, bot_id=bot_id, audience="public"
            )
            if record is not None and record.message_id != before_ts:
                out.append(record)
        out.sort(key=lambda r: r.at)
        return out[-limit:] if limit > 0 else []

    return fetch
