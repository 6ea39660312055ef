"""A turn's reply on Discord: typing indicator, streamed edits (at most one per second), final
text split under 2,000 characters.

While the model streams, one message shows the answer so far (its first part, code fences
closed), edited at most once per `edit_interval` by a background pump that never cancels a
request in flight. `finish` then writes the final text: the preview message is edited to the
first part and the remaining parts are sent after it. Every message is created with a nonce
derived from the question and the part number and `enforce_nonce`, so a request retried after
a 429 or a lost response can never post the same part twice, and a turn re-run after a crash
(the durable inbox) gets back the message its first attempt posted and edits it.
`allowed_mentions` comes from the handler: no @everyone/@here, no roles, only users the asker
named.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from typing import Any

import discord

from adapters.common.logs import emit
from adapters.common.split import close_fence, split_message
from adapters.discord.approval_view import approval_text, approval_view, requester_id
from adapters.discord.config import MESSAGE_LIMIT, DiscordConfig
from adapters.discord.feedback import feedback_view
from adapters.discord.rest_errors import REST_ERRORS, rest_error_fields
from bot import metrics
from bot.feedback import ReplyRef
from bot.stores.approvals import Approval

_LOG = logging.getLogger(__name__)
PREVIEW_MARK = " …"
CUT_NOTE = "\n\n(Discord would not take the rest of this answer just now. Please ask again.)"


def part_nonce(seed: str, index: int) -> str:
    """A stable nonce (≤ 25 characters, as Discord requires) for part `index` of one answer."""
    return hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=10).hexdigest()


class DiscordReplySink:
    def __init__(
        self,
        *,
        target: discord.abc.Messageable,
        config: DiscordConfig,
        allowed_mentions: discord.AllowedMentions,
        nonce_seed: str,
        reply_to: discord.Message | None = None,
    ) -> None:
        self._target = target
        self._config = config
        self._allowed = allowed_mentions
        self._seed = nonce_seed
        self._reply_to = reply_to
        self._buffer: list[str] = []
        self._chars = 0
        self._posted: list[discord.Message] = []
        self._shown = ""
        self._started = time.monotonic()
        self._last_edit = 0.0
        self._dirty = asyncio.Event()
        self._done = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._typing: Any = None
        self.finished = False
        self.failed = False
        self._rated: ReplyRef | None = None  # the reply's turn: its last part gets the buttons
        self._asking: list[Approval] = []  # calls waiting for the person: one message each

    def rate_with(self, ref: ReplyRef) -> None:
        """The final reply answers a turn: its last message carries the feedback buttons."""
        self._rated = ref

    async def ask_approval(self, approvals: list[Approval]) -> str:
        """The turn ends with the requests (`bot.turn.ShowsApprovals`): `finish` posts one
        message per waiting call, pinging the requester, with its buttons."""
        self._asking = list(approvals)
        return "\n\n".join(approval_text(a) for a in approvals)

    # ReplySink ---------------------------------------------------------------------------------

    async def working(self) -> None:
        typing = self._target.typing()
        try:
            await typing.__aenter__()
        except REST_ERRORS as exc:  # the answer goes on without the indicator
            emit(_LOG, "discord_typing_failed", logging.DEBUG, **rest_error_fields(exc))
            return
        self._typing = typing

    async def delta(self, text: str) -> None:
        if self.finished or not text:
            return
        self._buffer.append(text)
        self._chars += len(text)
        self._dirty.set()
        if self._pump is None:
            self._pump = asyncio.create_task(self._run_pump(), name="discord-stream-pump")

    def abandon(self) -> None:
        """The turn ends without a word (`bot.messages.drop_quietly`: a flood past its one
        refusal): nothing is posted, and the handler's apology for an unfinished turn is not."""
        self.finished = True
        self._done.set()

    async def finish(self, text: str, *, error: bool = False) -> None:
        if self.finished:
            return
        self.finished = True
        self._done.set()
        if self._pump is not None:
            with contextlib.suppress(Exception):
                await self._pump  # lets an edit in flight complete; it never starts another
        await self._stop_typing()
        if self._asking and not error:
            await self._post_requests()
            return
        parts = split_message(text.strip() or "…", MESSAGE_LIMIT)
        try:
            for index, part in enumerate(parts):
                last = index == len(parts) - 1
                if last and self._rated is not None:
                    await self._last_part(part, index)
                    continue
                if index < len(self._posted):
                    if self._posted[index].content != part:
                        await self._edit(self._posted[index], part, None)
                else:
                    sent = await self._send(part, index)
                    if sent.content != part:  # the nonce's earlier message: a re-run's preview
                        await self._edit(sent, part, None)
                    self._posted.append(sent)
        except Exception as exc:  # Forbidden, a deleted channel, a rate limit, the network
            self.failed = True
            metrics.ERRORS.labels("discord", "reply_failed").inc()
            emit(
                _LOG,
                "discord_reply_failed",
                logging.WARNING,
                error=type(exc).__name__,
                status=getattr(exc, "status", None),
                part=len(self._posted),
                parts=len(parts),
            )
            if 0 < len(self._posted) < len(parts):
                await self._say_cut()

    async def _post_requests(self) -> None:
        """One message per waiting call (a preview the model streamed first becomes the
        first), each pinging only its requester, with Approve, Approve always and Deny."""
        for index, approval in enumerate(self._asking):
            text = approval_text(approval)
            view = approval_view(approval)
            ping = discord.AllowedMentions(
                everyone=False,
                roles=False,
                users=[discord.Object(id=int(requester_id(approval)))],
                replied_user=False,
            )
            try:
                if index < len(self._posted):
                    await self._posted[index].edit(content=text, allowed_mentions=ping, view=view)
                    continue
                sent = await self._send(text, index, view=view, mentions=ping)
                if sent.content != text or not sent.components:  # a re-run's (the nonce's)
                    await sent.edit(content=text, allowed_mentions=ping, view=view)
                self._posted.append(sent)
            except Exception as exc:  # the request stays pending; the sweep expires it
                self.failed = True
                metrics.ERRORS.labels("discord", "reply_failed").inc()
                emit(
                    _LOG,
                    "discord_approval_request_failed",
                    logging.WARNING,
                    error=type(exc).__name__,
                    status=getattr(exc, "status", None),
                )
                return

    async def _last_part(self, part: str, index: int) -> None:
        """The reply's last message, with the feedback buttons; if Discord refuses them (a
        400), logged and sent without them: the answer never depends on the buttons."""
        for with_buttons in (True, False):
            view = feedback_view(self._rated) if with_buttons and self._rated else None
            try:
                if index < len(self._posted):
                    await self._edit(self._posted[index], part, view)
                else:
                    sent = await self._send(part, index, view=view)
                    if sent.content != part or (view is not None and not sent.components):
                        await self._edit(sent, part, view)  # a re-run's preview (the nonce's)
                    self._posted.append(sent)
                return
            except discord.HTTPException as exc:
                if view is None or exc.status != 400:
                    raise
                emit(_LOG, "discord_feedback_buttons_refused", logging.WARNING, code=exc.code)

    async def _say_cut(self) -> None:
        """Some parts went out and the rest could not (a long rate limit): say so on the last
        one posted (an edit: another route than sending), rather than end mid-answer."""
        last = self._posted[-1]
        text = f"{last.content}{CUT_NOTE}"
        if len(text) > MESSAGE_LIMIT:
            text = f"{last.content[: MESSAGE_LIMIT - len(CUT_NOTE) - 1]}…{CUT_NOTE}"
        try:
            await last.edit(content=text, allowed_mentions=self._allowed)
        except Exception as exc:
            emit(_LOG, "discord_reply_failed", logging.WARNING, error=type(exc).__name__)

    # streaming -------------------------------------------------------------------------------

    async def _run_pump(self) -> None:
        """Show the answer so far, at most once per interval, until `finish`."""
        while not self._done.is_set():
            await self._wait(self._dirty.wait())
            if self._done.is_set():
                return
            if not self._posted:
                # The first preview waits until the answer is long or old enough to be worth it.
                ready_at = self._started + self._config.first_edit_seconds
                while self._chars < self._config.first_edit_chars and time.monotonic() < ready_at:
                    await self._wait(asyncio.sleep(ready_at - time.monotonic()), extra=self._dirty)
                    if self._done.is_set():
                        return
            else:
                delay = self._last_edit + self._config.edit_interval - time.monotonic()
                if delay > 0:
                    await self._wait(asyncio.sleep(delay))
                    if self._done.is_set():
                        return
            self._dirty.clear()
            await self._show_preview()

    async def _wait(self, awaitable: Any, extra: asyncio.Event | None = None) -> None:
        """Wait for `awaitable` or `finish`, whichever comes first."""
        waiters = {asyncio.ensure_future(awaitable), asyncio.ensure_future(self._done.wait())}
        if extra is not None:
            extra.clear()
            waiters.add(asyncio.ensure_future(extra.wait()))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _show_preview(self) -> None:
        text = "".join(self._buffer).strip()
        if not text:
            return
        head = split_message(text, MESSAGE_LIMIT - len(PREVIEW_MARK) - 4)[0]
        preview = close_fence(head) + PREVIEW_MARK
        if preview == self._shown:
            return
        try:
            if self._posted:
                await self._posted[0].edit(content=preview, allowed_mentions=self._allowed)
            else:
                self._posted.append(await self._send(preview, 0))
        except Exception as exc:  # a preview is optional; finish() still writes the answer
            emit(_LOG, "discord_preview_failed", logging.INFO, error=type(exc).__name__)
            return
        finally:
            self._last_edit = time.monotonic()
        self._shown = preview

    # REST ------------------------------------------------------------------------------------

    async def _send(
        self,
        content: str,
        index: int,
        *,
        view: discord.ui.View | None = None,
        mentions: discord.AllowedMentions | None = None,
    ) -> discord.Message:
        allowed = mentions or self._allowed
        reference = None
        if index == 0 and self._reply_to is not None:
            reference = self._reply_to.to_reference(fail_if_not_exists=False)
        if view is None:
            return await self._target.send(
                content,
                reference=reference,  # type: ignore[arg-type]
                allowed_mentions=allowed,
                nonce=part_nonce(self._seed, index),
            )
        return await self._target.send(
            content,
            reference=reference,  # type: ignore[arg-type]
            allowed_mentions=allowed,
            nonce=part_nonce(self._seed, index),
            view=view,
        )

    async def _edit(
        self, message: discord.Message, content: str, view: discord.ui.View | None
    ) -> None:
        if view is None:
            await message.edit(content=content, allowed_mentions=self._allowed)
        else:
            await message.edit(content=content, allowed_mentions=self._allowed, view=view)

    async def _stop_typing(self) -> None:
        typing, self._typing = self._typing, None
        if typing is not None:
            with contextlib.suppress(Exception):
                await typing.__aexit__(None, None, None)
