"""Drive the Slack adapter like Slack does: correctly signed HTTP requests to /slack/events.

`SlackHarness` pairs the adapter's aiohttp app (served on a local port) with `FakeSlack` (the
Web API it calls back) and any BotCore, and builds realistic Events API / slash command bodies.

"Nothing else happened" is asserted only after a positive signal: the adapter logs
`slack_event_handled` (event id, outcome) when it is done with an event, answered or dropped;
`HandledLog` collects those lines and `SlackHarness.wait_handled` waits for them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import ClientResponse, ClientSession, web
from slack_sdk.signature import SignatureVerifier

from adapters.slack import SlackConfig, create_http_app
from adapters.slack.connguard import GuardedSite, app_runner
from adapters.slack.oauth import SlackInstallationStorage
from bot.core import BotCore
from testkit.fakes.slack_api import (
    FakeSlack,
    app_mention_edited_event,
    message_changed_event,
    message_deleted_event,
    thread_parent_deleted_event,
)

SECRET = "test-signing-secret"
_ts = itertools.count(1)


def new_ts() -> str:
    return f"{int(time.time())}.{next(_ts):06d}"


def signed_headers(
    body: str, *, secret: str = SECRET, timestamp: int | None = None
) -> dict[str, str]:
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": str(signature)}


class HandledLog(logging.Handler):
    """The `slack_event_handled` lines of every Slack adapter in this process, in order.

    One instance is shared (`HANDLED`); `attach()`/`detach()` count their users and, while any is
    attached, open the adapter's loggers down to DEBUG (events not for the bot log there)."""

    LOGGER = "adapters.slack"

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str | None, str]] = []  # (event id, outcome)
        self.commands: int = 0  # `slack_command_answered` lines: a command's work is over
        self.approvals: list[str] = []  # `slack_approval_handled` outcomes: a click is done
        self._users = 0
        self._level = logging.NOTSET

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == "slack_event_handled":
            fields = getattr(record, "fields", {})
            self.lines.append((fields.get("event_id"), str(fields.get("outcome"))))
        elif record.msg == "slack_command_answered":
            self.commands += 1
        elif record.msg == "slack_approval_handled":
            self.approvals.append(str(getattr(record, "fields", {}).get("outcome")))

    def attach(self) -> None:
        if self._users == 0:
            logger = logging.getLogger(self.LOGGER)
            self._level = logger.level
            logger.setLevel(logging.DEBUG)
            logger.addHandler(self)
        self._users += 1

    def detach(self) -> None:
        if self._users == 0:
            raise RuntimeError("HandledLog.detach() without attach()")
        self._users -= 1
        if self._users == 0:
            logger = logging.getLogger(self.LOGGER)
            logger.removeHandler(self)
            logger.setLevel(self._level)
            self.lines.clear()
            self.commands = 0
            self.approvals.clear()

    def outcomes(self, event_ids: Collection[str]) -> list[str]:
        """Outcomes logged so far for these event ids (one per delivery handled)."""
        return [outcome for event_id, outcome in self.lines if event_id in event_ids]

    async def wait(
        self, event_ids: Collection[str], count: int, *, timeout: float = 5.0
    ) -> list[str]:
        """Until `count` deliveries of these event ids were handled; their outcomes."""
        deadline = time.monotonic() + timeout
        while len(found := self.outcomes(event_ids)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(found)} of {count} events handled: {found}")
            await asyncio.sleep(0.01)
        return found


HANDLED = HandledLog()


def event_body(event: dict[str, Any], *, team: str, event_id: str | None = None) -> dict[str, Any]:
    return {
        "token": "legacy",
        "team_id": team,
        "api_app_id": "A0TEST",
        "event": event,
        "type": "event_callback",
        "event_id": event_id or "Ev" + uuid.uuid4().hex[:12].upper(),
        "event_time": int(time.time()),
        "authorizations": [{"team_id": team, "user_id": "UBOT", "is_bot": True}],
    }


@dataclass
class SlackHarness:
    fake: FakeSlack
    core: BotCore
    config: SlackConfig
    runner: web.AppRunner
    site: GuardedSite
    http: ClientSession
    team: str = "T0TEST"
    sent: list[str] = field(default_factory=list)
    response_urls: list[str] = field(default_factory=list)  # of the commands posted, in order
    mention_edit_ids: list[str] = field(default_factory=list)  # app_mention events of edits

    @classmethod
    async def start(
        cls,
        fake: FakeSlack,
        core: BotCore,
        *,
        storage: SlackInstallationStorage | None = None,
        port: int = 0,
        **config: Any,
    ) -> SlackHarness:
        """`port`: where to serve (0: any free one; a test whose core must know its own public
        URL, e.g. BOT_PUBLIC_URL for sign-ins, reserves one first)."""
        values: dict[str, Any] = {
            "signing_secret": SECRET,
            "bot_token": fake.bot_token,
            "api_url": fake.api_url,
            "update_interval": 0.05,
            "stream_interval": 0.05,
            "first_flush_seconds": 0.0,
            # The reaction at once and no Web API budget, so `wait_done` (the reaction's
            # removal) marks every turn's end however many turns a test runs in a minute; the
            # production defaults are tested by passing them back (tests/slack/test_budget.py).
            "working_reaction_delay": 0.0,
            "progress_per_minute": (),
        }
        values.update(config)
        cfg = SlackConfig(**values)
        # Served the way `bot slack` serves it (connection guard included), on a free port.
        runner = app_runner(create_http_app(core, cfg, storage=storage))
        await runner.setup()
        site = GuardedSite(runner, "127.0.0.1", port)
        await site.start()
        HANDLED.attach()
        return cls(fake, core, cfg, runner, site, ClientSession(), team=fake.team_id)

    async def close(self) -> None:
        """Stop serving (idempotent: a test may close a harness that its fixture closes too)."""
        if self.http.closed:
            return
        await self.http.close()
        await self.runner.cleanup()
        HANDLED.detach()

    @property
    def port(self) -> int:
        return self.site.port

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def post_raw(
        self,
        body: str,
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        secret: str = SECRET,
        timestamp: int | None = None,
    ) -> ClientResponse:
        all_headers = {
            "Content-Type": content_type,
            **signed_headers(body, secret=secret, timestamp=timestamp),
        }
        all_headers.update(headers or {})
        resp = await self.http.post(
            self.url("/slack/events"), data=body.encode(), headers=all_headers
        )
        await resp.read()
        return resp

    async def interact(self, payload: dict[str, Any] | str) -> ClientResponse:
        """An interactivity request as Slack sends it: form-encoded `payload=` JSON, signed."""
        raw = payload if isinstance(payload, str) else json.dumps(payload)
        return await self.post_raw(
            urlencode({"payload": raw}), content_type="application/x-www-form-urlencoded"
        )

    async def send_event(
        self,
        event: dict[str, Any],
        *,
        event_id: str | None = None,
        retry_num: int | None = None,
        team: str | None = None,
    ) -> ClientResponse:
        body = event_body(event, team=team or self.team, event_id=event_id)
        self.sent.append(body["event_id"])
        headers = {}
        if retry_num is not None:
            headers = {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": "http_timeout"}
        return await self.post_raw(json.dumps(body), headers=headers)

    async def mention(
        self,
        text: str = "hello",
        *,
        channel: str = "C1",
        user: str = "U1",
        ts: str | None = None,
        thread_ts: str | None = None,
        event_id: str | None = None,
        team: str | None = None,
        bot_user: str | None = None,
    ) -> str:
        """A channel message mentioning the bot: Slack sends app_mention and message events."""
        ts = ts or new_ts()
        body = f"<@{bot_user or self.fake.bot_user_id}> {text}"
        base = {"user": user, "text": body, "ts": ts, "channel": channel}
        if thread_ts:
            base["thread_ts"] = thread_ts
        await self.send_event({"type": "app_mention", **base}, event_id=event_id, team=team)
        await self.send_event({"type": "message", "channel_type": "channel", **base}, team=team)
        return ts

    async def channel_message(
        self, text: str, *, channel: str = "C1", user: str = "U1", thread_ts: str | None = None
    ) -> str:
        ts = new_ts()
        event = {
            "type": "message",
            "channel_type": "channel",
            "user": user,
            "text": text,
            "ts": ts,
            "channel": channel,
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        await self.send_event(event)
        return ts

    async def dm(
        self,
        text: str,
        *,
        channel: str = "D1",
        user: str = "U1",
        thread_ts: str | None = None,
        event_id: str | None = None,
    ) -> str:
        ts = new_ts()
        event = {
            "type": "message",
            "channel_type": "im",
            "user": user,
            "text": text,
            "ts": ts,
            "channel": channel,
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        await self.send_event(event, event_id=event_id)
        return ts

    async def delete_message(
        self,
        ts: str,
        *,
        text: str,
        channel: str = "C1",
        user: str = "U1",
        thread_ts: str | None = None,
        parent_user: str | None = None,
        channel_type: str = "channel",
    ) -> str:
        """`user` deletes their message `ts` (`text` as it was), as Slack tells it: a
        message with thread replies (every channel mention the bot answered in a thread)
        becomes a tombstone (`message_changed`), any other is `message_deleted`. Returns the
        event id."""
        replied = any(
            m.thread_ts == ts and m.ts != ts and m.channel == channel
            for m in self.fake.messages.values()
        )
        if replied and thread_ts in (None, ts):
            await self.send_event(
                thread_parent_deleted_event(
                    ts,
                    channel=channel,
                    user=user,
                    text=text,
                    event_ts=new_ts(),
                    channel_type=channel_type,
                    team=self.team,
                )
            )
            return self.sent[-1]
        event = message_deleted_event(
            ts,
            channel=channel,
            user=user,
            text=text,
            event_ts=new_ts(),
            thread_ts=thread_ts,
            parent_user=parent_user,
            channel_type=channel_type,
            team=self.team,
        )
        await self.send_event(event)
        return self.sent[-1]

    async def edit_message(
        self,
        ts: str,
        new_text: str,
        *,
        old_text: str,
        channel: str = "C1",
        user: str = "U1",
        thread_ts: str | None = None,
        parent_user: str | None = None,
        channel_type: str = "channel",
        edited: bool = True,
    ) -> str:
        """`user` edits their message `ts` from `old_text` to `new_text`: Slack's
        `message_changed` event, and, when the new text mentions the bot outside a DM, the
        `app_mention` with `edited` that Slack sends as well (first). Returns the id of the
        `message_changed` event (`mention_edit_ids` keeps the other's)."""
        stamp = new_ts()  # when the edit happened: both events say so
        if edited and channel_type != "im" and f"<@{self.fake.bot_user_id}" in new_text:
            await self.send_event(
                app_mention_edited_event(
                    ts,
                    channel=channel,
                    user=user,
                    new_text=new_text,
                    event_ts=stamp,
                    thread_ts=thread_ts,
                    parent_user=parent_user,
                    team=self.team,
                )
            )
            self.mention_edit_ids.append(self.sent[-1])
        event = message_changed_event(
            ts,
            channel=channel,
            user=user,
            old_text=old_text,
            new_text=new_text,
            event_ts=stamp,
            thread_ts=thread_ts,
            parent_user=parent_user,
            channel_type=channel_type,
            team=self.team,
            edited=edited,
        )
        await self.send_event(event)
        return self.sent[-1]

    async def command(
        self,
        command: str,
        text: str = "",
        *,
        user: str = "U1",
        channel: str = "C1",
        team: str | None = None,
    ) -> ClientResponse:
        """Post a slash command as Slack does, with a fresh `response_url` (kept in
        `response_urls`); returns the ack."""
        url = self.fake.response_url()
        self.response_urls.append(url)
        form = {
            "token": "legacy",
            "team_id": team or self.team,
            "team_domain": "test",
            "channel_id": channel,
            "channel_name": "general",
            "user_id": user,
            "user_name": "someone",
            "command": command,
            "text": text,
            "api_app_id": "A0TEST",
            "response_url": url,
            "trigger_id": "1.2.3",
        }
        return await self.post_raw(
            urlencode(form), content_type="application/x-www-form-urlencoded"
        )

    async def ask(
        self,
        command: str,
        text: str = "",
        *,
        user: str = "U1",
        channel: str = "C1",
        team: str | None = None,
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        """A slash command whose ack must be an empty 200 (Slack shows nothing for it); returns
        the first answer posted to its response_url."""
        resp = await self.command(command, text, user=user, channel=channel, team=team)
        assert resp.status == 200, resp.status
        assert await resp.read() == b"", "the ack carries no answer: it comes via response_url"
        url = self.response_urls[-1]
        await self.fake.wait_for(lambda: bool(self.fake.answers_at(url)), timeout)
        return self.fake.answers_at(url)[0]

    async def open_home(
        self, user: str = "U1", *, tab: str = "home", team: str | None = None
    ) -> str:
        """`user` opens the app's Home tab (or, `tab="messages"`, its Messages tab): the
        `app_home_opened` event Slack sends. Returns its event id."""
        event = {
            "type": "app_home_opened",
            "user": user,
            "channel": "D" + user.removeprefix("U"),
            "tab": tab,
            "event_ts": new_ts(),
        }
        await self.send_event(event, team=team)
        return self.sent[-1]

    async def wait_handled(self, count: int | None = None, *, timeout: float = 5.0) -> list[str]:
        """Until the adapter is done with `count` deliveries of the events this harness sent
        (default: every delivery it sent), answered or dropped; their outcomes in the order they
        ended. Deliveries of an event id another harness also sent count here too."""
        wanted = len(self.sent) if count is None else count
        return await HANDLED.wait(set(self.sent), wanted, timeout=timeout)

    async def wait_handled_ids(
        self, event_ids: Collection[str], *, timeout: float = 5.0
    ) -> list[str]:
        """Until the adapter is done with one delivery of each of these events; outcomes."""
        return await HANDLED.wait(set(event_ids), len(set(event_ids)), timeout=timeout)

    async def wait_commands_answered(self, count: int = 1, *, timeout: float = 10.0) -> None:
        """Until `count` slash commands (of any harness in this process) were done with: their
        answer posted, or refused by Slack."""
        deadline = time.monotonic() + timeout
        while HANDLED.commands < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{HANDLED.commands} of {count} commands answered")
            await asyncio.sleep(0.01)

    async def wait_approval_clicks(self, count: int, *, timeout: float = 10.0) -> list[str]:
        """Until `count` approval clicks (of any harness in this process) were done with: the
        decision answered and a turn it completed resumed; their outcomes, in order."""
        deadline = time.monotonic() + timeout
        while len(HANDLED.approvals) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{HANDLED.approvals} of {count} approval clicks handled")
            await asyncio.sleep(0.01)
        return list(HANDLED.approvals)

    async def wait_done(self, message_ts: str, *, timeout: float = 5.0) -> None:
        """Until the bot cleared its working reaction on that message (the turn has finished)."""
        await self.fake.wait_for(
            lambda: bool(self.fake.calls_to("reactions.remove", timestamp=message_ts)), timeout
        )

    async def wait_status_cleared(
        self, thread_ts: str, count: int = 1, timeout: float = 5.0
    ) -> None:
        """Until the assistant status of that thread was cleared `count` times."""
        await self.fake.wait_for(
            lambda: (
                len(
                    self.fake.calls_to(
                        "assistant.threads.setStatus", thread_ts=thread_ts, status=""
                    )
                )
                >= count
            ),
            timeout,
        )

    def replies(self, channel: str, thread_ts: str | None = None) -> list[str]:
        return [m.text for m in self.fake.bot_messages(channel, thread_ts)]

    async def wait_replies(
        self, channel: str, thread_ts: str | None = None, *, count: int = 1, timeout: float = 5.0
    ) -> list[str]:
        def done() -> bool:
            msgs = self.fake.bot_messages(channel, thread_ts)
            return len(msgs) >= count and not any(m.stream_open for m in msgs)

        await self.fake.wait_for(done, timeout)
        return self.replies(channel, thread_ts)
