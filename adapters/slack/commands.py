"""Slash commands: acked at once, answered through the command's `response_url`.

Slack wants the ack within 3 seconds; Bolt answers Slack 404 ("unhandled request") when the
listener has not acked by then. A command's work can take longer than that (`/tools install
mcp` probes the server; `users.info` for the admin check is a Web API call; a loaded process
lags), so every command takes the same path, whatever it is: `ack()` first, with no work before
it, then the work in a tracked task (shutdown waits for it), then the answer, ephemeral, posted
to `response_url`. The ack is empty: the answer follows within moments, and a "working on it"
line would only be one more message to read.

Slack lets a `response_url` be used at most 5 times within 30 minutes of the command. An answer
longer than one message is split; past 5 parts the fifth says where it was cut. When the work
fails, or shutdown stops it, the person is told so through the same URL; an answer Slack
refuses (a used or expired URL) is logged with its status, never retried elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common.logs import emit
from adapters.common.tasks import TaskTracker
from adapters.slack.config import SlackConfig
from adapters.slack.errors import api_failed
from adapters.slack.mrkdwn import markdown_to_mrkdwn, split_message, truncate
from adapters.slack.users import UserDirectory
from bot import metrics
from bot.command_registry import BY_NAME
from bot.command_registry import COMMANDS as REGISTRY
from bot.core import BotCore, CommandRequest

_LOG = logging.getLogger(__name__)
PLATFORM = "slack"
COMMANDS = tuple(c.name for c in REGISTRY)
COMMAND_FAILED = "Sorry, that command failed. Please try again."
COMMAND_STOPPED = "Sorry, I was restarting and had to stop before finishing that. Please try again."
# Slack: a response_url "can be used up to 5 times within 30 minutes" of the command.
MAX_RESPONSES = 5
CUT_NOTE = "\n_(cut here: the rest is longer than Slack lets a command answer)_"

Respond = Callable[..., Awaitable[Any]]
Ack = Callable[..., Awaitable[Any]]


def needs_admin(name: str, text: str) -> bool:
    """Whether the command may change something only admins may (then the person's admin
    flag is looked up, a Web API call): the registry's admin subcommands."""
    command = BY_NAME.get(name)
    return command is not None and command.needs_admin(text)


def answer_parts(text: str, limit: int) -> list[str]:
    """The answer as at most `MAX_RESPONSES` messages of at most `limit` characters; the last
    says where it was cut when the answer is longer than that."""
    parts = split_message(text, limit)
    if len(parts) <= MAX_RESPONSES:
        return parts
    kept = parts[:MAX_RESPONSES]
    kept[-1] = truncate(kept[-1], limit - len(CUT_NOTE), marker=" …") + CUT_NOTE
    return kept


class SlashCommands:
    """The one path every slash command takes: ack, work, answer via response_url."""

    def __init__(
        self, core: BotCore, config: SlackConfig, tasks: TaskTracker, users: UserDirectory
    ) -> None:
        self.core = core
        self.config = config
        self.tasks = tasks
        self.users = users

    async def on_command(
        self,
        ack: Ack,
        command: dict[str, Any],
        context: AsyncBoltContext,
        client: AsyncWebClient,
        respond: Respond,
    ) -> None:
        """Bolt's listener: the ack first, then the work in a tracked task."""
        await ack()
        received = time.monotonic()
        name = str(command.get("command") or "").lstrip("/")
        metrics.EVENTS.labels(PLATFORM, f"command_{name}").inc()
        work = self._run(name, command, context, client, respond, received)
        try:
            self.tasks.spawn(work, name=f"slack-command-{name}")
        except RuntimeError:  # shutting down: no new work, but say so
            await self._answer(respond, client, command, COMMAND_STOPPED)

    async def _run(
        self,
        name: str,
        command: dict[str, Any],
        context: AsyncBoltContext,
        client: AsyncWebClient,
        respond: Respond,
        received: float,
    ) -> None:
        try:
            text = await self._work(name, command, context, client)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(
                    asyncio.shield(self._answer(respond, client, command, COMMAND_STOPPED)), 3.0
                )
            raise
        except Exception as exc:
            metrics.ERRORS.labels(PLATFORM, "command_failed").inc()
            emit(
                _LOG, "slack_command_failed", logging.ERROR, command=name, error=type(exc).__name__
            )
            text = COMMAND_FAILED
        posted = await self._answer(respond, client, command, text)
        emit(
            _LOG,
            "slack_command_answered",
            command=name,
            posted=posted,
            ms=round((time.monotonic() - received) * 1000, 1),
        )

    async def _work(
        self,
        name: str,
        command: dict[str, Any],
        context: AsyncBoltContext,
        client: AsyncWebClient,
    ) -> str:
        team = str(context.team_id or command.get("team_id") or context.enterprise_id or "")
        user = str(command.get("user_id") or context.user_id or "")
        is_admin = False
        if needs_admin(name, str(command.get("text") or "")):
            person = await self.users.get(client, team, user, fresh=True)
            is_admin = bool(person and person.is_platform_admin)
        request = CommandRequest(
            platform=PLATFORM,
            team=team,
            channel=str(command.get("channel_id") or ""),
            user=user,
            command=name,
            text=str(command.get("text") or "").strip(),
            is_platform_admin=is_admin,
        )
        reply = await self.core.handle_command(request)
        return markdown_to_mrkdwn(reply.text) or "Done."

    async def _answer(
        self, respond: Respond, client: AsyncWebClient, command: dict[str, Any], text: str
    ) -> int:
        """Post the answer (ephemeral); returns how many parts Slack took."""
        posted = 0
        for part in answer_parts(text, self.config.message_limit):
            try:
                if command.get("response_url"):
                    resp = await respond(text=part, response_type="ephemeral")
                    status = getattr(resp, "status_code", 200)
                    if status != 200:
                        metrics.PLATFORM_API_ERRORS.labels(PLATFORM, "response_url").inc()
                        emit(
                            _LOG,
                            "slack_command_answer_refused",
                            logging.WARNING,
                            status=status,
                            error=str(getattr(resp, "body", ""))[:40],
                        )
                        return posted
                else:  # no response_url (never from Slack itself): the Web API instead
                    await client.chat_postEphemeral(
                        channel=str(command.get("channel_id")),
                        user=str(command.get("user_id")),
                        text=part,
                    )
            except Exception as exc:
                api_failed(_LOG, "response_url", exc)
                return posted
            posted += 1
        return posted
