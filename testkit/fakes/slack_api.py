"""A local server that speaks the parts of the Slack Web API the adapter uses.

The real slack_sdk client is pointed at it (SLACK_API_URL), so tests exercise the client
library's own request building, retries and response parsing. It records every call, keeps the
messages the bot posted (including streamed ones) so tests can read the final text, can inject
429s with Retry-After, plays Slack's side of OAuth (oauth.v2.access) and of Socket Mode
(apps.connections.open plus a WebSocket that delivers envelopes and collects acks).

Like Slack it can also enforce per-method rate limits per workspace (`rate_limit`: a 60-second
window, then 429 with Retry-After until the oldest call leaves it), and token rotation: an
install with a refresh token gets an access token that expires (`token_expired` after), and
oauth.v2.access with grant_type=refresh_token trades a refresh token once for a new pair
(a used or unknown one gets `invalid_refresh_token`).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import math
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer


@dataclass
class Identity:
    team_id: str
    user_id: str
    bot_id: str | None
    enterprise_id: str | None = None
    team: str = "Test Team"


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    token: str | None
    at: float  # time.monotonic() on arrival

    @property
    def channel(self) -> str | None:
        value = self.args.get("channel") or self.args.get("channel_id")
        return str(value) if value is not None else None


@dataclass
class Message:
    """A stored message. `text` is what people see: like Slack, a message that has blocks
    (streamed ones do) shows its blocks, and chat.update with text alone keeps them."""

    ts: str
    channel: str
    thread_ts: str | None
    body: str  # the `text` field (the notification fallback when blocks exist)
    user: str | None = None
    bot_id: str | None = None
    streamed: bool = False
    stream_open: bool = False
    updates: int = 0
    blocks_text: str | None = None
    blocks: list[Any] = field(default_factory=list)  # as posted (validated)

    @property
    def text(self) -> str:
        return self.blocks_text if self.blocks_text is not None else self.body

    @text.setter
    def text(self, value: str) -> None:
        if self.blocks_text is not None:
            self.blocks_text = value
        else:
            self.body = value


@dataclass
class Ephemeral:
    """An ephemeral message (chat.postEphemeral): seen by `user` only, never in history.
    `shown` is False when it was posted in a thread that did not exist yet (Slack: "ephemeral
    messages in threads are only shown if there is already an active thread")."""

    ts: str
    channel: str
    user: str
    thread_ts: str | None
    body: str
    blocks: list[Any] = field(default_factory=list)
    shown: bool = True
    replaced: int = 0  # times a response_url replaced it (replace_original)
    deleted: bool = False

    @property
    def text(self) -> str:
        return _blocks_text(self.blocks) if self.blocks else self.body


def _blocks_text(blocks: list[Any]) -> str:
    """The visible text of simple blocks (section/markdown/rich text), enough for tests."""
    parts: list[str] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        text = block.get("text")
        if isinstance(text, dict):
            text = text.get("text")
        if isinstance(text, str):
            parts.append(text)
    return "\n".join(parts)


_TEXT_TYPES = {"plain_text", "mrkdwn"}


def _text_object(value: Any, *, limit: int, plain_only: bool = False) -> bool:
    if not isinstance(value, dict) or not isinstance(value.get("text"), str):
        return False
    kinds = {"plain_text"} if plain_only else _TEXT_TYPES
    return value.get("type") in kinds and 0 < len(value["text"]) <= limit


def _feedback_button(value: Any) -> bool:
    if not isinstance(value, dict) or set(value) - {"text", "value", "accessibility_label"}:
        return False
    label = value.get("accessibility_label")
    return (
        _text_object(value.get("text"), limit=75, plain_only=True)
        and isinstance(value.get("value"), str)
        and 0 < len(value["value"]) <= 2000
        and (label is None or (isinstance(label, str) and 0 < len(label) <= 75))
    )


def _button(element: dict[str, Any]) -> bool:
    """A Block Kit `button` as its reference gives it: plain_text text of at most 75
    characters, action_id and value of at most 255 and 2,000, style primary or danger only."""
    if set(element) - {
        "type",
        "text",
        "action_id",
        "value",
        "url",
        "style",
        "confirm",
        "accessibility_label",
    }:
        return False
    action_id, value, style = element.get("action_id"), element.get("value"), element.get("style")
    return (
        _text_object(element.get("text"), limit=75, plain_only=True)
        and (action_id is None or (isinstance(action_id, str) and 0 < len(action_id) <= 255))
        and (value is None or (isinstance(value, str) and 0 < len(value) <= 2000))
        and style in (None, "primary", "danger")
    )


def _context_action(element: Any) -> bool:
    """An element of a `context_actions` block: `feedback_buttons` or `icon_button`, as the
    Block Kit reference gives them (action_id optional, at most 255 characters)."""
    if not isinstance(element, dict):
        return False
    action_id = element.get("action_id")
    if action_id is not None and not (isinstance(action_id, str) and 0 < len(action_id) <= 255):
        return False
    kind = element.get("type")
    if kind == "feedback_buttons":
        if set(element) - {"type", "action_id", "positive_button", "negative_button"}:
            return False
        return _feedback_button(element.get("positive_button")) and _feedback_button(
            element.get("negative_button")
        )
    if kind == "icon_button":
        return isinstance(element.get("icon"), str) and _text_object(
            element.get("text"), limit=75, plain_only=True
        )
    return False


def invalid_blocks(blocks: Any) -> bool:
    """True when Slack would answer `invalid_blocks`: the kinds the bot sends, strictly (a
    section's text, a context_actions block of feedback or icon buttons); unknown kinds too."""
    if not isinstance(blocks, list) or len(blocks) > 50:
        return True
    for block in blocks:
        if not isinstance(block, dict):
            return True
        block_id = block.get("block_id")
        if block_id is not None and not (isinstance(block_id, str) and 0 < len(block_id) <= 255):
            return True
        kind = block.get("type")
        if kind == "section":
            if not _text_object(block.get("text"), limit=3000):
                return True
        elif kind == "markdown":
            if not isinstance(block.get("text"), str) or len(block["text"]) > 12000:
                return True
        elif kind == "context_actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 5:
                return True
            if set(block) - {"type", "block_id", "elements"}:
                return True
            if not all(_context_action(e) for e in elements):
                return True
        elif kind == "actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 25:
                return True
            for element in elements:  # feedback and icon buttons live in context_actions only
                if not isinstance(element, dict) or element.get("type") in (
                    "feedback_buttons",
                    "icon_button",
                    None,
                ):
                    return True
                if element.get("type") == "button" and not _button(element):
                    return True
            ids = [e.get("action_id") for e in elements if e.get("action_id") is not None]
            if len(ids) != len(set(ids)):  # action_id: unique within its block
                return True
        elif kind not in ("rich_text", "divider", "context", "header", "image"):
            return True
    return False


def _said(
    ts: str, user: str, text: str, thread_ts: str | None, parent_user: str | None, team: str
) -> dict[str, Any]:
    """A message as Slack nests it in `message` / `previous_message` of a change event."""
    said: dict[str, Any] = {
        "type": "message",
        "user": user,
        "text": text,
        "ts": ts,
        "team": team,
        "blocks": [
            {
                "type": "rich_text",
                "block_id": "b" + ts.replace(".", "")[-6:],
                "elements": [
                    {"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}
                ],
            }
        ],
    }
    if thread_ts:
        said["thread_ts"] = thread_ts
        if thread_ts != ts:
            said["parent_user_id"] = parent_user or user
    return said


def message_deleted_event(
    ts: str,
    *,
    channel: str,
    user: str,
    text: str,
    event_ts: str,
    thread_ts: str | None = None,
    parent_user: str | None = None,
    channel_type: str = "channel",
    team: str = "T0TEST",
) -> dict[str, Any]:
    """The `message` event of subtype `message_deleted` Slack sends when a message is deleted
    (docs.slack.dev/reference/events/message/message_deleted): hidden, `deleted_ts` names the
    message, `ts`/`event_ts` the deletion, `previous_message` the message as it was."""
    return {
        "type": "message",
        "subtype": "message_deleted",
        "hidden": True,
        "channel": channel,
        "ts": event_ts,
        "deleted_ts": ts,
        "event_ts": event_ts,
        "channel_type": channel_type,
        "previous_message": _said(ts, user, text, thread_ts, parent_user, team),
    }


def thread_parent_deleted_event(
    ts: str,
    *,
    channel: str,
    user: str,
    text: str,
    event_ts: str,
    channel_type: str = "channel",
    team: str = "T0TEST",
) -> dict[str, Any]:
    """What Slack sends when a message that has thread replies is deleted: not
    `message_deleted` but `message_changed`, whose `message` is a tombstone standing in its
    place (subtype `tombstone`, by USLACKBOT, "This message was deleted.", the same `ts`, the
    thread kept), `previous_message` the message as it was."""
    tombstone = {
        "type": "message",
        "subtype": "tombstone",
        "user": "USLACKBOT",
        "text": "This message was deleted.",
        "ts": ts,
        "thread_ts": ts,
        "hidden": True,
        "team": team,
    }
    return {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "channel": channel,
        "ts": event_ts,
        "event_ts": event_ts,
        "channel_type": channel_type,
        "message": tombstone,
        "previous_message": _said(ts, user, text, ts, None, team),
    }


def message_changed_event(
    ts: str,
    *,
    channel: str,
    user: str,
    old_text: str,
    new_text: str,
    event_ts: str,
    thread_ts: str | None = None,
    parent_user: str | None = None,
    channel_type: str = "channel",
    team: str = "T0TEST",
    edited: bool = True,
) -> dict[str, Any]:
    """The `message` event of subtype `message_changed` Slack sends when a message changes
    (docs.slack.dev/reference/events/message/message_changed): hidden, `message` is the message
    now (with `edited` when a person edited its text), `previous_message` as it was, `ts` /
    `event_ts` the change. `edited=False`: a change that is not an edit (a thread's reply count,
    an unfurl), text unchanged."""
    now = _said(ts, user, new_text, thread_ts, parent_user, team)
    if edited:
        now["edited"] = {"user": user, "ts": event_ts}
    return {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "channel": channel,
        "ts": event_ts,
        "event_ts": event_ts,
        "channel_type": channel_type,
        "message": now,
        "previous_message": _said(ts, user, old_text, thread_ts, parent_user, team),
    }


RESPONSE_URL_USES = 5
RESPONSE_URL_SECONDS = 30 * 60

# Block Kit limits Slack enforces on a view (docs.slack.dev: "Views" and each block's
# reference): at most 100 blocks, 250 KB of JSON; per block the fields below.
VIEW_BYTES = 250_000
MAX_VIEW_BLOCKS = 100
SECTION_TEXT_CHARS = 3000
SECTION_FIELDS = 10
FIELD_CHARS = 2000
HEADER_CHARS = 150
CONTEXT_ELEMENTS = 10
BLOCK_ID_CHARS = 255
_TEXT_TYPES = ("plain_text", "mrkdwn")


def _text_problems(obj: Any, where: str, limit: int, types: tuple[str, ...]) -> list[str]:
    if not isinstance(obj, dict) or obj.get("type") not in types:
        kinds = " or ".join(types)
        return [f"[ERROR] must be a text object of type {kinds} [json-pointer:{where}]"]
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return [f"[ERROR] must be more than 0 characters [json-pointer:{where}/text]"]
    if len(text) > limit:
        return [f"[ERROR] must be less than {limit + 1} characters [json-pointer:{where}/text]"]
    return []


def check_view(view: Any) -> list[str]:
    """Why Slack would refuse this view for views.publish (empty: it is valid): type `home`,
    at most 100 blocks, and the blocks the adapter uses within their limits (section text up
    to 3,000 characters, header 150, context 10 elements, unique block ids); an unknown block
    type is refused too, as Slack does."""
    if not isinstance(view, dict):
        return ["[ERROR] must be an object [json-pointer:/view]"]
    problems: list[str] = []
    if view.get("type") != "home":
        problems.append("[ERROR] must be home for views.publish [json-pointer:/view/type]")
    blocks = view.get("blocks")
    if not isinstance(blocks, list):
        return [*problems, "[ERROR] missing required field: blocks [json-pointer:/view]"]
    if len(blocks) > MAX_VIEW_BLOCKS:
        problems.append(
            f"[ERROR] no more than {MAX_VIEW_BLOCKS} items allowed [json-pointer:/view/blocks]"
        )
    ids: set[str] = set()
    for i, block in enumerate(blocks):
        where = f"/view/blocks/{i}"
        if not isinstance(block, dict):
            problems.append(f"[ERROR] must be an object [json-pointer:{where}]")
            continue
        block_id = block.get("block_id")
        if block_id is not None:
            if not isinstance(block_id, str) or not 0 < len(block_id) <= BLOCK_ID_CHARS:
                problems.append(f"[ERROR] invalid block_id [json-pointer:{where}/block_id]")
            elif block_id in ids:
                problems.append(f"[ERROR] duplicate block_id [json-pointer:{where}/block_id]")
            else:
                ids.add(block_id)
        kind = block.get("type")
        if kind == "section":
            text, fields = block.get("text"), block.get("fields")
            if text is None and not fields:
                problems.append(f"[ERROR] must provide text or fields [json-pointer:{where}]")
            if text is not None:
                problems += _text_problems(text, f"{where}/text", SECTION_TEXT_CHARS, _TEXT_TYPES)
            if fields is not None:
                if not isinstance(fields, list) or len(fields) > SECTION_FIELDS:
                    problems.append(f"[ERROR] at most 10 fields [json-pointer:{where}/fields]")
                else:
                    for j, f in enumerate(fields):
                        problems += _text_problems(
                            f, f"{where}/fields/{j}", FIELD_CHARS, _TEXT_TYPES
                        )
        elif kind == "header":
            problems += _text_problems(
                block.get("text"), f"{where}/text", HEADER_CHARS, ("plain_text",)
            )
        elif kind == "context":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 0 < len(elements) <= CONTEXT_ELEMENTS:
                problems.append(
                    f"[ERROR] between 1 and 10 elements [json-pointer:{where}/elements]"
                )
            else:
                for j, element in enumerate(elements):
                    problems += _text_problems(
                        element, f"{where}/elements/{j}", SECTION_TEXT_CHARS, _TEXT_TYPES
                    )
        elif kind != "divider":
            problems.append(f"[ERROR] unsupported block type [json-pointer:{where}/type]")
    return problems


def view_text(blocks: list[Any]) -> str:
    """The visible text of a view's blocks (sections, fields, headers, context), one a line."""
    parts: list[str] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        texts = [block.get("text"), *(block.get("fields") or []), *(block.get("elements") or [])]
        found = [t.get("text") for t in texts if isinstance(t, dict)]
        parts += [text for text in found if isinstance(text, str)]
    return "\n".join(parts)


def app_mention_edited_event(
    ts: str,
    *,
    channel: str,
    user: str,
    new_text: str,
    event_ts: str,
    thread_ts: str | None = None,
    parent_user: str | None = None,
    team: str = "T0TEST",
) -> dict[str, Any]:
    """The `app_mention` Slack also sends when a message that mentions the app (now) is
    edited: the message as it is now, with `edited` (who, when) and its own `ts`; unlike
    `message_changed` it does not carry the text before the edit (slack-go/slack#1256 shows
    one; java-slack-sdk#755 / bolt-js#960 added `edited` to the type for it)."""
    mention = _said(ts, user, new_text, thread_ts, parent_user, team)
    mention.update(type="app_mention", channel=channel, event_ts=event_ts)
    mention["edited"] = {"user": user, "ts": event_ts}
    return mention


@dataclass
class _ResponseUrl:
    issued: float  # time.monotonic()
    uses: int = 0
    ephemeral: str | None = None  # the ephemeral message whose button handed it out


@dataclass
class _Failure:
    status: int
    error: str
    retry_after: int | None
    times: int


@dataclass
class FakeSlack:
    bot_token: str = "xoxb-test-token"
    team_id: str = "T0TEST"
    bot_user_id: str = "UBOT"
    bot_id: str = "BBOT"
    app_token: str = "xapp-1-test"
    streaming: bool = True
    # Block types this "workspace" refuses with invalid_blocks (a client or plan without them).
    refused_blocks: set[str] = field(default_factory=set)
    assistant: bool = True
    latency: float = 0.0
    calls: list[Call] = field(default_factory=list)
    messages: dict[str, Message] = field(default_factory=dict)
    responses: list[dict[str, Any]] = field(default_factory=list)  # accepted response_url posts
    ephemerals: list[Ephemeral] = field(default_factory=list)  # chat.postEphemeral, in order
    refused_responses: list[dict[str, Any]] = field(default_factory=list)  # {"_url", "error"}
    uploads: dict[str, bytes] = field(default_factory=dict)
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    private_channels: set[str] = field(default_factory=set)
    tokens: dict[str, Identity] = field(default_factory=dict)
    oauth_codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    socket_acks: list[dict[str, Any]] = field(default_factory=list)
    hosted_files: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    file_downloads: list[tuple[str, str | None]] = field(default_factory=list)  # (id, token)
    files_read_scope: bool = True  # False: like an app installed without files:read
    # Token rotation: access token -> expiry (Unix seconds); refresh token -> its grant.
    token_expires: dict[str, float] = field(default_factory=dict)
    refresh_grants: dict[str, dict[str, Any]] = field(default_factory=dict)
    refreshes: list[str] = field(default_factory=list)  # refresh tokens traded, in order
    oauth_client: tuple[str, str] | None = None  # (client_id, secret) a refresh must present
    rate_limited: list[Call] = field(default_factory=list)  # calls answered 429 by `rate_limit`
    # (channel, message ts) -> {(user id, reaction name)} shown on it now
    reactions: dict[tuple[str, str], set[tuple[str, str]]] = field(default_factory=dict)
    home_tab: bool = True  # False: like an app whose manifest leaves the Home tab off
    home_views: dict[str, dict[str, Any]] = field(default_factory=dict)  # user -> view shown
    refused_views: list[tuple[str, list[str]]] = field(default_factory=list)  # (error, why)

    def __post_init__(self) -> None:
        self.tokens.setdefault(
            self.bot_token, Identity(self.team_id, self.bot_user_id, self.bot_id)
        )
        self._failures: dict[str, list[_Failure]] = {}
        self._response_urls: dict[str, _ResponseUrl] = {}
        self._limits: dict[str, int] = {}  # method -> calls per 60 s per workspace
        self._windows: dict[tuple[str, str], deque[float]] = {}
        self._rotations = itertools.count(1)
        self._last_ts = 0.0
        self._server: TestServer | None = None
        self._sockets: list[web.WebSocketResponse] = []
        self._changed = asyncio.Event()
        self._seen_keys: set[tuple[str, str | None]] = set()
        self._key_waiters: dict[tuple[str, str | None], list[asyncio.Future[None]]] = {}
        self.add_user("UADMIN", "Ada Admin", is_admin=True)
        self.add_user("UOWNER", "Olga Owner", is_owner=True)
        self.add_user("U1", "Alice")
        self.add_user("U2", "Bob")

    # -- setup -------------------------------------------------------------------------------

    def add_user(
        self, user_id: str, name: str, *, is_admin: bool = False, is_owner: bool = False
    ) -> None:
        self.users[user_id] = {
            "id": user_id,
            "name": name.lower().replace(" ", "."),
            "real_name": name,
            "is_admin": is_admin,
            "is_owner": is_owner,
            "is_bot": False,
            "profile": {"display_name": name, "real_name": name},
        }

    def add_oauth_code(
        self,
        code: str,
        *,
        team_id: str,
        bot_token: str,
        bot_user_id: str = "UBOT2",
        bot_id: str = "BBOT2",
        installer: str = "UINSTALLER",
        scope: str = "chat:write,app_mentions:read",
    ) -> None:
        self.oauth_codes[code] = {
            "ok": True,
            "app_id": "A0TEST",
            "authed_user": {"id": installer},
            "scope": scope,
            "token_type": "bot",
            "access_token": bot_token,
            "bot_user_id": bot_user_id,
            "team": {"id": team_id, "name": f"Team {team_id}"},
            "enterprise": None,
            "is_enterprise_install": False,
        }
        self.tokens[bot_token] = Identity(team_id, bot_user_id, bot_id)

    def add_rotating_install(
        self,
        code: str,
        *,
        team_id: str,
        bot_token: str,
        refresh_token: str,
        expires_in: int = 43200,
        bot_user_id: str = "UBOT2",
        bot_id: str = "BBOT2",
        installer: str = "UINSTALLER",
        scope: str = "chat:write,app_mentions:read",
    ) -> None:
        """An OAuth code for an app with token rotation on: the install answers with an
        expiring access token (`expires_in` seconds) and a refresh token, as Slack does."""
        self.add_oauth_code(
            code,
            team_id=team_id,
            bot_token=bot_token,
            bot_user_id=bot_user_id,
            bot_id=bot_id,
            installer=installer,
            scope=scope,
        )
        self.oauth_codes[code].update(refresh_token=refresh_token, expires_in=expires_in)
        self.token_expires[bot_token] = time.time() + expires_in
        self.refresh_grants[refresh_token] = {
            "team_id": team_id,
            "bot_user_id": bot_user_id,
            "bot_id": bot_id,
            "installer": installer,
            "scope": scope,
        }

    def rate_limit(self, method: str, per_minute: int) -> None:
        """Enforce Slack's per-method limit: at most `per_minute` accepted calls of `method` per
        workspace in any 60 seconds; others get 429 with Retry-After (seconds until the oldest
        accepted call leaves the window, rounded up)."""
        self._limits[method] = per_minute

    def seed_message(
        self, channel: str, ts: str, *, user: str, text: str = "", thread_ts: str | None = None
    ) -> None:
        """A message people wrote (so conversations.replies can list it)."""
        self.messages[ts] = Message(ts, channel, thread_ts, text, user=user)

    def fail(
        self,
        method: str,
        *,
        status: int = 429,
        error: str = "ratelimited",
        retry_after: int | None = 1,
        times: int = 1,
    ) -> None:
        """Make the next `times` calls of `method` fail (429 + Retry-After by default)."""
        self._failures.setdefault(method, []).append(_Failure(status, error, retry_after, times))

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> FakeSlack:
        app = web.Application(client_max_size=20 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files-pri/{team_file}/download/{name}", self._file_download)
        app.router.add_get("/signin", self._signin)
        app.router.add_post("/response/{rid}", self._response_url)
        app.router.add_get("/link/", self._socket)
        app.router.add_get("/_fake/calls", self._dump_calls)
        app.router.add_get("/_fake/wait", self._wait_call)
        self._server = TestServer(app, host="127.0.0.1")
        await self._server.start_server()
        return self

    async def close(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        if self._server is not None:
            await self._server.close()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.port}"

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/"

    def response_url(self, *, ephemeral: str | None = None) -> str:
        """A new slash command's `response_url`, as Slack hands one out in the payload: it
        takes at most `RESPONSE_URL_USES` posts within `RESPONSE_URL_SECONDS` of being issued
        (docs.slack.dev, "Slash commands": "up to 5 times within 30 minutes"). `ephemeral`:
        handed out by a button of that ephemeral message, which `replace_original` replaces."""
        rid = uuid.uuid4().hex[:12]
        self._response_urls[rid] = _ResponseUrl(issued=time.monotonic(), ephemeral=ephemeral)
        return f"{self.base_url}/response/{rid}"

    def age_response_url(self, url: str, seconds: float) -> None:
        """Make a response_url `seconds` older than it is (to reach its 30-minute expiry)."""
        self._response_urls[url.rsplit("/", 1)[-1]].issued -= seconds

    def answers_at(self, url: str) -> list[dict[str, Any]]:
        """The posts a response_url accepted, in order."""
        return [r for r in self.responses if r.get("_url") == url]

    def add_file(
        self, name: str, data: bytes, mimetype: str, *, filetype: str | None = None
    ) -> dict[str, Any]:
        """Host a file and return the object Slack puts in a message event's `files`."""
        file_id = f"F{uuid.uuid4().hex[:10].upper()}"
        self.hosted_files[file_id] = (data, mimetype)
        url = f"{self.base_url}/files-pri/{self.team_id}-{file_id}/download/{name}"
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": filetype or name.rsplit(".", 1)[-1],
            "size": len(data),
            "mode": "hosted",
            "is_external": False,
            "url_private": url.replace("/download/", "/"),
            "url_private_download": url,
            "permalink": f"https://test.slack.com/files/{file_id}",
        }

    # -- queries -----------------------------------------------------------------------------

    def calls_to(self, method: str, **match: Any) -> list[Call]:
        return [
            c
            for c in self.calls
            if c.method == method and all(c.args.get(k) == v for k, v in match.items())
        ]

    def bot_messages(
        self, channel: str | None = None, thread_ts: str | None = None
    ) -> list[Message]:
        """Messages the bot created, in order, optionally in one channel / thread."""
        found = [
            m
            for m in self.messages.values()
            if m.user in self._bot_users()
            and (channel is None or m.channel == channel)
            and (thread_ts is None or m.thread_ts == thread_ts)
        ]
        return sorted(found, key=lambda m: float(m.ts))

    def _bot_users(self) -> set[str]:
        return {i.user_id for i in self.tokens.values() if i.bot_id}

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("condition not met in time")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, 0.05))
            except TimeoutError:
                pass

    def _touch(self) -> None:
        self._changed.set()

    # -- HTTP handlers -----------------------------------------------------------------------

    async def _args(self, request: web.Request) -> dict[str, Any]:
        args: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            raw = await request.read()
            ctype = request.content_type
            if ctype == "application/json":
                args.update(json.loads(raw or b"{}"))
            elif raw:
                args.update(dict(parse_qsl(raw.decode(), keep_blank_values=True)))
        for key in ("chunks", "prompts", "blocks", "files"):  # `view` stays a string, as sent
            if isinstance(args.get(key), str):
                try:
                    args[key] = json.loads(args[key])
                except ValueError:
                    pass
        return args

    @staticmethod
    def _token(request: web.Request, args: dict[str, Any]) -> str | None:
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth.removeprefix("Bearer ")
        token = args.pop("token", None)
        return str(token) if token else None

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args = await self._args(request)
        token = self._token(request, args)
        call = Call(method, args, token, time.monotonic())
        self.calls.append(call)
        self._touch()
        key = (method, call.channel)
        self._seen_keys.add(key)
        for waiter in self._key_waiters.pop(key, []):
            if not waiter.done():
                waiter.set_result(None)
        if self.latency:
            await asyncio.sleep(self.latency)
        failures = self._failures.get(method)
        if failures:
            failure = failures[0]
            failure.times -= 1
            if failure.times <= 0:
                failures.pop(0)
            headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after else {}
            return web.json_response(
                {"ok": False, "error": failure.error}, status=failure.status, headers=headers
            )
        handler = getattr(self, "api_" + method.replace(".", "_"), None)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"})
        if method == "oauth.v2.access":
            args["_client"] = self._client_credentials(request, args)
            return web.json_response(handler(args, None))
        if method == "apps.connections.open":
            if token != self.app_token:
                return web.json_response({"ok": False, "error": "invalid_auth"})
            return web.json_response(handler(args, None))
        identity = self.tokens.get(token or "")
        if identity is None:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        expires = self.token_expires.get(token or "")
        if expires is not None and expires <= time.time():
            return web.json_response({"ok": False, "error": "token_expired"})
        limited = self._over_limit(method, identity.team_id, call)
        if limited is not None:
            return limited
        result = handler(args, identity)
        return web.json_response(result)

    def _over_limit(self, method: str, team_id: str, call: Call) -> web.Response | None:
        limit = self._limits.get(method)
        if limit is None:
            return None
        window = self._windows.setdefault((method, team_id), deque())
        while window and window[0] <= call.at - 60.0:
            window.popleft()
        if len(window) < limit:
            window.append(call.at)
            return None
        self.rate_limited.append(call)
        wait = max(1, math.ceil(window[0] + 60.0 - call.at))
        return web.json_response(
            {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": str(wait)}
        )

    @staticmethod
    def _client_credentials(request: web.Request, args: dict[str, Any]) -> tuple[str, str]:
        """The app's credentials: HTTP Basic (slack_sdk's way) or client_id/client_secret."""
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            try:
                user, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
                return user, secret
            except ValueError:
                return "", ""
        return str(args.get("client_id") or ""), str(args.get("client_secret") or "")

    async def _dump_calls(self, request: web.Request) -> web.Response:
        """Recorded calls from index `since` on (for benchmarks running the fake elsewhere)."""
        since = int(request.query.get("since", "0"))
        return web.json_response(
            [
                {"method": c.method, "channel": c.channel, "ts": c.args.get("ts"), "at": c.at}
                for c in self.calls[since:]
            ]
        )

    async def _wait_call(self, request: web.Request) -> web.Response:
        """Block until `method` (or any of several, comma-separated) was called for `channel`
        (benchmarks wait for a turn's end)."""
        channel = request.query.get("channel")
        keys = [(m, channel) for m in request.query["method"].split(",") if m]
        if not any(key in self._seen_keys for key in keys):
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            for key in keys:
                self._key_waiters.setdefault(key, []).append(waiter)
            try:
                await asyncio.wait_for(waiter, timeout=float(request.query.get("timeout", "30")))
            except TimeoutError:
                return web.json_response({"ok": False}, status=408)
            finally:
                for key in keys:
                    waiters = self._key_waiters.get(key)
                    if waiters and waiter in waiters:
                        waiters.remove(waiter)
        return web.json_response({"ok": True})

    async def _file_download(self, request: web.Request) -> web.StreamResponse:
        """`url_private_download`: the bytes for a bot token; like Slack, anything else is
        redirected to the sign-in page (which answers 200 with HTML)."""
        file_id = request.match_info["team_file"].rsplit("-", 1)[-1]
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        self.file_downloads.append((file_id, token))
        self._touch()
        who = self.tokens.get(token or "")
        if who is None or who.bot_id is None or not self.files_read_scope:
            raise web.HTTPFound("/signin")
        if file_id not in self.hosted_files:
            return web.Response(status=404, text="not found")
        data, mimetype = self.hosted_files[file_id]
        return web.Response(body=data, content_type=mimetype)

    async def _signin(self, request: web.Request) -> web.Response:
        return web.Response(
            text="<html><body>Sign in to Slack</body></html>", content_type="text/html"
        )

    async def _upload(self, request: web.Request) -> web.Response:
        self.uploads[request.match_info["file_id"]] = await request.read()
        self._touch()
        return web.Response(text="OK - 1")

    async def _response_url(self, request: web.Request) -> web.Response:
        """A post to a slash command's response_url: like Slack, "ok" for a message with text
        (or blocks); refused once the URL was used 5 times or is 30 minutes old, or when it was
        never handed out."""
        entry = self._response_urls.get(request.match_info["rid"])
        url = str(request.url)
        try:
            payload = json.loads(await request.read())
        except ValueError:
            payload = None
        refusal: tuple[int, str] | None = None
        if entry is None:
            refusal = (404, "no_service")
        elif time.monotonic() - entry.issued > RESPONSE_URL_SECONDS:
            refusal = (404, "expired_url")
        elif entry.uses >= RESPONSE_URL_USES:
            refusal = (404, "used_url")
        elif not isinstance(payload, dict):
            refusal = (400, "invalid_payload")
        elif not payload.get("text") and not payload.get("blocks"):
            refusal = (400, "no_text")
        if refusal is not None:
            self.refused_responses.append({"_url": url, "error": refusal[1]})
            self._touch()
            return web.Response(status=refusal[0], text=refusal[1])
        assert entry is not None and isinstance(payload, dict)
        entry.uses += 1
        shown = next((e for e in self.ephemerals if e.ts == entry.ephemeral), None)
        if shown is not None and payload.get("delete_original"):
            shown.deleted = True
        elif shown is not None and payload.get("replace_original"):
            # Like Slack: the ephemeral the button was on now shows this message instead.
            shown.body = str(payload.get("text") or "")
            shown.blocks = list(payload.get("blocks") or [])
            shown.replaced += 1
        payload["_url"] = url
        self.responses.append(payload)
        self._touch()
        return web.Response(text="ok")

    # -- Web API methods ---------------------------------------------------------------------

    def _next_ts(self) -> str:
        """Like Slack's: the send time in microseconds, increasing (so the bot's answer sorts
        after the message it answers, which tests stamp with the current second)."""
        self._last_ts = max(time.time(), self._last_ts + 1e-6)
        return f"{self._last_ts:.6f}"

    def api_auth_test(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        assert who is not None
        return {
            "ok": True,
            "url": "https://test.slack.com/",
            "team": who.team,
            "user": "bot",
            "team_id": who.team_id,
            "user_id": who.user_id,
            "bot_id": who.bot_id,
            "enterprise_id": who.enterprise_id,
            "is_enterprise_install": False,
        }

    def _new_message(self, args: dict[str, Any], who: Identity, text: str, **kw: Any) -> Message:
        ts = self._next_ts()
        thread = args.get("thread_ts") or None
        msg = Message(
            ts, str(args["channel"]), thread, text, user=who.user_id, bot_id=who.bot_id, **kw
        )
        self.messages[ts] = msg
        return msg

    def api_chat_postMessage(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        assert who is not None
        if not args.get("channel"):
            return {"ok": False, "error": "channel_not_found"}
        text = str(args.get("text") or args.get("markdown_text") or "")
        if not text and not args.get("blocks"):
            return {"ok": False, "error": "no_text"}
        if len(text) > 40000:
            return {"ok": False, "error": "msg_too_long"}
        channel = str(args["channel"])
        if channel.startswith(("U", "W")):
            # Slack: a user id as the channel posts to the app's DM with that user (it answers
            # with the DM's own id); a thread there makes no sense.
            if args.get("thread_ts"):
                return {"ok": False, "error": "channel_not_found"}
            args = {**args, "channel": self.dm_of(channel)}
        blocks = args.get("blocks")
        if blocks is not None and self._bad_blocks(blocks):
            return {"ok": False, "error": "invalid_blocks"}
        msg = self._new_message(args, who, text)
        if blocks:
            msg.blocks, msg.blocks_text = list(blocks), _blocks_text(blocks)
        return {"ok": True, "channel": msg.channel, "ts": msg.ts, "message": {"text": text}}

    @staticmethod
    def dm_of(user: str) -> str:
        """The id of the app's DM with this user (stable, as Slack's is)."""
        return "D" + user

    def api_chat_update(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        msg = self.messages.get(str(args.get("ts")))
        if msg is None or msg.channel != args.get("channel"):
            return {"ok": False, "error": "message_not_found"}
        if msg.stream_open:
            return {"ok": False, "error": "message_is_streaming"}
        text = str(args.get("text") or "")
        if len(text) > 40000:
            return {"ok": False, "error": "msg_too_long"}
        blocks = args.get("blocks")
        if blocks and self._bad_blocks(blocks):
            return {"ok": False, "error": "invalid_blocks"}
        msg.body = text
        if "blocks" in args:  # blocks=[] drops them; otherwise Slack keeps showing the old ones
            blocks = blocks or []
            msg.blocks = list(blocks)
            msg.blocks_text = _blocks_text(blocks) if blocks else None
        msg.updates += 1
        return {"ok": True, "channel": msg.channel, "ts": msg.ts, "text": text}

    def api_chat_postEphemeral(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        """As Slack (docs.slack.dev/reference/methods/chat.postEphemeral): `channel` and `user`
        required (`channel_not_found`, `user_not_found`); a DM only to its own person
        (`user_not_in_channel`); `text` or `blocks` (`no_text`), at most 40,000 characters
        (`msg_too_long`), valid blocks (`invalid_blocks`). In a thread nobody has answered yet
        it is accepted but not shown (`Ephemeral.shown`)."""
        assert who is not None
        channel, user = str(args.get("channel") or ""), str(args.get("user") or "")
        if not channel or channel.startswith(("U", "W")):
            return {"ok": False, "error": "channel_not_found"}
        if user not in self.users:
            return {"ok": False, "error": "user_not_found"}
        if channel.startswith("D") and channel != self.dm_of(user):
            return {"ok": False, "error": "user_not_in_channel"}
        text, blocks = str(args.get("text") or ""), args.get("blocks")
        if not text and not blocks:
            return {"ok": False, "error": "no_text"}
        if len(text) > 40000:
            return {"ok": False, "error": "msg_too_long"}
        if blocks is not None and self._bad_blocks(blocks):
            return {"ok": False, "error": "invalid_blocks"}
        thread = str(args.get("thread_ts") or "") or None
        shown = thread is None or any(
            m.channel == channel and m.thread_ts == thread for m in self.messages.values()
        )
        ts = self._next_ts()
        self.ephemerals.append(
            Ephemeral(ts, channel, user, thread, text, list(blocks or []), shown=shown)
        )
        return {"ok": True, "message_ts": ts}

    def ephemerals_for(self, user: str, channel: str | None = None) -> list[Ephemeral]:
        return [e for e in self.ephemerals if e.user == user and channel in (None, e.channel)]

    def button_click(
        self, ephemeral: Ephemeral, action_id: str, *, user: str | None = None
    ) -> dict[str, Any]:
        """The `block_actions` payload Slack sends when a button of an ephemeral message is
        pressed (by `user`, its person unless told): the container says where (is_ephemeral,
        no `message`: Slack keeps no copy of an ephemeral), with a response_url that can
        replace it. KeyError when it has no such button."""
        for block in ephemeral.blocks:
            for element in block.get("elements") or [] if block.get("type") == "actions" else []:
                if element.get("type") == "button" and element.get("action_id") == action_id:
                    payload = block_actions_payload(
                        team=self.team_id,
                        user=user or ephemeral.user,
                        channel=ephemeral.channel,
                        ts=ephemeral.ts,
                        thread_ts=ephemeral.thread_ts,
                        action={
                            "type": "button",
                            "action_id": action_id,
                            "block_id": block.get("block_id", ""),
                            "text": element["text"],
                            "value": element.get("value", ""),
                            "action_ts": f"{time.time():.6f}",
                        },
                        response_url=self.response_url(ephemeral=ephemeral.ts),
                    )
                    payload["container"]["is_ephemeral"] = True
                    del payload["message"]
                    return payload
        raise KeyError(f"ephemeral {ephemeral.ts} has no button {action_id}")

    @staticmethod
    def _chunk_text(args: dict[str, Any]) -> str:
        text = str(args.get("markdown_text") or "")
        for chunk in args.get("chunks") or []:
            if isinstance(chunk, dict) and chunk.get("type") == "markdown_text":
                text += str(chunk.get("text") or "")
        return text

    def api_chat_startStream(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        assert who is not None
        if not self.streaming:
            return {"ok": False, "error": "unknown_method"}
        channel = str(args.get("channel") or "")
        if not args.get("thread_ts"):
            return {"ok": False, "error": "invalid_arguments"}
        if not channel.startswith("D") and not (
            args.get("recipient_team_id") and args.get("recipient_user_id")
        ):
            return {"ok": False, "error": "missing_recipient_user_id"}
        text = self._chunk_text(args)
        if len(text) > 12000:
            return {"ok": False, "error": "msg_too_long"}
        msg = self._new_message(args, who, text, streamed=True, stream_open=True)
        msg.blocks_text = text  # a streamed message is rendered from (markdown) blocks
        return {"ok": True, "channel": msg.channel, "ts": msg.ts}

    def _open_stream(self, args: dict[str, Any]) -> Message | None:
        msg = self.messages.get(str(args.get("ts")))
        if msg is None or not msg.stream_open or msg.channel != args.get("channel"):
            return None
        return msg

    def api_chat_appendStream(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        msg = self._open_stream(args)
        if msg is None:
            return {"ok": False, "error": "message_not_in_streaming_state"}
        text = self._chunk_text(args)
        if len(text) > 12000:
            return {"ok": False, "error": "msg_too_long"}
        msg.text += text
        return {"ok": True, "channel": msg.channel, "ts": msg.ts}

    def api_chat_stopStream(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        msg = self._open_stream(args)
        if msg is None:
            return {"ok": False, "error": "message_not_in_streaming_state"}
        blocks = args.get("blocks")
        if blocks is not None and self._bad_blocks(blocks):
            return {"ok": False, "error": "invalid_blocks"}
        msg.text += self._chunk_text(args)
        msg.blocks = list(blocks or [])  # rendered at the bottom of the finished message
        msg.stream_open = False
        return {"ok": True, "channel": msg.channel, "ts": msg.ts, "message": {"text": msg.text}}

    def api_reactions_add(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        """As Slack: one reaction of a name per user on a message (`already_reacted`)."""
        shown = self.reactions.setdefault(
            (str(args.get("channel")), str(args.get("timestamp"))), set()
        )
        mine = (who.user_id if who else "", str(args.get("name")))
        if mine in shown:
            return {"ok": False, "error": "already_reacted"}
        shown.add(mine)
        return {"ok": True}

    def api_reactions_remove(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        """As Slack: only a reaction that is there can be removed (`no_reaction`)."""
        shown = self.reactions.get((str(args.get("channel")), str(args.get("timestamp"))), set())
        mine = (who.user_id if who else "", str(args.get("name")))
        if mine not in shown:
            return {"ok": False, "error": "no_reaction"}
        shown.discard(mine)
        return {"ok": True}

    def _bad_blocks(self, blocks: Any) -> bool:
        if invalid_blocks(blocks):
            return True
        return any(isinstance(b, dict) and b.get("type") in self.refused_blocks for b in blocks)

    def feedback_click(
        self, ts: str, user: str, *, positive: bool = True, team: str | None = None
    ) -> dict[str, Any]:
        """The `block_actions` payload Slack sends when `user` presses a feedback button of the
        message `ts` (KeyError when the message has none)."""
        msg = self.messages[ts]
        for block in msg.blocks:
            if block.get("type") != "context_actions":
                continue
            for element in block["elements"]:
                if element.get("type") != "feedback_buttons":
                    continue
                button = element["positive_button" if positive else "negative_button"]
                return block_actions_payload(
                    team=team or self.team_id,
                    user=user,
                    channel=msg.channel,
                    ts=msg.ts,
                    thread_ts=msg.thread_ts,
                    action={
                        "type": "feedback_buttons",
                        "action_id": element.get("action_id", ""),
                        "block_id": block.get("block_id", ""),
                        "text": button["text"],
                        "value": button["value"],
                        "action_ts": f"{time.time():.6f}",
                    },
                    response_url=self.response_url(),
                )
        raise KeyError(f"message {ts} has no feedback buttons")

    def reactions_on(self, channel: str, ts: str) -> set[str]:
        """The reaction names on a message now (whoever added them)."""
        return {name for _user, name in self.reactions.get((channel, ts), set())}

    def api_views_publish(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        """As Slack (docs.slack.dev/reference/methods/views.publish): a bot token, `user_id`
        and `view` (a JSON-encoded string) required; the view must be a valid `home` view
        (`check_view`): otherwise `invalid_arguments` with the reasons in
        `response_metadata.messages`, `view_too_large` past 250 KB, `not_enabled` when the
        app's Home tab is off, `hash_conflict` for a stale `hash`. The view shown is kept per
        user (`home_views`), replaced by each publish."""
        assert who is not None
        if who.bot_id is None:
            return {"ok": False, "error": "not_allowed_token_type"}
        user, raw = args.get("user_id"), args.get("view")
        problems = []
        if not isinstance(user, str) or not user:
            problems.append("[ERROR] missing required field: user_id")
        view: Any = None
        if isinstance(raw, str):
            if len(raw.encode()) > VIEW_BYTES:
                return self._refuse_view("view_too_large", [])
            try:
                view = json.loads(raw)
            except ValueError:
                problems.append("[ERROR] invalid json [json-pointer:/view]")
        elif isinstance(raw, dict):  # a JSON body: the view as an object
            if len(json.dumps(raw).encode()) > VIEW_BYTES:
                return self._refuse_view("view_too_large", [])
            view = raw
        else:
            problems.append("[ERROR] missing required field: view")
        if view is not None:
            problems += check_view(view)
        if problems:
            return self._refuse_view("invalid_arguments", problems)
        assert isinstance(user, str) and isinstance(view, dict)
        if not self.home_tab:
            return self._refuse_view("not_enabled", [])
        shown = self.home_views.get(user)
        if args.get("hash") and shown is not None and args["hash"] != shown["hash"]:
            return self._refuse_view("hash_conflict", [])
        published = {
            **view,
            "id": "V" + uuid.uuid4().hex[:10].upper(),
            "team_id": who.team_id,
            "hash": f"{time.time():.6f}.{uuid.uuid4().hex[:8]}",
            "app_id": "A0TEST",
            "bot_id": who.bot_id,
        }
        self.home_views[user] = published
        return {"ok": True, "view": published}

    def _refuse_view(self, error: str, problems: list[str]) -> dict[str, Any]:
        self.refused_views.append((error, problems))
        answer: dict[str, Any] = {"ok": False, "error": error}
        if problems:
            answer["response_metadata"] = {"messages": problems}
        return answer

    def home_text(self, user: str) -> str:
        """The visible text of the Home view published for `user` ("" when none)."""
        view = self.home_views.get(user)
        return view_text(view["blocks"]) if view else ""

    def api_users_info(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        user = self.users.get(str(args.get("user")))
        if user is None:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": user}

    def api_conversations_info(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        """Channel ids starting with G are private channels, D are DMs (as Slack's ids once
        were); `private_channels` marks others private."""
        channel = str(args.get("channel") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        is_im = channel.startswith("D")
        private = channel.startswith("G") or channel in self.private_channels
        return {
            "ok": True,
            "channel": {"id": channel, "is_private": private or is_im, "is_im": is_im},
        }

    def api_conversations_replies(
        self, args: dict[str, Any], who: Identity | None
    ) -> dict[str, Any]:
        ts, channel = str(args.get("ts")), str(args.get("channel"))
        thread = [
            {"ts": m.ts, "user": m.user, "text": m.text, "thread_ts": m.thread_ts or m.ts}
            | ({"bot_id": m.bot_id} if m.bot_id else {})
            for m in sorted(self.messages.values(), key=lambda m: float(m.ts))
            if m.channel == channel and (m.ts == ts or m.thread_ts == ts)
        ]
        oldest = float(args.get("oldest") or 0)
        thread = [m for i, m in enumerate(thread) if i == 0 or float(m["ts"]) > oldest]
        return {"ok": True, "messages": thread, "has_more": False}

    def api_conversations_history(
        self, args: dict[str, Any], who: Identity | None
    ) -> dict[str, Any]:
        """Top-level messages of a channel, newest first (as Slack lists them), after `oldest`."""
        channel, oldest = str(args.get("channel")), float(args.get("oldest") or 0)
        limit = int(args.get("limit") or 100)
        top = [
            {"ts": m.ts, "user": m.user, "text": m.text}
            | ({"bot_id": m.bot_id} if m.bot_id else {})
            for m in sorted(self.messages.values(), key=lambda m: float(m.ts), reverse=True)
            if m.channel == channel and m.thread_ts in (None, m.ts) and float(m.ts) > oldest
        ]
        return {"ok": True, "messages": top[:limit], "has_more": len(top) > limit}

    def _assistant(self) -> dict[str, Any] | None:
        return None if self.assistant else {"ok": False, "error": "not_allowed_token_type"}

    def api_assistant_threads_setStatus(
        self, args: dict[str, Any], who: Identity | None
    ) -> dict[str, Any]:
        return self._assistant() or {"ok": True}

    def api_assistant_threads_setSuggestedPrompts(
        self, args: dict[str, Any], who: Identity | None
    ) -> dict[str, Any]:
        return self._assistant() or {"ok": True}

    def api_assistant_threads_setTitle(
        self, args: dict[str, Any], who: Identity | None
    ) -> dict[str, Any]:
        return self._assistant() or {"ok": True}

    def api_files_getUploadURLExternal(
        self, args: dict[str, Any], who: Identity | None
    ) -> dict[str, Any]:
        file_id = "F" + uuid.uuid4().hex[:10].upper()
        return {"ok": True, "file_id": file_id, "upload_url": f"{self.base_url}/upload/{file_id}"}

    def api_files_completeUploadExternal(
        self, args: dict[str, Any], who: Identity | None
    ) -> dict[str, Any]:
        files = args.get("files") or []
        missing = [f["id"] for f in files if f.get("id") not in self.uploads]
        if missing:
            return {"ok": False, "error": "file_not_found"}
        return {"ok": True, "files": [{"id": f["id"], "title": f.get("title")} for f in files]}

    def api_oauth_v2_access(self, args: dict[str, Any], who: Identity | None) -> dict[str, Any]:
        client = args.pop("_client", ("", ""))  # not kept in the recorded call's args
        if args.get("grant_type") == "refresh_token":
            return self._refresh(args, client)
        result = self.oauth_codes.pop(str(args.get("code")), None)
        return result or {"ok": False, "error": "invalid_code"}

    def _refresh(self, args: dict[str, Any], client: tuple[str, str]) -> dict[str, Any]:
        """Trade a refresh token (once) for a new access token and refresh token."""
        client_id, secret = client
        if not client_id:
            return {"ok": False, "error": "invalid_client_id"}
        if self.oauth_client is not None and (client_id, secret) != self.oauth_client:
            return {"ok": False, "error": "bad_client_secret"}
        old = str(args.get("refresh_token") or "")
        grant = self.refresh_grants.pop(old, None)
        if grant is None:
            return {"ok": False, "error": "invalid_refresh_token"}
        self.refreshes.append(old)
        n = next(self._rotations)
        team = grant["team_id"]
        access, refresh = f"xoxe.xoxb-{team}-rotated-{n}", f"xoxe-1-{team}-refresh-{n}"
        self.tokens[access] = Identity(team, grant["bot_user_id"], grant["bot_id"])
        self.token_expires[access] = time.time() + 43200
        self.refresh_grants[refresh] = grant
        return {
            "ok": True,
            "app_id": "A0TEST",
            "authed_user": {"id": grant["installer"]},
            "scope": grant["scope"],
            "token_type": "bot",
            "access_token": access,
            "bot_user_id": grant["bot_user_id"],
            "refresh_token": refresh,
            "expires_in": 43200,
            "team": {"id": team, "name": f"Team {team}"},
            "enterprise": None,
            "is_enterprise_install": False,
        }

    def api_apps_connections_open(
        self, args: dict[str, Any], who: Identity | None
    ) -> dict[str, Any]:
        return {"ok": True, "url": f"ws://127.0.0.1:{self._port()}/link/?ticket=test"}

    def _port(self) -> int:
        assert self._server is not None and self._server.port is not None
        return self._server.port

    # -- Socket Mode -------------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        self._touch()
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1}))
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    self.socket_acks.append(json.loads(msg.data))
                    self._touch()
        finally:
            if ws in self._sockets:
                self._sockets.remove(ws)
        return ws

    @property
    def socket_connected(self) -> bool:
        return bool(self._sockets)

    async def send_envelope(
        self, payload: dict[str, Any], *, kind: str = "events_api", retry_attempt: int = 0
    ) -> str:
        """Deliver one Socket Mode envelope to the connected app; returns its envelope id."""
        envelope_id = uuid.uuid4().hex
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": kind != "events_api",
            "retry_attempt": retry_attempt,
            "retry_reason": "timeout" if retry_attempt else "",
        }
        await self._sockets[-1].send_str(json.dumps(envelope))
        return envelope_id


def block_actions_payload(
    *,
    team: str,
    user: str,
    channel: str,
    ts: str,
    thread_ts: str | None,
    action: dict[str, Any],
    response_url: str = "",
) -> dict[str, Any]:
    """A `block_actions` interactivity payload as Slack sends it for a message's button."""
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": ts,
        "channel_id": channel,
        "is_ephemeral": False,
    }
    message: dict[str, Any] = {"type": "message", "ts": ts, "text": ""}
    if thread_ts:
        container["thread_ts"] = thread_ts
        message["thread_ts"] = thread_ts
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": team},
        "api_app_id": "A0TEST",
        "token": "legacy",
        "container": container,
        "trigger_id": f"{int(time.time())}.1.{uuid.uuid4().hex[:8]}",
        "team": {"id": team, "domain": "test"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": "general"},
        "message": message,
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [action],
    }
