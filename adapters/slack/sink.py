"""The ReplySink that renders one turn's answer in Slack.

- `working()`: a status in assistant threads (assistant.threads.setStatus), else a reaction on
  the person's message; cleared after the answer, also when the turn failed.
- `delta()`: streamed with chat.startStream/appendStream/stopStream (slack_sdk's `chat_stream`)
  where a thread allows it, else post-then-chat.update. A background flusher sends progress at a
  bounded rate, so a slow or rate-limited Slack never stalls the model stream.
- `finish()`: the final text is what counts. It replaces any streamed preview that differs,
  is split under Slack's message size, and very long answers go out as a Markdown file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common.logs import emit
from adapters.slack.config import SlackConfig
from adapters.slack.errors import api_failed
from adapters.slack.mrkdwn import markdown_to_mrkdwn, split_message, truncate
from bot import metrics

_LOG = logging.getLogger(__name__)

EMPTY_ANSWER = "(no answer)"
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
    """Per-process memory of teams where streaming / assistant APIs turned out unavailable."""

    no_stream: set[str] = field(default_factory=set)
    no_assistant: set[str] = field(default_factory=set)


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
    ) -> None:
        self._client = client
        self._target = target
        self._config = config
        self._caps = caps
        self._parts: list[str] = []  # deltas; joined lazily (many tiny deltas, long answers)
        self._joined = ""
        self._length = 0
        self._sent = 0
        self._mode: str | None = None  # "stream" | "update" | "stalled"
        self._stream: AsyncChatStream | None = None
        self._stream_ts: str | None = None
        self._posted_ts: str | None = None
        self._shown: str | None = None  # "status" | "reaction"
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._finished = False
        self._first_delta_at = 0.0
        self.posted: list[str] = []  # ts of every message this sink created
        self._on_posted = on_posted
        self._streamed = False
        self._reuse: list[str] = []  # an earlier attempt's later parts, updated before posting
        self._earlier_stream: str | None = None  # an earlier attempt's open stream, to stop
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
                await self._client.assistant_threads_setStatus(
                    channel_id=t.channel, thread_ts=t.thread_ts, status=self._config.thinking_status
                )
                self._shown = "status"
                return
            except Exception as exc:
                if api_failed(_LOG, "assistant.threads.setStatus", exc) in _UNSUPPORTED:
                    self._caps.no_assistant.add(t.team)
        if not self._config.working_reaction:
            return
        try:
            await self._client.reactions_add(
                channel=t.channel, timestamp=t.message_ts, name=self._config.working_reaction
            )
            self._shown = "reaction"
        except Exception as exc:
            if api_failed(_LOG, "reactions.add", exc) == "already_reacted":
                self._shown = "reaction"

    async def delta(self, text: str) -> None:
        if self._finished or not text:
            return
        self._parts.append(text)
        self._length += len(text)
        if self._flusher is None:
            self._first_delta_at = asyncio.get_running_loop().time()
            self._flusher = asyncio.create_task(self._run_flusher(), name="slack-sink-flusher")
        self._wake.set()

    async def finish(self, text: str, *, error: bool = False) -> None:
        if self._finished:
            return
        self._finished = True
        await self._stop_flusher()
        final = text if text.strip() else EMPTY_ANSWER
        try:
            await self._deliver(final)
        except Exception as exc:
            metrics.ERRORS.labels("slack", "reply_failed").inc()
            emit(_LOG, "slack_reply_failed", logging.ERROR, error=type(exc).__name__)
        finally:
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
                await self._flusher  # at most the one API call in flight
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
        t = self._target
        room = self._config.stream_limit - self._sent
        if room <= 0 or t.thread_ts is None:
            return  # the rest goes out with finish()
        chunk = self._text[self._sent : self._sent + room]
        try:
            if self._stream is None:
                self._stream = await self._client.chat_stream(
                    channel=t.channel,
                    thread_ts=t.thread_ts,
                    recipient_team_id=t.team,
                    recipient_user_id=t.user,
                    buffer_size=1,
                )
            await self._stream.append(markdown_text=chunk)
            self._sent += len(chunk)
            if self._stream_ts is None and self._stream.ts:
                self._stream_ts = self._stream.ts
                self._streamed = True
                await self._created(self._stream_ts)
        except Exception as exc:
            method = "chat.appendStream" if self._stream_ts else "chat.startStream"
            code = api_failed(_LOG, method, exc, channel=t.channel)
            if self._stream_ts is None:
                self._stream = None
                self._mode = "update"  # streaming unavailable here: fall back for this reply
                if code in _UNSUPPORTED:
                    self._caps.no_stream.add(t.team)
                await self._update_progress()
            else:
                self._mode = "stalled"  # keep the partial stream; finish() will fix the text

    async def _update_progress(self) -> None:
        await self._stop_earlier_stream()
        limit = self._config.message_limit
        preview = truncate(markdown_to_mrkdwn(self._text[: 2 * limit]), limit)
        sent = len(self._text)
        try:
            if self._posted_ts is None:
                self._posted_ts = await self._post(preview)
            else:
                await self._client.chat_update(
                    channel=self._target.channel, ts=self._posted_ts, text=preview
                )
            self._sent = sent
        except Exception as exc:
            api_failed(_LOG, "chat.update" if self._posted_ts else "chat.postMessage", exc)

    # -- final -------------------------------------------------------------------------------

    async def _deliver(self, final: str) -> None:
        await self._stop_earlier_stream()
        long = len(final) > self._config.file_threshold
        if self._stream is not None and self._stream_ts is not None:
            streamed = self._text[: self._sent]
            fits = not long and len(final) <= self._config.stream_limit
            if self._mode == "stream" and fits and final.startswith(streamed):
                try:
                    await self._stream.stop(markdown_text=final[len(streamed) :] or None)
                    return
                except Exception as exc:
                    api_failed(_LOG, "chat.stopStream", exc, channel=self._target.channel)
            else:
                # Stop without the helper: after a failed append its buffer still holds text.
                try:
                    await self._client.chat_stopStream(
                        channel=self._target.channel, ts=self._stream_ts
                    )
                except Exception as exc:
                    api_failed(_LOG, "chat.stopStream", exc, channel=self._target.channel)
            await self._replace(self._stream_ts, final, long)
        elif self._posted_ts is not None:
            await self._replace(self._posted_ts, final, long)
        else:
            await self._post_new(final, long)

    async def _replace(self, ts: str, final: str, long: bool) -> None:
        """Turn an existing (streamed or previewed) message into the final answer.

        `blocks=[]`: chat.update keeps a message's existing blocks unless told to drop them, and
        a streamed message is stored as blocks, so a text-only update would leave it unchanged.
        """
        if long and await self._upload(final):
            await self._client.chat_update(
                channel=self._target.channel, ts=ts, text=self._long_note(final), blocks=[]
            )
            return
        parts = self._parts_of(final, long)
        await self._client.chat_update(
            channel=self._target.channel, ts=ts, text=parts[0], blocks=[]
        )
        for part in parts[1:]:
            await self._post(part)

    async def _post_new(self, final: str, long: bool) -> None:
        if long and await self._upload(final):
            await self._post(self._long_note(final))
            return
        for part in self._parts_of(final, long):
            await self._post(part)

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
            await self._client.files_upload_v2(
                content=final,
                filename="answer.md",
                title="Full answer",
                channel=self._target.channel,
                thread_ts=self._target.thread_ts,
            )
        except Exception as exc:
            # No file upload (scope or plan): the caller posts it in parts, bounded.
            api_failed(_LOG, "files.uploadV2", exc, channel=self._target.channel)
            return False
        return True

    async def _post(self, text: str) -> str:
        if self._reuse:  # a part an earlier attempt posted: it becomes this part
            ts = self._reuse.pop(0)
            await self._client.chat_update(
                channel=self._target.channel, ts=ts, text=text, blocks=[]
            )
            return ts
        resp = await self._client.chat_postMessage(
            channel=self._target.channel,
            thread_ts=self._target.thread_ts,
            text=text,
            unfurl_links=False,
            unfurl_media=False,
        )
        ts = str(resp.get("ts") or "")
        await self._created(ts)
        return ts

    async def _created(self, ts: str) -> None:
        """A message of this answer now exists in Slack: record it with the event first."""
        self.posted.append(ts)
        if self._on_posted is not None and ts:
            await self._on_posted(EarlierReply(tuple(self.posted), self._streamed))

    async def _stop_earlier_stream(self) -> None:
        """An earlier attempt died mid-stream: stop that stream so it can be updated."""
        if self._earlier_stream is None:
            return
        ts, self._earlier_stream = self._earlier_stream, None
        try:
            await self._client.chat_stopStream(channel=self._target.channel, ts=ts)
        except Exception as exc:  # e.g. already stopped: the update still goes out
            api_failed(_LOG, "chat.stopStream", exc, channel=self._target.channel)

    async def _clear_status(self) -> None:
        t = self._target
        try:
            if self._shown == "status" and t.thread_ts:
                await self._client.assistant_threads_setStatus(
                    channel_id=t.channel, thread_ts=t.thread_ts, status=""
                )
            elif self._shown == "reaction":
                await self._client.reactions_remove(
                    channel=t.channel, timestamp=t.message_ts, name=self._config.working_reaction
                )
        except Exception as exc:
            method = (
                "assistant.threads.setStatus" if self._shown == "status" else "reactions.remove"
            )
            api_failed(_LOG, method, exc)
        self._shown = None
