"""Feedback on final replies in Slack: Block Kit's `feedback_buttons` (in a `context_actions`
block) on the reply's last message, and the `block_actions` a click sends.

A click is acked at once (Slack wants it within 3 seconds), then the vote goes to the core in a
tracked task and the clicker gets one ephemeral line (thanks, changed, or why it was refused).
Decision: Slack's own buttons show the choice, but a vote that is not kept (an erased reply, a
store down) must be said, and a person who changes their vote should see that it counted, so
every click gets a short ephemeral answer rather than none.

The buttons' `value` is the core's token (`bot.feedback.ReplyRef.token`); the team, person,
channel and message come from Slack's signed payload. A payload in any other shape is dropped
with one log line, never a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common.logs import emit
from adapters.common.tasks import TaskTracker
from adapters.slack.errors import api_failed
from bot import feedback
from bot.core import BotCore
from bot.feedback import FeedbackClick, ReplyRef
from bot.messages import MessageRef
from bot.stores.feedback import DOWN, UP

_LOG = logging.getLogger(__name__)
PLATFORM = "slack"
ACTION_ID = "bot_feedback"
_MAX_ID = 64  # Slack ids and timestamps are short; anything longer is not Slack's
_MAX_VALUE = 2000  # a feedback button's value, as Block Kit bounds it

Ack = Callable[..., Awaitable[Any]]


def feedback_block(ref: ReplyRef) -> dict[str, Any]:
    """The `context_actions` block with the reply's thumbs up/down (Block Kit reference shape)."""

    def button(vote: int, face: str, label: str) -> dict[str, Any]:
        return {
            "text": {"type": "plain_text", "text": face},
            "value": ref.token(vote),
            "accessibility_label": label,
        }

    return {
        "type": "context_actions",
        "block_id": f"fb_{ref.turn_id}",
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": ACTION_ID,
                "positive_button": button(UP, "👍", "This answer was helpful"),
                "negative_button": button(DOWN, "👎", "This answer was not helpful"),
            }
        ],
    }


def _id(value: object) -> str | None:
    text = value if isinstance(value, str) else None
    if not text or len(text) > _MAX_ID or not text.isprintable() or ":" in text:
        return None
    return text


def _field(body: dict[str, Any], key: str, inner: str) -> object:
    value = body.get(key)
    return value.get(inner) if isinstance(value, dict) else None


def click_of(body: dict[str, Any], team: str | None) -> tuple[FeedbackClick, str | None] | None:
    """The click in a `block_actions` payload, with the thread to answer in; None when the
    payload is not one Slack sends for these buttons."""
    actions = body.get("actions")
    action = actions[0] if isinstance(actions, list) and actions else None
    if not isinstance(action, dict) or action.get("action_id") != ACTION_ID:
        return None
    value = action.get("value")
    if not isinstance(value, str) or len(value) > _MAX_VALUE:
        return None
    container = body.get("container") if isinstance(body.get("container"), dict) else {}
    message = body.get("message") if isinstance(body.get("message"), dict) else {}
    assert isinstance(container, dict) and isinstance(message, dict)
    team_id = _id(team or _field(body, "team", "id"))
    user = _id(_field(body, "user", "id"))
    channel = _id(_field(body, "channel", "id") or container.get("channel_id"))
    ts = _id(container.get("message_ts") or message.get("ts"))
    if team_id is None or user is None or channel is None or ts is None:
        return None
    thread = _id(container.get("thread_ts") or message.get("thread_ts"))
    click = FeedbackClick(PLATFORM, team_id, user, channel, ts, value)
    return click, thread


class SlackFeedback:
    """The `block_actions` listener of the feedback buttons."""

    def __init__(self, core: BotCore, tasks: TaskTracker) -> None:
        self.core = core
        self.tasks = tasks

    async def on_click(
        self, ack: Ack, body: dict[str, Any], context: AsyncBoltContext, client: AsyncWebClient
    ) -> None:
        await ack()  # first, with no work before it
        found = click_of(body, context.team_id)
        if found is None:
            emit(_LOG, "slack_feedback_dropped", reason="malformed")
            return
        click, thread = found
        try:
            self.tasks.spawn(self._vote(click, thread, client), name="slack-feedback")
        except RuntimeError:  # shutting down: the click is not kept, Slack shows nothing
            emit(_LOG, "slack_feedback_dropped", reason="shutting_down")

    async def _vote(self, click: FeedbackClick, thread: str | None, client: AsyncWebClient) -> None:
        answer = await feedback.vote(self.core, click)
        try:
            await client.chat_postEphemeral(
                channel=click.where,
                user=click.user,
                text=answer.text,
                thread_ts=thread,
            )
        except Exception as exc:  # the vote is kept either way
            api_failed(_LOG, "chat.postEphemeral", exc, channel=click.where)
        emit(_LOG, "slack_feedback_answered", ok=answer.ok, vote=answer.vote)


def own_reply_deleted(
    event: dict[str, Any], *, team: str, bot_user_id: str | None, bot_id: str | None
) -> MessageRef | None:
    """A `message_deleted` event for one of the bot's own messages (routing ignores those):
    the reply whose votes go, or None."""
    if event.get("type") != "message" or event.get("subtype") != "message_deleted":
        return None
    before = event.get("previous_message")
    if not isinstance(before, dict):
        return None
    mine = (bot_user_id and before.get("user") == bot_user_id) or (
        bot_id and before.get("bot_id") == bot_id
    )
    channel, ts, team_id = _id(event.get("channel")), _id(event.get("deleted_ts")), _id(team)
    if not mine or channel is None or ts is None or team_id is None:
        return None
    return MessageRef(PLATFORM, team_id, (ts,), channel=channel)
