"""Approvals on Slack (`bot.approvals`): the request as Block Kit buttons visible to the
requester only, the click, and the sweep of requests whose time ran out.

The request: the turn's public reply says in the thread that it waits for the person; then one
`chat.postEphemeral` per pending call, to the requester in that thread (after the reply, since
Slack shows an ephemeral in a thread only once the thread exists): the tool, its arguments
(`bot.approvals.render`, escaped for mrkdwn) and three buttons (Approve, Approve always, Deny)
whose value is the approval's id.

The click: acked first, with no work before it; then, in a tracked task, the core decides
(`DecidesApprovals.decide_approval`: only the requester, one decision wins the store's
compare-and-set). The decision replaces the clicked ephemeral through the click's
`response_url`; a refusal (someone else) is a new ephemeral line to the clicker, leaving the
request as it is; a click on a request already decided (a double click, a re-delivered click)
shows nothing more. A decision that completes the turn resumes it with a sink posting in the
original thread, built from what the approval stored, so any process (after a restart, another
replica) can take the click.

The sweep (`ApprovalSweep`): every few seconds, in every Slack process (Socket Mode and HTTP),
requests past `BOT_APPROVAL_TTL` expire and the model's answer goes to their thread; decided
turns whose process died before resuming are picked up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common.logs import emit
from adapters.common.tasks import TaskTracker
from adapters.slack.config import SlackConfig
from adapters.slack.errors import api_failed
from adapters.slack.mrkdwn import escape
from bot.approvals.desk import Choice, Resume
from bot.approvals.render import argument_lines, minutes
from bot.core import BotCore, DecidesApprovals
from bot.keys import PersonKey, SessionKey
from bot.messages import ReplySink
from bot.stores.approvals import Approval

_LOG = logging.getLogger(__name__)
PLATFORM = "slack"
ACTION_PREFIX = "bot_approval_"
CHOICES: dict[str, Choice] = {
    f"{ACTION_PREFIX}approve": "approve",
    f"{ACTION_PREFIX}always": "always",
    f"{ACTION_PREFIX}deny": "deny",
}
ACTIONS = re.compile(rf"^{ACTION_PREFIX}(approve|always|deny)$")
SECTION_LIMIT = 3000  # Block Kit: a section's text
_MAX_ID = 64  # Slack ids and timestamps are short; anything longer is not Slack's
_MAX_VALUE = 100  # an approval id is 16 characters; Block Kit allows 2,000

# What `ApprovalDesk.decide` says of a request decided before (shown nothing more) and of one
# whose time ran out at the click (a decision: it replaces the buttons).
ALREADY_DECIDED = "That request was already decided."
EXPIRED = "That request expired"

Ack = Callable[..., Awaitable[Any]]
Respond = Callable[..., Awaitable[Any]]
SinkFor = Callable[[AsyncWebClient, Resume], ReplySink]  # where a resumed turn answers
# A turn slot of the adapter (its load guard and turn-concurrency limit): a resumed turn is a
# turn like any other, so it waits for one as a new message's turn does.
Slot = Callable[[], AbstractAsyncContextManager[None]]


@contextlib.asynccontextmanager
async def _no_slot() -> AsyncIterator[None]:
    yield


ClientFor = Callable[[str, str | None], Awaitable[AsyncWebClient | None]]


def request_blocks(approval: Approval) -> list[dict[str, Any]]:
    """One request: the tool and its arguments (cut to a section's size), then the buttons."""
    lines = "\n".join(f"• {escape(line)}" for line in argument_lines(approval.arguments))
    valid = minutes(approval.expires_at - approval.created_at)
    head = f"I'd like to run `{escape(approval.tool)}`, which changes something, with:\n"
    tail = f"\n_Only you see this; valid for {valid}._"
    room = SECTION_LIMIT - len(head) - len(tail)
    if len(lines) > room:
        lines = lines[: room - 40] + "… (the rest is not shown)"

    def button(choice: str, label: str, style: str | None = None) -> dict[str, Any]:
        element: dict[str, Any] = {
            "type": "button",
            "action_id": f"{ACTION_PREFIX}{choice}",
            "text": {"type": "plain_text", "text": label},
            "value": approval.id,
        }
        if style:
            element["style"] = style
        return element

    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": head + lines + tail}},
        {
            "type": "actions",
            "block_id": f"approval_{approval.id}",
            "elements": [
                button("approve", "Approve", "primary"),
                button("always", "Approve always"),
                button("deny", "Deny", "danger"),
            ],
        },
    ]


def request_fallback(approval: Approval) -> str:
    """The ephemeral's `text` (notifications, clients without blocks)."""
    return f"Approval needed to run `{escape(approval.tool)}`."


def waiting_line(approvals: list[Approval], user: str) -> str:
    """The turn's public reply while it waits: who must decide, never the arguments."""
    tools = ", ".join(f"`{a.tool}`" for a in approvals)
    return f"Before I run {tools}, I need <@{user}>'s approval: the buttons are shown to them only."


@dataclass(frozen=True)
class Click:
    """One press of an approval button, from Slack's signed payload."""

    team: str
    user: str
    channel: str
    thread: str | None
    approval_id: str
    choice: Choice


def _id(value: object) -> str | None:
    text = value if isinstance(value, str) else None
    if not text or len(text) > _MAX_ID or not text.isprintable() or ":" in text:
        return None
    return text


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def click_of(body: dict[str, Any], team: str | None) -> Click | None:
    """The click in a `block_actions` payload; None when it is not one Slack sends for these
    buttons (an ephemeral's payload carries no `message`: the container says where)."""
    actions = body.get("actions")
    action = actions[0] if isinstance(actions, list) and actions else None
    if not isinstance(action, dict):
        return None
    choice = CHOICES.get(str(action.get("action_id")))
    value = action.get("value")
    if choice is None or not isinstance(value, str) or not 0 < len(value) <= _MAX_VALUE:
        return None
    container, message = _dict(body.get("container")), _dict(body.get("message"))
    team_id = _id(team or _dict(body.get("team")).get("id"))
    user = _id(_dict(body.get("user")).get("id"))
    channel = _id(_dict(body.get("channel")).get("id") or container.get("channel_id"))
    if team_id is None or user is None or channel is None or not value.isprintable():
        return None
    thread = _id(container.get("thread_ts") or message.get("thread_ts"))
    return Click(team_id, user, channel, thread, value, choice)


class SlackApprovals:
    """The `block_actions` listener of the approval buttons."""

    def __init__(
        self, core: BotCore, tasks: TaskTracker, sink_for: SinkFor, slot: Slot = _no_slot
    ) -> None:
        self.core = core
        self.tasks = tasks
        self.sink_for = sink_for
        self.slot = slot

    async def on_click(
        self,
        ack: Ack,
        body: dict[str, Any],
        context: AsyncBoltContext,
        client: AsyncWebClient,
        respond: Respond,
    ) -> None:
        await ack()  # first, with no work before it: the decision and the turn come after
        click = click_of(body, context.team_id)
        if click is None or not isinstance(self.core, DecidesApprovals):
            emit(_LOG, "slack_approval_dropped", reason="malformed")
            return
        try:
            self.tasks.spawn(self._decide(click, client, respond), name="slack-approval")
        except RuntimeError:  # shutting down: nothing decided, the buttons stay
            emit(_LOG, "slack_approval_dropped", reason="shutting_down")

    async def _decide(self, click: Click, client: AsyncWebClient, respond: Respond) -> None:
        core = self.core
        assert isinstance(core, DecidesApprovals)
        answer = await core.decide_approval(
            PersonKey(PLATFORM, click.team, click.user),
            click.choice,
            click.approval_id,
            SessionKey(PLATFORM, click.team, click.channel, click.thread),
        )
        again = answer.text == ALREADY_DECIDED
        replace = answer.ok or answer.resume is not None or answer.text.startswith(EXPIRED)
        outcome = "already_decided" if again else "decided" if replace else "refused"
        if not again:
            # The decision replaces the buttons; a refusal is a line of its own to the clicker.
            await self._respond(respond, answer.text, replace=replace)
        if answer.resume is not None:
            async with self.slot():
                await core.resume_turn(answer.resume, self.sink_for(client, answer.resume))
        # The click's one line, once everything it led to is done (the resumed turn too).
        emit(
            _LOG,
            "slack_approval_handled",
            outcome=outcome,
            choice=click.choice,
            resumed=answer.resume is not None,
        )

    @staticmethod
    async def _respond(respond: Respond, text: str, *, replace: bool) -> None:
        try:
            if replace:
                await respond(text=text, replace_original=True)
            else:
                await respond(text=text, response_type="ephemeral", replace_original=False)
        except Exception as exc:  # the decision stands either way
            api_failed(_LOG, "response_url", exc)


class ApprovalSweep:
    """Every `every` seconds: requests past their time expire and their turns resume in their
    thread (the model says it was not done); decided turns left by a dead process too."""

    def __init__(
        self,
        core: BotCore,
        config: SlackConfig,
        client_for: ClientFor,
        sink_for: SinkFor,
        slot: Slot = _no_slot,
    ) -> None:
        self.core = core
        self.every = config.approval_sweep_seconds
        self.client_for = client_for
        self.sink_for = sink_for
        self.slot = slot
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if isinstance(self.core, DecidesApprovals) and self._task is None and self.every > 0:
            self._task = asyncio.create_task(self._run(), name="slack-approval-sweep")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                await self.sweep_once()
            except Exception as exc:  # the next round tries again
                emit(_LOG, "slack_approval_sweep_failed", logging.WARNING, error=type(exc).__name__)

    async def sweep_once(self) -> int:
        """One round; returns how many turns it resumed."""
        core = self.core
        assert isinstance(core, DecidesApprovals)
        resumed = 0
        for resume in await core.sweep_approvals():
            client = await self.client_for(resume.message.team, None)
            if client is None:  # the workspace is gone: nowhere to answer
                emit(_LOG, "slack_approval_sweep_skipped", reason="no_installation")
                continue
            async with self.slot():
                await core.resume_turn(resume, self.sink_for(client, resume))
            resumed += 1
        if resumed:
            emit(_LOG, "slack_approval_swept", turns=resumed)
        return resumed
