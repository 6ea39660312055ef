"""The ReplySink that renders one turn's answer in Slack.

- `working()`: a status in assistant threads (assistant.threads.setStatus, at once), else a
  reaction on the person's message, added only if the answer is not done within
  `working_reaction_delay` (a timer; a quick answer costs one Web API call, the reply); whatever
  was shown is cleared after the answer, also when the turn failed; a re-run of an event (its
  first attempt cut off) also takes away a reaction that attempt may have left.
- `delta()`: streamed with chat.startStream/appendStream/stopStream where a thread allows it,
  else post-then-chat.update. A background flusher sends progress at a bounded rate, and only
  within the team's Web API budget (`adapters.slack.budget`): a spent budget or a 429 skips the
  update (the text goes out with the next one or with the final), so a slow or rate-limited
  Slack never stalls the model stream or the flusher.
- `finish()`: the final text is what counts and always goes out: its calls may wait out a known
  Retry-After (bounded by `final_wait_seconds`). It replaces any streamed preview that differs,
  is split under Slack's message size, and very long answers go out as a Markdown file.

Every call goes through a copy of the client without slack_sdk's rate-limit retry handler, so a
429 comes back here at once and this sink decides: skip (progress) or wait, bounded (final).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.common.logs import emit
from adapters.slack.approvals import request_blocks, request_fallback, waiting_line
from adapters.slack.budget import WebApiBudget, retry_after
from adapters.slack.clients import client_like
from adapters.slack.config import SlackConfig
from adapters.slack.errors import api_failed, error_code
from adapters.slack.feedback import feedback_block
from adapters.slack.mrkdwn import markdown_to_mrkdwn, split_message, truncate
from bot import metrics
from bot.feedback import ReplyRef
from bot.stores.approvals import Approval

_LOG = logging.getLogger(__name__)

EMPTY_ANSWER = "(no answer)"
SECTION_LIMIT = 3000  # Block Kit: a section's text
MAX_SECTIONS = 49  # Block Kit: 50 blocks a message, one is the feedback buttons
# Errors meaning "this workspace/app cannot use that API": stop trying it for the team.
_UNSUPPORTED = {
    "unknown_method",
    "not_allowed_token_type",
    "missing_scope",
    "not_allowed",
    "feature_not_enabled",
    "method_deprecated",
    "team_not_allowed",
    "invalid_arguments",
}


@dataclass(frozen=True, slots=True)
class ReplyTarget:
    """Where the answer goes: the channel, the thread (None: top-level DM) and the asker."""

    team: str
    channel: str
    user: str
    message_ts: str
    thread_ts: str | None
    assistant_thread: bool = False


@dataclass(frozen=True, slots=True)
class EarlierReply:
    """The messages an earlier attempt at the same event posted (kept in its inbox entry's
    notes), so a re-run after a crash updates them instead of posting the answer twice."""

    ts: tuple[str, ...] = ()
    streamed: bool = False  # the first one was a chat stream (stopped before it is updated)

    @classmethod
    def from_notes(cls, notes: Mapping[str, Any]) -> EarlierReply | None:
        ts = notes.get("reply_ts")
        if not isinstance(ts, list) or not ts or not all(isinstance(t, str) and t for t in ts):
            return None
        return cls(tuple(ts), bool(notes.get("reply_streamed")))

    def as_notes(self) -> dict[str, Any]:
        return {"reply_ts": list(self.ts), "reply_streamed": self.streamed}


OnPosted = Callable[[EarlierReply], Awaitable[None]]


@dataclass
class Capabilities:
    """Per-process memory of what Slack allows each team: streaming / assistant APIs that turned
    out unavailable, and the Web API budget of progress calls (per team and method)."""

    no_stream: set[str] = field(default_factory=set)
    no_assistant: set[str] = field(default_factory=set)
    budget: WebApiBudget = field(default_factory=WebApiBudget)


_Send = Callable[[], Awaitable[AsyncSlackResponse]]
# Connection errors are retried once (as the shared client does); 429s come back at once.
_RETRY_HANDLERS = [AsyncConnectionErrorRetryHandler(max_retry_count=1)]


class SlackReplySink:
    def __init__(
        self,
        client: AsyncWebClient,
        target: ReplyTarget,
        config: SlackConfig,
        caps: Capabilities,
        *,
        earlier: EarlierReply | None = None,
        on_posted: OnPosted | None = None,
        retried: bool = False,
    ) -> None:
        self._client = client
        self._api = client_like(client, retry_handlers=list(_RETRY_HANDLERS))
        self._target = target
        self._config = config
        self._caps = caps
        self._budget = caps.budget
        self._rates = config.progress_rates
        self._parts: list[str] = []  # deltas; joined lazily (many tiny deltas, long answers)
        self._joined = ""
        self._length = 0
        self._sent = 0
        self._mode: str | None = None  # "stream" | "update" | "stalled"
        self._stream_ts: str | None = None
        self._posted_ts: str | None = None
        self._shown: str | None = None  # "status" | "reaction"
        self._react_timer: asyncio.TimerHandle | None = None
        self._react_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._finished = False
        self._rated: ReplyRef | None = None  # the reply's turn: its last message gets buttons
        self._asks: list[Approval] = []  # approval requests, shown after the reply
        self._first_delta_at = 0.0
        self.posted: list[str] = []  # ts of every message this sink created
        self._on_posted = on_posted
        self._streamed = False
        self._reuse: list[str] = []  # an earlier attempt's later parts, updated before posting
        self._earlier_stream: str | None = None  # an earlier attempt's open stream, to stop
        # A re-run (the first attempt was cut: handed back at shutdown, or its process died) may
        # find that attempt's working reaction on the message; a quick answer adds none of its
        # own, so the clean-up takes it away all the same (quietly if there is none).
        self._leftover = retried and bool(config.working_reaction)
        if earlier is not None:
            # A re-run: the answer replaces what the first attempt showed (never a stream).
            self._mode = "update"
            self._posted_ts = earlier.ts[0]
            self._reuse = list(earlier.ts[1:])
            self.posted = list(earlier.ts)
            self._streamed = earlier.streamed
            self._earlier_stream = earlier.ts[0] if earlier.streamed else None

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def _text(self) -> str:
        """Everything streamed so far."""
        if len(self._joined) != self._length:
            self._joined = "".join(self._parts)
            self._parts = [self._joined]
        return self._joined

    # -- ReplySink ---------------------------------------------------------------------------

    async def working(self) -> None:
        t = self._target
        if t.assistant_thread and t.thread_ts and t.team not in self._caps.no_assistant:
            try:
                shown = await self._optional(
                    "assistant.threads.setStatus",
                    lambda: self._api.assistant_threads_setStatus(
                        channel_id=t.channel,
                        thread_ts=str(t.thread_ts),
                        status=self._config.thinking_status,
                    ),
                )
                self._shown = "status" if shown is not None else None
                return
            except Exception as exc:
                if api_failed(_LOG, "assistant.threads.setStatus", exc) in _UNSUPPORTED:
                    self._caps.no_assistant.add(t.team)
        if not self._config.working_reaction or self._finished:
            return
        delay = self._config.working_reaction_delay
        if delay <= 0:
            await self._add_reaction()
        elif self._react_timer is None:
            # Only answers slower than `delay` get the reaction (finish() cancels the timer).
            self._react_timer = asyncio.get_running_loop().call_later(delay, self._react_now)

    async def delta(self, text: str) -> None:
        if self._finished or not text:
            return
        self._parts.append(text)
        self._length += len(text)
        if self._flusher is None:
            self._first_delta_at = asyncio.get_running_loop().time()
            self._flusher = asyncio.create_task(self._run_flusher(), name="slack-sink-flusher")
        self._wake.set()

    def rate_with(self, ref: ReplyRef) -> None:
        """The final reply answers a turn: its last message carries the feedback buttons."""
        self._rated = ref

    async def ask_approval(self, approvals: list[Approval]) -> str:
        """Calls wait for the requester (`bot.approvals`): the reply says so in the thread,
        then `finish` shows them the buttons (`adapters.slack.approvals`)."""
        self._asks = list(approvals)
        return waiting_line(self._asks, self._target.user)

    async def _show_asks(self) -> None:
        """One ephemeral per request, to the requester in the thread (posted after the reply:
        Slack shows an ephemeral in a thread only once the thread exists)."""
        t = self._target
        for approval in self._asks:
            try:
                send = functools.partial(
                    self._api.chat_postEphemeral,
                    channel=t.channel,
                    user=t.user,
                    thread_ts=t.thread_ts,
                    text=request_fallback(approval),
                    blocks=request_blocks(approval),
                )
                await self._required(
                    "chat.postEphemeral", send, bound=self._config.final_wait_seconds
                )
            except Exception as exc:  # the request stays pending; it expires and is told
                api_failed(_LOG, "chat.postEphemeral", exc, channel=t.channel)
        if self._asks:
            emit(_LOG, "slack_approval_asked", requests=len(self._asks))
        self._asks = []

    def _final_blocks(self, text: str) -> list[dict[str, Any]]:
        """The last message's blocks: its text (a message with blocks shows them, not its
        `text`) in sections of at most 3,000 characters, then the feedback buttons; [] when
        the reply has none (blocks=[] also drops a streamed message's own blocks)."""
        if self._rated is None:
            return []
        sections = [
            {"type": "section", "text": {"type": "mrkdwn", "text": part}}
            for part in split_message(text, SECTION_LIMIT)
            if part.strip()
        ]
        return [*sections[:MAX_SECTIONS], feedback_block(self._rated)]

    async def _buttons_or_not(
        self, method: str, send: Callable[[list[dict[str, Any]] | None], Awaitable[Any]], text: str
    ) -> Any:
        """Send the last message with its feedback buttons; if Slack refuses the blocks, log
        it and send it without them (the answer never depends on the buttons)."""
        blocks = self._final_blocks(text) or None
        try:
            return await send(blocks)
        except Exception as exc:
            if blocks is None or error_code(exc) != "invalid_blocks":
                raise
            api_failed(_LOG, method, exc, channel=self._target.channel, blocks="feedback")
            self._rated = None
            return await send(None)

    def abandon(self) -> None:
        """The turn was cut (shutdown) and its inbox entry handed back: stop what this sink
        would still do on its own (the progress flusher, a reaction timer); the re-run cleans up
        what is shown."""
        self._finished = True
        if self._react_timer is not None:
            self._react_timer.cancel()
            self._react_timer = None
        if self._flusher is not None:
            self._flusher.cancel()

    async def finish(self, text: str, *, error: bool = False) -> None:
        if self._finished:
            return
        self._finished = True
        if self._react_timer is not None:
            self._react_timer.cancel()  # answered first: no reaction (one already added stays)
        await self._stop_flusher()
        final = text if text.strip() else EMPTY_ANSWER
        try:
            await self._deliver(final)
        except Exception as exc:
            metrics.ERRORS.labels("slack", "reply_failed").inc()
            emit(_LOG, "slack_reply_failed", logging.ERROR, error=type(exc).__name__)
        finally:
            if self._asks:  # after the reply (the thread exists), before the status clears
                await self._show_asks()
            await self._clear_status()
        emit(
            _LOG,
            "slack_reply_sent",
            channel=self._target.channel,
            mode=self._mode or "post",
            chars=len(final),
            parts=len(self.posted),
            error=error,
        )

    # -- Web API calls: optional (progress) and required (final) -----------------------------

    async def _optional(self, method: str, send: _Send) -> AsyncSlackResponse | None:
        """A progress call: made only within the team's budget for `method`, never waiting.

        None when it was skipped (budget spent, or within a 429's Retry-After, which a 429 here
        starts); other Web API errors are raised for the caller to read.
        """
        if not await self._budget.try_spend(self._target.team, method, self._rates.get(method)):
            return None
        try:
            return await send()
        except Exception as exc:
            wait = retry_after(exc)
            if wait is None:
                raise
            self._budget.rate_limited(self._target.team, method, wait)
            api_failed(_LOG, method, exc, channel=self._target.channel, retry_after=wait)
            return None

    async def _required(self, method: str, send: _Send, *, bound: float) -> AsyncSlackResponse:
        """A call that must go out: counted in the budget, never refused by it; waits out a
        Retry-After (known before, or from a 429 now) while that fits in `bound` seconds in all
        and `rate_limit_retries` allows. When it does not, it is tried at once / raised."""
        team, loop = self._target.team, asyncio.get_running_loop()
        deadline = loop.time() + bound
        attempt = 0
        while True:
            wait = self._budget.blocked_for(team, method)
            if 0 < wait <= deadline - loop.time():
                await asyncio.sleep(wait)
            await self._budget.spend(team, method, self._rates.get(method))
            try:
                return await send()
            except Exception as exc:
                asked = retry_after(exc)
                if asked is None:
                    raise
                self._budget.rate_limited(team, method, asked)  # progress skips it meanwhile
                if attempt >= self._config.rate_limit_retries or asked > deadline - loop.time():
                    raise
                api_failed(_LOG, method, exc, channel=self._target.channel, retry_after=asked)
                attempt += 1

    # -- progress ----------------------------------------------------------------------------

    async def _run_flusher(self) -> None:
        await self._hold_first_flush()
        while not self._stop.is_set():
            await self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            await self._flush_progress()
            interval = (
                self._config.stream_interval
                if self._mode == "stream"
                else self._config.update_interval
            )
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=interval)
            except TimeoutError:
                pass

    async def _hold_first_flush(self) -> None:
        """Wait until the answer is long or old enough to be worth showing in progress."""
        loop = asyncio.get_running_loop()
        deadline = self._first_delta_at + self._config.first_flush_seconds
        while not self._stop.is_set() and self._length < self._config.first_flush_chars:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=remaining)
            except TimeoutError:
                break
        self._wake.set()

    async def _stop_flusher(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._flusher is not None:
            try:
                await self._flusher  # at most the one API call in flight (it never waits)
            except Exception as exc:
                emit(_LOG, "slack_flusher_failed", logging.WARNING, error=type(exc).__name__)

    def _choose_mode(self) -> str:
        if self._mode is None:
            t = self._target
            streamable = (
                self._config.streaming and t.thread_ts and t.team not in self._caps.no_stream
            )
            self._mode = "stream" if streamable else "update"
        return self._mode

    async def _flush_progress(self) -> None:
        if self._length <= self._sent:
            return
        mode = self._choose_mode()
        if mode == "stream":
            await self._stream_progress()
        elif mode == "update":
            await self._update_progress()

    async def _stream_progress(self) -> None:
        """Send what is new since the last progress call; a skipped call sends it next time."""
        t = self._target
        room = self._config.stream_limit - self._sent
        if room <= 0 or t.thread_ts is None:
            return  # the rest goes out with finish()
        thread_ts = t.thread_ts
        chunk = self._text[self._sent : self._sent + room]
        stream_ts = self._stream_ts
        try:
            if stream_ts is None:
                resp = await self._optional(
                    "chat.startStream",
                    lambda: self._api.chat_startStream(
                        channel=t.channel,
                        thread_ts=thread_ts,
                        recipient_team_id=t.team,
                        recipient_user_id=t.user,
                        markdown_text=chunk,
                    ),
                )
                if resp is None:
                    return
                self._streamed = True
                self._stream_ts = await self._note_posted(resp)
            else:
                resp = await self._optional(
                    "chat.appendStream",
                    lambda: self._api.chat_appendStream(
                        channel=t.channel, ts=stream_ts, markdown_text=chunk
                    ),
                )
                if resp is None:
                    return
            self._sent += len(chunk)
        except Exception as exc:
            method = "chat.appendStream" if self._stream_ts else "chat.startStream"
            code = api_failed(_LOG, method, exc, channel=t.channel)
            if self._stream_ts is None:
                self._mode = "update"  # streaming unavailable here: fall back for this reply
                if code in _UNSUPPORTED:
                    self._caps.no_stream.add(t.team)
                await self._update_progress()
            else:
                self._mode = "stalled"  # keep the partial stream; finish() will fix the text

    def _preview(self) -> str:
        limit = self._config.message_limit
        return truncate(markdown_to_mrkdwn(self._text[: 2 * limit]), limit)

    async def _update_progress(self) -> None:
        await self._stop_earlier_stream()
        t = self._target
        sent = len(self._text)
        posted_ts = self._posted_ts
        try:
            if posted_ts is None:
                resp = await self._optional(
                    "chat.postMessage",
                    lambda: self._api.chat_postMessage(
                        channel=t.channel,
                        thread_ts=t.thread_ts,
                        text=self._preview(),
                        unfurl_links=False,
                        unfurl_media=False,
                    ),
                )
                if resp is None:
                    return
                self._posted_ts = await self._note_posted(resp)
            else:
                resp = await self._optional(
                    "chat.update",
                    lambda: self._api.chat_update(
                        channel=t.channel, ts=posted_ts, text=self._preview()
                    ),
                )
                if resp is None:
                    return
            self._sent = sent
        except Exception as exc:
            api_failed(_LOG, "chat.update" if posted_ts else "chat.postMessage", exc)

    async def _note_posted(self, resp: AsyncSlackResponse) -> str:
        """A message of this answer now exists in Slack: record it with the event (a re-run
        after a crash updates it rather than posting the answer again)."""
        ts = str(resp.get("ts") or "")
        self.posted.append(ts)
        if self._on_posted is not None and ts:
            await self._on_posted(EarlierReply(tuple(self.posted), self._streamed))
        return ts

    async def _stop_earlier_stream(self) -> None:
        """An earlier attempt died mid-stream: stop that stream so it can be updated."""
        if self._earlier_stream is None:
            return
        ts, self._earlier_stream = self._earlier_stream, None
        try:
            await self._required(
                "chat.stopStream",
                lambda: self._api.chat_stopStream(channel=self._target.channel, ts=ts),
                bound=self._config.final_wait_seconds,
            )
        except Exception as exc:  # e.g. already stopped: the update still goes out
            api_failed(_LOG, "chat.stopStream", exc, channel=self._target.channel)

    # -- final -------------------------------------------------------------------------------

    async def _deliver(self, final: str) -> None:
        await self._stop_earlier_stream()
        long = len(final) > self._config.file_threshold
        channel, stream_ts = self._target.channel, self._stream_ts
        if stream_ts is not None:
            streamed = self._text[: self._sent]
            fits = not long and len(final) <= self._config.stream_limit
            if self._mode == "stream" and fits and final.startswith(streamed):
                rest = final[len(streamed) :] or None
                # chat.stopStream renders `blocks` at the bottom of the finished message.
                buttons = [feedback_block(self._rated)] if self._rated else None
                try:
                    await self._required(
                        "chat.stopStream",
                        lambda: self._api.chat_stopStream(
                            channel=channel, ts=stream_ts, markdown_text=rest, blocks=buttons
                        ),
                        bound=self._config.final_wait_seconds,
                    )
                    return
                except Exception as exc:
                    code = api_failed(_LOG, "chat.stopStream", exc, channel=channel)
                    if buttons and code == "invalid_blocks":  # the answer without the buttons
                        self._rated = None
                        with contextlib.suppress(Exception):
                            await self._required(
                                "chat.stopStream",
                                lambda: self._api.chat_stopStream(
                                    channel=channel, ts=stream_ts, markdown_text=rest
                                ),
                                bound=self._config.final_wait_seconds,
                            )
                            return
            else:
                try:
                    await self._required(
                        "chat.stopStream",
                        lambda: self._api.chat_stopStream(channel=channel, ts=stream_ts),
                        bound=self._config.final_wait_seconds,
                    )
                except Exception as exc:
                    api_failed(_LOG, "chat.stopStream", exc, channel=channel)
            await self._replace(stream_ts, final, long)
        elif self._posted_ts is not None:
            await self._replace(self._posted_ts, final, long)
        else:
            await self._post_new(final, long)

    async def _update(self, ts: str, text: str, *, last: bool = False) -> None:
        """chat.update to the final text. `blocks=[]`: chat.update keeps a message's existing
        blocks unless told to drop them, and a streamed message is stored as blocks, so a
        text-only update would leave it unchanged. The `last` message gets the buttons."""

        async def send(blocks: list[dict[str, Any]] | None) -> AsyncSlackResponse:
            return await self._required(
                "chat.update",
                lambda: self._api.chat_update(
                    channel=self._target.channel, ts=ts, text=text, blocks=blocks or []
                ),
                bound=self._config.final_wait_seconds,
            )

        if last:
            await self._buttons_or_not("chat.update", send, text)
        else:
            await send(None)

    async def _replace(self, ts: str, final: str, long: bool) -> None:
        """Turn an existing (streamed or previewed) message into the final answer."""
        if long and await self._upload(final):
            await self._update(ts, self._long_note(final), last=True)
            return
        parts = self._parts_of(final, long)
        await self._update(ts, parts[0], last=len(parts) == 1)
        for i, part in enumerate(parts[1:], start=2):
            await self._post(part, last=i == len(parts))

    async def _post_new(self, final: str, long: bool) -> None:
        if long and await self._upload(final):
            await self._post(self._long_note(final), last=True)
            return
        parts = self._parts_of(final, long)
        for i, part in enumerate(parts, start=1):
            await self._post(part, last=i == len(parts))

    def _parts_of(self, final: str, long: bool) -> list[str]:
        """The answer as messages; a long one (its file upload failed) bounded, with a note."""
        limit = self._config.message_limit
        if not long:
            return split_message(markdown_to_mrkdwn(final), limit)
        most = 10
        parts = split_message(markdown_to_mrkdwn(final[: (most + 1) * limit]), limit)
        if len(parts) > most or len(final) > (most + 1) * limit:
            shown = sum(len(p) for p in parts[:most])
            parts = [
                *parts[:most],
                f"_(answer cut: about {max(0, len(final) - shown):,} more characters not shown; "
                "the file upload failed)_",
            ]
        return parts

    def _long_note(self, final: str) -> str:
        room = min(1500, self._config.message_limit - 120)
        head = truncate(markdown_to_mrkdwn(final[: 2 * room]), room)
        return f"{head}\n\n_The full answer ({len(final):,} characters) is attached as a file._"

    async def _upload(self, final: str) -> bool:
        """Upload the whole answer as a Markdown file in the thread; False when that failed."""
        try:
            await self._required(
                "files.uploadV2",
                lambda: self._api.files_upload_v2(
                    content=final,
                    filename="answer.md",
                    title="Full answer",
                    channel=self._target.channel,
                    thread_ts=self._target.thread_ts,
                ),
                bound=self._config.final_wait_seconds,
            )
        except Exception as exc:
            # No file upload (scope or plan): the caller posts it in parts, bounded.
            api_failed(_LOG, "files.uploadV2", exc, channel=self._target.channel)
            return False
        return True

    async def _post(self, text: str, *, last: bool = False) -> str:
        if self._reuse:  # a part an earlier attempt posted: it becomes this part
            ts = self._reuse.pop(0)
            await self._update(ts, text, last=last)
            return ts

        async def send(blocks: list[dict[str, Any]] | None) -> AsyncSlackResponse:
            return await self._required(
                "chat.postMessage",
                lambda: self._api.chat_postMessage(
                    channel=self._target.channel,
                    thread_ts=self._target.thread_ts,
                    text=text,
                    blocks=blocks,
                    unfurl_links=False,
                    unfurl_media=False,
                ),
                bound=self._config.final_wait_seconds,
            )

        resp = await (self._buttons_or_not("chat.postMessage", send, text) if last else send(None))
        return await self._note_posted(resp)

    # -- working indicator -------------------------------------------------------------------

    def _react_now(self) -> None:
        """The timer fired: the answer is slow, show the reaction (finish() waits for it)."""
        self._react_timer = None
        if not self._finished and self._react_task is None:
            self._react_task = asyncio.ensure_future(self._add_reaction())

    async def _add_reaction(self) -> None:
        t = self._target
        try:
            added = await self._optional(
                "reactions.add",
                lambda: self._api.reactions_add(
                    channel=t.channel, timestamp=t.message_ts, name=self._config.working_reaction
                ),
            )
            if added is not None:
                self._shown = "reaction"
        except Exception as exc:
            if api_failed(_LOG, "reactions.add", exc) == "already_reacted":
                self._shown = "reaction"

    async def _clear_status(self) -> None:
        if self._react_task is not None:
            task, self._react_task = self._react_task, None
            await task  # an add in flight: wait for its outcome, then undo it
        t = self._target
        maybe = self._shown is None and self._leftover  # an earlier attempt's, perhaps
        shown = "reaction" if maybe else self._shown
        method = "assistant.threads.setStatus" if shown == "status" else "reactions.remove"
        bound = self._config.cleanup_wait_seconds
        try:
            if shown == "status" and t.thread_ts:
                await self._required(
                    method,
                    lambda: self._api.assistant_threads_setStatus(
                        channel_id=t.channel, thread_ts=str(t.thread_ts), status=""
                    ),
                    bound=bound,
                )
            elif shown == "reaction":
                await self._required(
                    method,
                    lambda: self._api.reactions_remove(
                        channel=t.channel,
                        timestamp=t.message_ts,
                        name=self._config.working_reaction,
                    ),
                    bound=bound,
                )
        except Exception as exc:
            if not (maybe and error_code(exc) == "no_reaction"):
                api_failed(_LOG, method, exc)
        self._shown = None
