"""A local Discord: enough of the REST API (v10) and the gateway for the real discord.py client.

One aiohttp server serves both: REST under `/api/v10` and the gateway websocket at `/gateway`.
Point discord.py at it with `DISCORD_API_URL` / `DISCORD_GATEWAY_URL` (see
`adapters.discord.endpoints`). It behaves like Discord where tests rely on it, and rejects what
Discord rejects:

- Gateway: HELLO, heartbeats answered with HEARTBEAT_ACK, IDENTIFY checked (token, intents:
  a privileged Message Content intent the application may not use closes with 4014, a bad token
  with 4004; `shard` [shard_id, num_shards]: an id outside 0..num_shards-1 closes with 4010, a
  session that would hold more than `max_guilds_per_shard` guilds (Discord: 2,500) with 4011),
  READY then one GUILD_CREATE per guild of the session's shard, dispatches numbered with `s`
  (a guild's events to shard `(guild_id >> 22) % num_shards` only, events without a guild,
  such as DMs, to shard 0 only), each identify's time kept (`identify_times`, so tests check
  the `max_concurrency` pacing: one identify per bucket `shard_id % max_concurrency` per 5 s),
  RESUME
  replays what the session missed then RESUMED, `drop_connection()` cuts the TCP connection.
  zlib-stream transport compression is spoken when the client asks for it (discord.py does).
- REST: `/users/@me` (401 for a bad token), `GET /users/{id}`, `POST /users/@me/channels`
  (a DM), `/oauth2/applications/@me`, `/gateway/bot` (the recommended `shards` and the
  `session_start_limit`, its `max_concurrency` included),
  command sync (PUT), messages (create with JSON or multipart files, edit, delete; content over
  2,000 characters or an empty message is a 400; `enforce_nonce` returns the earlier message),
  typing, threads started from a message (THREAD_CREATE dispatched), interaction callbacks
  (a second response is 400 40060, a response after the 3-second window is 404 10062),
  follow-ups and edits of the original response through the webhook routes.
- Faults: `fail_next(method, pattern, status=429, retry_after=...)` answers the next matching
  request with a rate limit (nothing is created) so the client's retry is observable;
  `after=True` does the work first and then answers with the error (a lost response).

Every REST request is recorded (`calls`) with its time, so tests check edit rates and deferral
timing with their own clock.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

API_PREFIX = "/api/v10"
MESSAGE_CONTENT = 1 << 15
GUILD_MEMBERS = 1 << 1
GUILD_PRESENCES = 1 << 8
PRIVILEGED = MESSAGE_CONTENT | GUILD_MEMBERS | GUILD_PRESENCES
EPHEMERAL = 64
INTERACTION_WINDOW = 3.0
# Discord checks an `enforce_nonce` for uniqueness "in the past few minutes" only.
NONCE_WINDOW = 300.0
_ids = itertools.count(1_300_000_000_000_000_000)
# What Discord fills in on a registered command that the request left out (and returns so).
COMMAND_DEFAULTS: dict[str, Any] = {
    "type": 1,
    "nsfw": False,
    "default_member_permissions": None,
    "dm_permission": True,
    "contexts": None,
    "integration_types": [0],
    "name_localizations": None,
    "description_localizations": None,
}


def _json(data: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON answer with Discord's exact content type (discord.py compares it verbatim)."""
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers={**(headers or {}), "Content-Type": "application/json"},
    )


_INTERNAL = frozenset({"deleted", "edits", "file_bodies", "interaction_token"})


def _as_sent(message: dict[str, Any]) -> dict[str, Any]:
    """A stored message as the gateway sends it (without the fake's own bookkeeping)."""
    return {k: v for k, v in message.items() if k not in _INTERNAL}


def snowflake() -> str:
    return str(next(_ids))


# Guild ids one millisecond apart, as guilds created at different times are: their shard
# ((id >> 22) % num_shards) differs from one guild to the next, so N guilds spread over shards.
_guild_ms = itertools.count(1_100_000_000_000_000_000 >> 22)
MAX_GUILDS_PER_SHARD = 2500


def guild_snowflake() -> str:
    return str(next(_guild_ms) << 22)


DISCORD_EPOCH_MS = 1_420_070_400_000
_increment = itertools.count()


def time_snowflake() -> str:
    """A snowflake of the current time, as Discord makes them (ms since 2015 in the top bits)."""
    now_ms = int(time.time() * 1000) - DISCORD_EPOCH_MS
    return str((now_ms << 22) | (next(_increment) & 0xFFF))


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class Call:
    method: str
    path: str
    body: Any
    at: float
    status: int = 200
    files: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    retry_after: float
    remaining: int = 1
    after: bool = False  # do what was asked, then answer with the error (a lost response)
    global_: bool = False  # a global rate limit (every route of the bot), not a bucket's
    skip: int = 0  # matching requests let through first (fail the second part, not the first)


@dataclass
class Session:
    id: str
    seq: int = 0
    sent: list[dict[str, Any]] = field(default_factory=list)  # dispatches, for RESUME
    ws: web.WebSocketResponse | None = None
    compress: Any = None  # zlib compressobj when the client asked for zlib-stream
    shard: list[int] | None = None
    intents: int = 0


@dataclass
class Interaction:
    id: str
    token: str
    created: float
    responded_at: float | None = None
    response: dict[str, Any] | None = None
    followups: list[dict[str, Any]] = field(default_factory=list)
    original: dict[str, Any] | None = None
    payload: dict[str, Any] = field(default_factory=dict)  # the INTERACTION_CREATE data


BUTTON_STYLES = {1, 2, 3, 4, 5, 6}


def components_problem(rows: Any) -> str | None:
    """Why Discord would refuse these message components (legacy action rows of buttons), or
    None: at most 5 rows, 1 to 5 buttons a row, a label of at most 80 characters, a custom_id
    of 1 to 100 characters on every button but a link (which has a url and no custom_id)."""
    if not isinstance(rows, list) or len(rows) > 5:
        return "at most 5 action rows"
    seen: set[str] = set()
    for row in rows:
        if not isinstance(row, dict) or row.get("type") != 1:
            return "a top-level component must be an action row"
        items = row.get("components")
        if not isinstance(items, list) or not 1 <= len(items) <= 5:
            return "an action row holds 1 to 5 buttons"
        for item in items:
            if not isinstance(item, dict) or item.get("type") != 2:
                return "unknown component type"
            style = item.get("style")
            label = item.get("label")
            if style not in BUTTON_STYLES:
                return "unknown button style"
            if label is not None and (not isinstance(label, str) or len(label) > 80):
                return "a label is at most 80 characters"
            if label is None and item.get("emoji") is None:
                return "a button needs a label or an emoji"
            custom_id = item.get("custom_id")
            if style == 5:
                if custom_id is not None or not isinstance(item.get("url"), str):
                    return "a link button has a url and no custom_id"
                continue
            if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= 100:
                return "custom_id is required, 1 to 100 characters"
            if custom_id in seen:
                return "custom_id must be unique in a message"
            seen.add(custom_id)
    return None


def user_obj(user_id: str, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": user_id,
        "username": name,
        "global_name": name,
        "discriminator": "0",
        "avatar": None,
        "bot": bot,
        "public_flags": 0,
        "flags": 0,
    }


def _valid_shard(shard: Any) -> bool:
    """[shard_id, num_shards] with 0 <= shard_id < num_shards (Discord closes 4010 otherwise)."""
    return (
        isinstance(shard, list)
        and len(shard) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in shard)
        and 0 <= shard[0] < shard[1]
    )


class FakeDiscord:
    def __init__(
        self,
        *,
        token: str = "fake-discord-token",
        allow_message_content: bool = True,
        shards: int = 1,
        max_concurrency: int = 1,
        max_guilds_per_shard: int = MAX_GUILDS_PER_SHARD,
        heartbeat_interval_ms: int = 41_250,
    ) -> None:
        self.token = token
        self.allow_message_content = allow_message_content
        # What the application's flags show: the Portal toggle. Set it apart from the gateway's
        # answer for a bot whose flag is on but whose identify is still refused (4014), as
        # happens to an app past 100 servers whose verification did not include the intent.
        self.content_flag = allow_message_content
        self.recommended_shards = shards
        self.max_concurrency = max_concurrency
        self.max_guilds_per_shard = max_guilds_per_shard
        self.sessions_started = 0
        self.identify_times: list[tuple[list[int] | None, float]] = []  # (shard, monotonic)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.app_id = snowflake()
        self.bot = user_obj(self.app_id, "chatbot", bot=True)
        self.guilds: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, dict[str, Any]] = {}  # id -> message
        self.calls: list[Call] = []
        self.sessions: dict[str, Session] = {}
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.commands: dict[str | None, list[dict[str, Any]]] = {}  # guild id (None global)
        self.command_puts: list[str | None] = []  # each bulk overwrite, by scope
        self.interactions: dict[str, Interaction] = {}
        self.nonces: dict[tuple[str, str], str] = {}  # (channel, nonce) -> message id
        self.nonce_times: dict[tuple[str, str], float] = {}  # when each nonce was last used
        self.nonce_window = NONCE_WINDOW
        self.clock_offset = 0.0  # added to the fake's clock by `pass_time`
        self.faults: list[Fault] = []
        self.files: dict[str, bytes] = {}  # attachment id -> bytes (the CDN)
        self.cdn_requests = 0
        self.close_on_identify: int | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._changed = asyncio.Event()

    # --- set-up --------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    async def start(self) -> FakeDiscord:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{id}/{name}", self._cdn)
        app.router.add_route("*", API_PREFIX + "/{path:.*}", self._rest)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def close(self) -> None:
        for session in list(self.sessions.values()):
            if session.ws is not None and not session.ws.closed:
                await session.ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()

    def add_user(self, name: str, *, bot: bool = False) -> str:
        user_id = snowflake()
        self.users[user_id] = user_obj(user_id, name, bot=bot)
        return user_id

    def add_guild(self, name: str, *, owner: str | None = None, channels: int = 1) -> str:
        guild_id = guild_snowflake()
        owner = owner or self.add_user(f"{name}-owner")
        everyone = {
            "id": guild_id,
            "name": "@everyone",
            "permissions": str(1024 | 2048 | 65536),
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }
        guild: dict[str, Any] = {
            "id": guild_id,
            "name": name,
            "owner_id": owner,
            "roles": [everyone],
            "channels": [],
            "threads": [],
            "members": [self._member(self.bot)],
            "member_count": 2,
            "large": False,
            "unavailable": False,
            "joined_at": _now_iso(),
            "features": [],
            "emojis": [],
            "stickers": [],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "nsfw_level": 0,
            "system_channel_flags": 0,
            "icon": None,
            "description": None,
        }
        self.guilds[guild_id] = guild
        for i in range(channels):
            self.add_channel(guild_id, f"general-{i}" if i else "general")
        return guild_id

    def add_channel(self, guild_id: str, name: str, *, private: bool = False) -> str:
        """A text channel; `private`: @everyone may not view it (an overwrite denying
        VIEW_CHANNEL to the role whose id is the guild's), the bot may (a member overwrite), as
        Discord's "private channel" toggle sets it up."""
        channel_id = snowflake()
        view = str(1 << 10)
        overwrites = (
            [
                {"id": guild_id, "type": 0, "allow": "0", "deny": view},
                {"id": self.app_id, "type": 1, "allow": view, "deny": "0"},
            ]
            if private
            else []
        )
        channel = {
            "id": channel_id,
            "type": 0,
            "guild_id": guild_id,
            "name": name,
            "position": len(self.guilds[guild_id]["channels"]),
            "permission_overwrites": overwrites,
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
        }
        self.guilds[guild_id]["channels"].append(channel)
        self.channels[channel_id] = channel
        return channel_id

    def add_role(self, guild_id: str, name: str) -> str:
        role_id = snowflake()
        role = {
            "id": role_id,
            "name": name,
            "permissions": "0",
            "position": len(self.guilds[guild_id]["roles"]),
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": True,
            "flags": 0,
        }
        self.guilds[guild_id]["roles"].append(role)
        return role_id

    def dm_channel(self, user_id: str) -> str:
        for channel in self.channels.values():
            if channel["type"] == 1 and channel["recipients"][0]["id"] == user_id:
                return str(channel["id"])
        channel_id = snowflake()
        self.channels[channel_id] = {
            "id": channel_id,
            "type": 1,
            "recipients": [self.users[user_id]],
            "last_message_id": None,
        }
        return channel_id

    def fail_next(
        self,
        method: str,
        pattern: str,
        *,
        status: int = 429,
        retry_after: float = 0.05,
        times: int = 1,
        after: bool = False,
        global_: bool = False,
        skip: int = 0,
    ) -> None:
        """Answer the next `times` requests matching `method` and the path regex with `status`
        (a rate limit with `retry_after` by default); nothing they asked for happens, unless
        `after`: then it is done and only the answer is an error (a response lost on the way).
        `global_`: the 429 is Discord's global limit (`"global": true`, `X-RateLimit-Global`,
        scope `global`, no bucket headers), as Discord answers when a bot passes 50 requests a
        second; a long `retry_after` (minutes) is what Discord sends after sustained abuse.
        `skip`: let that many matching requests through first."""
        self.faults.append(
            Fault(method, re.compile(pattern), status, retry_after, times, after, global_, skip)
        )

    def attachment(
        self, name: str, data: bytes, content_type: str = "text/plain"
    ) -> dict[str, Any]:
        """An uploaded file, as MESSAGE_CREATE describes it; its bytes are served by the CDN."""
        file_id = snowflake()
        self.files[file_id] = data
        url = f"http://127.0.0.1:{self.port}/attachments/{file_id}/{name}"
        return {
            "id": file_id,
            "filename": name,
            "size": len(data),
            "content_type": content_type,
            "url": url,
            "proxy_url": url,
        }

    async def _cdn(self, request: web.Request) -> web.Response:
        self.cdn_requests += 1
        data = self.files.get(request.match_info["id"])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    # --- what users do ----------------------------------------------------------------------

    def _member(self, user: dict[str, Any], roles: list[str] | None = None) -> dict[str, Any]:
        return {
            "user": user,
            "roles": roles or [],
            "joined_at": _now_iso(),
            "deaf": False,
            "mute": False,
            "flags": 0,
            "nick": None,
            "avatar": None,
        }

    async def user_says(
        self,
        channel_id: str,
        user_id: str,
        content: str,
        *,
        mentions: list[str] = (),  # type: ignore[assignment]
        mention_roles: list[str] = (),  # type: ignore[assignment]
        attachments: list[dict[str, Any]] = (),  # type: ignore[assignment]
        reference: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A user posts a message: stored and dispatched as MESSAGE_CREATE. `reference`: a
        Reply to that message (type 19, `message_reference` and `referenced_message`; see
        `user_replies`); `extra`: more message fields (stickers, polls, forwards)."""
        channel = self.channels[channel_id]
        author = self.users.get(user_id) or self.bot
        message: dict[str, Any] = {
            "id": snowflake(),
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [self.users.get(m) or self.bot for m in mentions],
            "mention_roles": list(mention_roles),
            "attachments": list(attachments),
            "embeds": [],
            "pinned": False,
            "type": 0 if reference is None else 19,
            "flags": 0,
            "components": [],
            "injected": True,  # said by a (scripted) user, not sent by the bot through REST
        }
        guild_id = channel.get("guild_id")
        if guild_id is not None:
            message["guild_id"] = guild_id
            message["member"] = {k: v for k, v in self._member(author).items() if k != "user"}
        if reference is not None:
            message["message_reference"] = {
                "type": 0,
                "message_id": reference,
                "channel_id": channel_id,
                **({"guild_id": guild_id} if guild_id is not None else {}),
            }
        message.update(extra or {})
        self.messages[message["id"]] = message
        await self.dispatch("MESSAGE_CREATE", self._with_referenced(message))
        return message

    async def user_edits(
        self,
        message_id: str,
        content: str,
        *,
        mentions: list[str] = (),  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """The author edits a message: stored, and dispatched as MESSAGE_UPDATE with the whole
        message (as Discord sends it now: the message object with `guild_id` and `member` in a
        guild, `edited_timestamp` set)."""
        message = self.messages[message_id]
        message["content"] = content
        message["mentions"] = [self.users.get(m) or self.bot for m in mentions]
        message["edited_timestamp"] = _now_iso()
        await self.dispatch("MESSAGE_UPDATE", self._with_referenced(message))
        return message

    async def user_deletes(self, message_id: str) -> None:
        """A message is deleted: MESSAGE_DELETE with its `id`, `channel_id` and, in a guild,
        `guild_id` (nothing of its content)."""
        message = self.messages[message_id]
        message["deleted"] = True
        data = {"id": message_id, "channel_id": message["channel_id"]}
        guild_id = self.channels[message["channel_id"]].get("guild_id")
        if guild_id is not None:
            data["guild_id"] = guild_id
        await self.dispatch("MESSAGE_DELETE", data)

    async def bulk_delete(self, channel_id: str, message_ids: list[str]) -> None:
        """A moderator bulk-deletes messages of a guild channel: MESSAGE_DELETE_BULK with
        `ids`, `channel_id` and `guild_id`. Ids of messages it does not hold are sent as given
        (Discord sends what was asked for)."""
        for message_id in message_ids:
            if message_id in self.messages:
                self.messages[message_id]["deleted"] = True
        data = {
            "ids": list(message_ids),
            "channel_id": channel_id,
            "guild_id": self.channels[channel_id]["guild_id"],
        }
        await self.dispatch("MESSAGE_DELETE_BULK", data)

    async def run_command(
        self,
        channel_id: str,
        user_id: str,
        name: str,
        sub: str,
        options: dict[str, Any] | None = None,
        *,
        permissions: int = 0,
        delivered_after: float = 0.0,
        raw_options: Any = None,
        interaction_type: int = 2,
    ) -> Interaction:
        """A user runs `/name sub option:value`: dispatched as INTERACTION_CREATE.

        The interaction's id is a snowflake of its creation time, as Discord's are, and its
        3-second window counts from then; `delivered_after` holds the dispatch back that long
        (a slow gateway). `raw_options` replaces the command's `options` verbatim (what a stale
        or broken client could send). `interaction_type` 4 is an autocomplete request (its
        answer is a type 8 callback with `choices`)."""
        created_at = time.monotonic()
        interaction_id = time_snowflake()
        channel = self.channels[channel_id]
        guild_id = channel.get("guild_id")
        registered = self.commands.get(guild_id) or self.commands.get(None) or []
        command = next((c for c in registered if c["name"] == name), None)
        if command is None:
            raise AssertionError(f"/{name} was never synced")
        if raw_options is None:
            spec = next(o for o in command.get("options", []) if o["name"] == sub)
            types = {o["name"]: o["type"] for o in spec.get("options", [])}
            inner = [{"name": k, "type": types[k], "value": v} for k, v in (options or {}).items()]
            command_options: Any = [{"name": sub, "type": 1, "options": inner}]
        else:
            command_options = raw_options
        interaction = Interaction(id=interaction_id, token=f"itoken-{snowflake()}", created=0.0)
        payload: dict[str, Any] = {
            "id": interaction.id,
            "application_id": self.app_id,
            "type": interaction_type,
            "token": interaction.token,
            "version": 1,
            "channel_id": channel_id,
            "channel": {k: v for k, v in channel.items() if k != "recipients"},
            "data": {
                "id": command["id"],
                "name": name,
                "type": 1,
                "options": command_options,
            },
            "locale": "en-US",
            "app_permissions": str((1 << 53) - 1),
            "entitlements": [],
            "authorizing_integration_owners": {"0": guild_id or "0"},
            "context": 0 if guild_id else 1,
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        user = self.users[user_id]
        if guild_id is not None:
            payload["guild_id"] = guild_id
            payload["guild_locale"] = "en-US"
            payload["member"] = {**self._member(user), "permissions": str(permissions)}
        else:
            payload["user"] = user
        self.interactions[interaction.token] = interaction
        interaction.created = created_at
        interaction.payload = payload
        if delivered_after > 0:
            await asyncio.sleep(delivered_after)
        await self.dispatch("INTERACTION_CREATE", payload)
        return interaction

    async def user_clicks(
        self,
        message_id: str,
        user_id: str,
        *,
        label: str | None = None,
        custom_id: str | None = None,
        guild_id: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> Interaction:
        """A user presses a button of a message: INTERACTION_CREATE of type 3 (message
        component), as Discord sends it. The button is the one labelled `label` (or the first);
        `custom_id`, `guild_id` and `data` override what Discord would send (hostile tests)."""
        message = self.messages[message_id]
        buttons = [c for row in message.get("components") or [] for c in row["components"]]
        if custom_id is None:
            chosen = next(b for b in buttons if label is None or b.get("label") == label)
            custom_id = chosen["custom_id"]
        channel = self.channels[message["channel_id"]]
        guild = guild_id if guild_id is not None else channel.get("guild_id")
        interaction = Interaction(id=time_snowflake(), token=f"itoken-{snowflake()}", created=0.0)
        payload: dict[str, Any] = {
            "id": interaction.id,
            "application_id": self.app_id,
            "type": 3,
            "token": interaction.token,
            "version": 1,
            "channel_id": message["channel_id"],
            "channel": {k: v for k, v in channel.items() if k != "recipients"},
            "message": {k: v for k, v in message.items() if k not in ("file_bodies",)},
            "data": data if data is not None else {"custom_id": custom_id, "component_type": 2},
            "locale": "en-US",
            "app_permissions": str((1 << 53) - 1),
            "entitlements": [],
            "authorizing_integration_owners": {"0": guild or "0"},
            "context": 0 if guild else 1,
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        user = self.users[user_id]
        if guild is not None:
            payload["guild_id"] = guild
            payload["guild_locale"] = "en-US"
            payload["member"] = {**self._member(user), "permissions": "0"}
        else:
            payload["user"] = user
        self.interactions[interaction.token] = interaction
        interaction.created = time.monotonic()
        interaction.payload = payload
        await self.dispatch("INTERACTION_CREATE", payload)
        return interaction

    async def replay_interaction(self, interaction: Interaction) -> None:
        """The same INTERACTION_CREATE again (as a gateway proxy or a second session might)."""
        await self.dispatch("INTERACTION_CREATE", interaction.payload)

    # --- gateway ----------------------------------------------------------------------------

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        for session in list(self.sessions.values()):
            if session.shard is not None and "guild_id" in data:
                shard_id, count = session.shard
                if (int(data["guild_id"]) >> 22) % count != shard_id:
                    continue
            elif session.shard is not None and session.shard[0] != 0:
                continue  # DMs go to shard 0
            session.seq += 1
            frame = {
                "op": 0,
                "t": event,
                "s": session.seq,
                "d": self._as_seen(session, event, data),
            }
            session.sent.append(frame)
            if session.ws is not None and not session.ws.closed:
                await self._send(session, frame)

    def _as_seen(self, session: Session, event: str, data: dict[str, Any]) -> dict[str, Any]:
        """A message as a session without the Message Content intent gets it: Discord empties
        `content`, `embeds`, `attachments` and `components` unless the message is in a DM,
        mentions the bot, or is the bot's own (replies to the bot carry it in `mentions`)."""
        if event not in ("MESSAGE_CREATE", "MESSAGE_UPDATE") or session.intents & MESSAGE_CONTENT:
            return data
        if "guild_id" not in data or data.get("author", {}).get("id") == self.app_id:
            return data
        if any(m.get("id") == self.app_id for m in data.get("mentions") or []):
            return data
        return {**data, "content": "", "embeds": [], "attachments": [], "components": []}

    async def dispatch_raw(
        self, event: str, data: Any = None, *, d_text: str | None = None
    ) -> None:
        """A dispatch as a broken gateway or proxy could send it, to every session: `data` as
        given (None, a string, a message missing fields...) or `d_text`, the JSON text of `d`
        verbatim (a frame nested thousands deep, which `json.dumps` itself cannot build). It is
        numbered like any dispatch but not kept for RESUME replays."""
        for session in list(self.sessions.values()):
            session.seq += 1
            d = d_text if d_text is not None else json.dumps(data)
            text = f'{{"op":0,"t":{json.dumps(event)},"s":{session.seq},"d":{d}}}'
            await self.send_text(session, text)

    async def send_text(self, session: Session, text: str) -> None:
        """One frame of any text (not necessarily JSON) on `session`'s connection."""
        if session.ws is None or session.ws.closed:
            return
        raw = text.encode()
        try:
            if session.compress is not None:
                data = session.compress.compress(raw) + session.compress.flush(zlib.Z_SYNC_FLUSH)
                await session.ws.send_bytes(data)
            else:
                await session.ws.send_str(text)
        except (ConnectionError, RuntimeError):
            session.ws = None

    async def drop_connection(self) -> None:
        """Cut every gateway connection without a close frame (a network failure)."""
        for session in list(self.sessions.values()):
            if session.ws is not None and not session.ws.closed:
                transport = session.ws._req.transport if session.ws._req else None  # type: ignore[union-attr]
                if transport is not None:
                    transport.abort()
                session.ws = None

    @property
    def connected(self) -> int:
        return sum(1 for s in self.sessions.values() if s.ws is not None and not s.ws.closed)

    async def _send(self, session: Session, frame: dict[str, Any]) -> None:
        assert session.ws is not None
        raw = json.dumps(frame).encode()
        try:
            if session.compress is not None:
                data = session.compress.compress(raw) + session.compress.flush(zlib.Z_SYNC_FLUSH)
                await session.ws.send_bytes(data)
            else:
                await session.ws.send_str(raw.decode())
        except (ConnectionError, RuntimeError):
            session.ws = None

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=4 * 1024 * 1024)
        await ws.prepare(request)
        compress = request.query.get("compress")
        if request.query.get("v") != "10" or request.query.get("encoding", "json") != "json":
            await ws.close(code=4012, message=b"Invalid API version")
            return ws
        if compress not in (None, "zlib-stream"):
            await ws.close(code=4000, message=b"Unsupported compression")
            return ws
        conn = Session(id="")
        conn.ws = ws
        conn.compress = zlib.compressobj() if compress == "zlib-stream" else None
        await self._send(conn, {"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
        session: Session | None = None
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            op = frame.get("op")
            if op == 1:
                self.heartbeats += 1
                await self._send(session or conn, {"op": 11})
            elif op == 2:
                session = await self._identify(conn, frame["d"])
                if session is None:
                    break
            elif op == 6:
                session = await self._resume(conn, frame["d"])
                if session is None:
                    break
            elif op == 8:
                pass  # member chunk requests: no members intent here
        self._changed.set()
        return ws

    async def _identify(self, conn: Session, data: dict[str, Any]) -> Session | None:
        assert conn.ws is not None
        self.identifies.append(data)
        if data.get("token") != self.token:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return None
        intents = int(data.get("intents", 0))
        if intents & MESSAGE_CONTENT and not self.allow_message_content:
            await conn.ws.close(code=4014, message=b"Disallowed intent(s).")
            return None
        if self.close_on_identify is not None:
            await conn.ws.close(code=self.close_on_identify, message=b"scripted")
            return None
        shard = data.get("shard")
        if shard is not None and not _valid_shard(shard):
            await conn.ws.close(code=4010, message=b"Invalid shard.")
            return None
        probe = Session(id="", shard=shard)
        held = sum(1 for g in self.guilds if self._on_shard(probe, g))
        if held > self.max_guilds_per_shard:
            await conn.ws.close(code=4011, message=b"Sharding required.")
            return None
        self.identify_times.append((shard, time.monotonic()))
        self.sessions_started += 1
        session = Session(id=snowflake(), ws=conn.ws, compress=conn.compress)
        session.shard = shard
        session.intents = intents
        self.sessions[session.id] = session
        guilds = [g for g in self.guilds.values() if self._on_shard(session, g["id"])]
        session.seq += 1
        ready = {
            "v": 10,
            "user": self.bot,
            "guilds": [{"id": g["id"], "unavailable": True} for g in guilds],
            "session_id": session.id,
            "resume_gateway_url": self.gateway_url,
            "application": {"id": self.app_id, "flags": 0},
            "private_channels": [],
            "relationships": [],
            "user_settings": {},
            "shard": session.shard or [0, 1],
        }
        await self._send(session, {"op": 0, "t": "READY", "s": session.seq, "d": ready})
        for guild in guilds:
            session.seq += 1
            frame = {"op": 0, "t": "GUILD_CREATE", "s": session.seq, "d": guild}
            await self._send(session, frame)
        self._changed.set()
        return session

    @staticmethod
    def _on_shard(session: Session, guild_id: str) -> bool:
        if session.shard is None:
            return True
        shard_id, count = session.shard
        return (int(guild_id) >> 22) % count == shard_id

    async def _resume(self, conn: Session, data: dict[str, Any]) -> Session | None:
        assert conn.ws is not None
        self.resumes.append(data)
        session = self.sessions.get(str(data.get("session_id")))
        if data.get("token") != self.token:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return None
        if session is None:
            await self._send(conn, {"op": 9, "d": False})  # invalid session: identify again
            return conn
        session.ws = conn.ws
        session.compress = conn.compress
        seq = int(data.get("seq") or 0)
        for frame in session.sent:
            if frame["s"] > seq:
                await self._send(session, frame)
        session.seq += 1
        await self._send(session, {"op": 0, "t": "RESUMED", "s": session.seq, "d": {}})
        self._changed.set()
        return session

    # --- REST -------------------------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        method = request.method
        body: Any = None
        files: list[tuple[str, bytes]] = []
        if request.content_type == "multipart/form-data":
            reader = await request.multipart()
            async for part in reader:
                if part.name == "payload_json":  # type: ignore[union-attr]
                    body = json.loads(await part.text())  # type: ignore[union-attr]
                else:
                    files.append((part.filename or "", await part.read()))  # type: ignore[union-attr]
        elif request.can_read_body:
            raw = await request.read()
            body = json.loads(raw) if raw else None
        call = Call(method, path, body, time.monotonic(), files=files)
        self.calls.append(call)
        try:
            response = await self._route(request, method, path, body, files)
        finally:
            self._changed.set()
        call.status = response.status
        return response

    def _fault(self, method: str, path: str, *, after: bool = False) -> web.Response | None:
        for fault in self.faults:
            if (
                fault.remaining > 0
                and fault.after == after
                and fault.method == method
                and fault.pattern.search(path)
            ):
                if fault.skip > 0:
                    fault.skip -= 1
                    continue
                fault.remaining -= 1
                if fault.status == 429 and fault.global_:
                    return _json(
                        {
                            "message": "You are being rate limited.",
                            "retry_after": fault.retry_after,
                            "global": True,
                        },
                        status=429,
                        headers={
                            "Retry-After": str(math.ceil(fault.retry_after)),
                            "X-RateLimit-Global": "true",
                            "X-RateLimit-Scope": "global",
                            "Via": "1.1 google",
                        },
                    )
                if fault.status == 429:
                    return _json(
                        {
                            "message": "You are being rate limited.",
                            "retry_after": fault.retry_after,
                            "global": False,
                        },
                        status=429,
                        headers={
                            "Retry-After": str(fault.retry_after),
                            "X-RateLimit-Limit": "5",
                            "X-RateLimit-Remaining": "0",
                            "X-RateLimit-Reset-After": str(fault.retry_after),
                            "X-RateLimit-Bucket": "fake-bucket",
                            "X-RateLimit-Scope": "user",
                            "Via": "1.1 google",  # discord.py treats a 429 without it as a ban
                        },
                    )
                return _json({"message": "scripted", "code": 0}, status=fault.status)
        return None

    @staticmethod
    def _error(status: int, code: int, message: str) -> web.Response:
        return _json({"message": message, "code": code}, status=status)

    async def _route(
        self,
        request: web.Request,
        method: str,
        path: str,
        body: Any,
        files: list[tuple[str, bytes]],
    ) -> web.Response:
        fault = self._fault(method, path)
        if fault is not None:
            return fault
        response = await self._serve(request, method, path, body, files)
        lost = self._fault(method, path, after=True)
        return lost if lost is not None and response.status < 300 else response

    async def _serve(
        self,
        request: web.Request,
        method: str,
        path: str,
        body: Any,
        files: list[tuple[str, bytes]],
    ) -> web.Response:
        webhook = re.fullmatch(r"/(interactions|webhooks)/(\d+)/([^/]+)(/.*)?", path)
        if webhook is None:
            if request.headers.get("Authorization") != f"Bot {self.token}":
                return self._error(401, 0, "401: Unauthorized")
            history = self._history_route(method, path, request.query)
            if history is not None:
                return history
            return await self._bot_route(method, path, body, files)
        kind, _, token, rest = webhook.groups()
        return self._interaction_route(kind, method, token, rest or "", body, files)

    async def _bot_route(
        self, method: str, path: str, body: Any, files: list[tuple[str, bytes]]
    ) -> web.Response:
        if method == "GET" and path == "/users/@me":
            return _json(self.bot)
        if method == "POST" and path == "/users/@me/channels":
            # Create DM (docs: "Create a new DM channel with a user. Returns a DM channel
            # object (if one already exists, it will be returned instead)").
            recipient = str((body or {}).get("recipient_id", "")) if isinstance(body, dict) else ""
            if recipient not in self.users:
                return self._error(400, 50033, "Invalid Recipient(s)")
            return _json(self.channels[self.dm_channel(recipient)])
        user = re.fullmatch(r"/users/(\d+)", path)
        if user and method == "GET":
            found = self.users.get(user.group(1))
            return _json(found) if found else self._error(404, 10013, "Unknown User")
        if method == "GET" and path == "/oauth2/applications/@me":
            return _json(self._application())
        if method == "GET" and path == "/gateway/bot":
            return _json(
                {
                    "url": self.gateway_url,
                    "shards": self.recommended_shards,
                    "session_start_limit": {
                        "total": 1000,
                        "remaining": max(0, 1000 - self.sessions_started),
                        "reset_after": 0,
                        "max_concurrency": self.max_concurrency,
                    },
                }
            )
        sync = re.fullmatch(r"/applications/(\d+)(?:/guilds/(\d+))?/commands", path)
        if sync and method == "PUT":
            guild = sync.group(2)
            registered = []
            for spec in body:
                registered.append(
                    {
                        **COMMAND_DEFAULTS,
                        **spec,
                        "id": snowflake(),
                        "application_id": self.app_id,
                        "version": snowflake(),
                    }
                )
                if guild:
                    registered[-1]["guild_id"] = guild
            self.commands[guild] = registered
            self.command_puts.append(guild)
            return _json(registered)
        if sync and method == "GET":  # what is registered now, defaults filled in
            return _json(self.commands.get(sync.group(2), []))
        m = re.fullmatch(r"/channels/(\d+)/typing", path)
        if m and method == "POST":
            return web.Response(status=204)
        m = re.fullmatch(r"/channels/(\d+)/messages", path)
        if m and method == "POST":
            return self._create_message(m.group(1), body or {}, files, self.bot)
        m = re.fullmatch(r"/channels/(\d+)/messages/(\d+)", path)
        if m and method == "GET":  # a message object as REST gives it: no guild_id or member
            message = self.messages.get(m.group(2))
            if message is None or message["channel_id"] != m.group(1) or message.get("deleted"):
                return self._error(404, 10008, "Unknown Message")
            sent = self._with_referenced(message)
            return _json({k: v for k, v in sent.items() if k not in ("guild_id", "member")})
        if m and method in ("PATCH", "DELETE"):
            message = self.messages.get(m.group(2))
            if message is None or message["channel_id"] != m.group(1):
                return self._error(404, 10008, "Unknown Message")
            if message["author"]["id"] != self.app_id:
                return self._error(403, 50005, "Cannot edit a message authored by another user")
            if method == "DELETE":
                message["deleted"] = True
                return web.Response(status=204)
            problem = self._check_content(body or {}, files, editing=True)
            if problem is not None:
                return problem
            if "content" in (body or {}):
                message["content"] = body["content"]
            if "components" in (body or {}):
                message["components"] = list(body["components"] or [])
            message["edited_timestamp"] = _now_iso()
            message["edits"] = message.get("edits", 0) + 1
            return _json(message)
        m = re.fullmatch(r"/channels/(\d+)/messages/(\d+)/threads", path)
        if m and method == "POST":
            return await self._start_thread(m.group(1), m.group(2), body or {})
        m = re.fullmatch(r"/channels/(\d+)", path)
        if m and method == "GET" and m.group(1) in self.channels:
            return _json(self.channels[m.group(1)])
        return self._error(404, 0, f"404: Not Found ({method} {path})")

    def _application(self) -> dict[str, Any]:
        return {
            "id": self.app_id,
            "name": "chatbot",
            "icon": None,
            "description": "",
            "bot_public": True,
            "bot_require_code_grant": False,
            "owner": user_obj(snowflake(), "owner"),
            "verify_key": "0" * 64,
            "flags": 1 << 19 if self.content_flag else 0,  # GATEWAY_MESSAGE_CONTENT_LIMITED
            "team": None,
            "summary": "",
            "rpc_origins": [],
            "interactions_endpoint_url": None,
            "redirect_uris": [],
            "tags": [],
        }

    @staticmethod
    def _check_content(
        body: dict[str, Any], files: list[tuple[str, bytes]], *, editing: bool = False
    ) -> web.Response | None:
        content = body.get("content")
        if content is not None and len(content) > 2000:
            return _json(
                {
                    "message": "Invalid Form Body",
                    "code": 50035,
                    "errors": {
                        "content": {
                            "_errors": [
                                {
                                    "code": "BASE_TYPE_MAX_LENGTH",
                                    "message": "Must be 2000 or fewer in length.",
                                }
                            ]
                        }
                    },
                },
                status=400,
            )
        allowed = body.get("allowed_mentions") or {}
        if len(allowed.get("users") or []) > 100:  # Discord: "Must be 100 or fewer in length."
            return _json(
                {"message": "Invalid Form Body", "code": 50035, "errors": {"allowed_mentions": {}}},
                status=400,
            )
        if "components" in body and body["components"] is not None:
            problem = components_problem(body["components"])
            if problem is not None:
                return _json(
                    {
                        "message": "Invalid Form Body",
                        "code": 50035,
                        "errors": {"components": {"_errors": [{"message": problem}]}},
                    },
                    status=400,
                )
        if not editing and not content and not files and not body.get("embeds"):
            return _json({"message": "Cannot send an empty message", "code": 50006}, status=400)
        return None

    def _create_message(
        self,
        channel_id: str,
        body: dict[str, Any],
        files: list[tuple[str, bytes]],
        author: dict[str, Any],
        *,
        flags: int = 0,
        interaction: str | None = None,
    ) -> web.Response:
        channel = self.channels.get(channel_id)
        if channel is None:
            return self._error(404, 10003, "Unknown Channel")
        problem = self._check_content(body, files)
        if problem is not None:
            return problem
        nonce = body.get("nonce")
        if nonce is not None and len(str(nonce)) > 25:
            return self._error(400, 50035, "Invalid Form Body (nonce)")
        if nonce is not None and body.get("enforce_nonce"):
            earlier = self.nonces.get((channel_id, str(nonce)))
            if earlier is not None and self._nonce_fresh(channel_id, str(nonce)):
                return _json(self.messages[earlier])
        reference = body.get("message_reference")
        message: dict[str, Any] = {
            "id": snowflake(),
            "channel_id": channel_id,
            "author": author,
            "content": body.get("content") or "",
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [
                {
                    "id": snowflake(),
                    "filename": name,
                    "size": len(data),
                    "url": f"{self.api_url}/files/{name}",
                    "proxy_url": f"{self.api_url}/files/{name}",
                }
                for name, data in files
            ],
            "embeds": [],
            "pinned": False,
            "type": 19 if reference else 0,
            "flags": flags | int(body.get("flags") or 0),
            "components": list(body.get("components") or []),
            "allowed_mentions": body.get("allowed_mentions"),
            "nonce": nonce,
            "file_bodies": [data for _, data in files],
        }
        if "guild_id" in channel:
            message["guild_id"] = channel["guild_id"]
        if reference:
            message["message_reference"] = reference
        if interaction:
            message["interaction_token"] = interaction
        self.messages[message["id"]] = message
        if nonce is not None:
            self.nonces[(channel_id, str(nonce))] = message["id"]
            self.nonce_times[(channel_id, str(nonce))] = self.now()
        return _json(message)

    async def _start_thread(
        self, channel_id: str, message_id: str, body: dict[str, Any]
    ) -> web.Response:
        parent = self.channels.get(channel_id)
        if parent is None or message_id not in self.messages:
            return self._error(404, 10008, "Unknown Message")
        if message_id in self.channels:
            return self._error(400, 160004, "A thread has already been created for this message")
        name = str(body.get("name") or "")
        if not 1 <= len(name) <= 100:
            return self._error(400, 50035, "Invalid Form Body (name)")
        thread = {
            "id": message_id,  # Discord gives a thread started on a message the message's id
            "type": 11,
            "guild_id": parent["guild_id"],
            "parent_id": channel_id,
            "owner_id": self.app_id,
            "name": name,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 1,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": int(body.get("auto_archive_duration") or 1440),
                "archive_timestamp": _now_iso(),
                "locked": False,
            },
            "flags": 0,
        }
        self.channels[message_id] = thread
        self.guilds[parent["guild_id"]]["threads"].append(thread)
        await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return _json(thread)

    async def user_opens_thread(self, user_id: str, message: dict[str, Any], name: str) -> str:
        """A person opens a thread on `message` (THREAD_CREATE to the bot, as Discord sends to
        members who can see it); returns the thread id (the message's id)."""
        parent = self.channels[message["channel_id"]]
        thread = {
            "id": message["id"],
            "type": 11,
            "guild_id": parent["guild_id"],
            "parent_id": parent["id"],
            "owner_id": user_id,
            "name": name,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 1,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": _now_iso(),
                "locked": False,
            },
            "flags": 0,
        }
        self.channels[thread["id"]] = thread
        self.guilds[parent["guild_id"]]["threads"].append(thread)
        await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return str(thread["id"])

    async def user_opens_private_thread(self, user_id: str, channel_id: str, name: str) -> str:
        """A person opens a private thread (type 12: not started on a message, a new id, seen
        by its members only) in `channel_id` and adds the bot; returns the thread id."""
        parent = self.channels[channel_id]
        thread = {
            "id": snowflake(),
            "type": 12,
            "guild_id": parent["guild_id"],
            "parent_id": channel_id,
            "owner_id": user_id,
            "name": name,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 2,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": _now_iso(),
                "locked": False,
                "invitable": False,
            },
            "flags": 0,
        }
        self.channels[thread["id"]] = thread
        self.guilds[parent["guild_id"]]["threads"].append(thread)
        await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return str(thread["id"])

    def _interaction_route(
        self,
        kind: str,
        method: str,
        token: str,
        rest: str,
        body: Any,
        files: list[tuple[str, bytes]],
    ) -> web.Response:
        interaction = self.interactions.get(token)
        if interaction is None:
            return self._error(404, 10015, "Unknown Webhook")
        now = time.monotonic()
        if kind == "interactions":
            if rest != "/callback" or method != "POST":
                return self._error(405, 0, "405: Method Not Allowed")
            if interaction.responded_at is not None:
                return self._error(400, 40060, "Interaction has already been acknowledged.")
            if now - interaction.created > INTERACTION_WINDOW:
                return self._error(404, 10062, "Unknown interaction")
            data = (body or {}).get("data") or {}
            component = interaction.payload.get("type") in (3, 5)
            if (body or {}).get("type") in (6, 7) and not component:
                # Discord: DEFERRED_UPDATE_MESSAGE and UPDATE_MESSAGE are "only valid for
                # component-based interactions" (a button or select click, a modal submit).
                return self._error(400, 40043, "Interaction callback type is not valid here")
            interaction.responded_at = now
            interaction.response = body
            resource: dict[str, Any] = {"type": body["type"]}
            if body["type"] == 7:  # the component's message is edited now
                problem = self._check_content(data, files, editing=True)
                if problem is not None:
                    interaction.responded_at = None
                    return problem
                self._edit_component_message(interaction, data)
            choices = data.get("choices") or []
            if body["type"] == 8 and (
                len(choices) > 25 or any(not 1 <= len(str(c.get("name"))) <= 100 for c in choices)
            ):  # Discord: at most 25 autocomplete choices, names of 1 to 100 characters
                interaction.responded_at = None
                return self._error(400, 50035, "Invalid Form Body (choices)")
            if body["type"] == 4:
                problem = self._check_content(data, files)
                if problem is not None:
                    interaction.responded_at = None
                    return problem
                interaction.original = {
                    "content": data.get("content"),
                    "flags": data.get("flags", 0),
                }
                resource["message"] = self._message_like(interaction, interaction.original)
            return _json(
                {
                    "interaction": {
                        "id": interaction.id,
                        "type": interaction.payload.get("type", 2),
                        "response_message_loading": body["type"] == 5,
                        "response_message_ephemeral": bool(int(data.get("flags", 0)) & EPHEMERAL),
                    },
                    "resource": resource,
                }
            )
        if interaction.responded_at is None:
            return self._error(404, 10015, "Unknown Webhook")
        if method == "POST" and rest == "":
            problem = self._check_content(body or {}, files)
            if problem is not None:
                return problem
            followup = {"content": body.get("content"), "flags": int(body.get("flags") or 0)}
            interaction.followups.append(followup)
            return _json(self._message_like(interaction, followup))
        if method == "PATCH" and rest == "/messages/@original":
            problem = self._check_content(body or {}, files, editing=True)
            if problem is not None:
                return problem
            if (interaction.response or {}).get("type") in (6, 7):
                # After an update (or its deferral), the original response of a component
                # interaction is the message the component is on: that message is edited.
                return _json(self._edit_component_message(interaction, body or {}))
            interaction.original = {**(interaction.original or {}), **(body or {})}
            return _json(self._message_like(interaction, interaction.original))
        return self._error(404, 0, f"404: Not Found ({method} {rest})")

    def _edit_component_message(
        self, interaction: Interaction, data: dict[str, Any]
    ) -> dict[str, Any]:
        message = self.messages[str(interaction.payload["message"]["id"])]
        if "content" in data:
            message["content"] = data["content"]
        if "components" in data:
            message["components"] = list(data["components"] or [])
        message["edited_timestamp"] = _now_iso()
        message["edits"] = message.get("edits", 0) + 1
        return message

    def _message_like(self, interaction: Interaction, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": snowflake(),
            "channel_id": "0",
            "author": self.bot,
            "content": data.get("content") or "",
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 20,
            "flags": int(data.get("flags") or 0),
            "components": [],
        }

    # --- waiting ----------------------------------------------------------------------------

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until `predicate()` holds (re-checked after every request and gateway event)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("condition not reached")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=min(left, 0.05))
            except TimeoutError:
                pass

    # --- conversations: replies, forwards, stickers, polls, partial updates, history ---------

    def now(self) -> float:
        """The fake's clock (monotonic, moved on by `pass_time`)."""
        return time.monotonic() + self.clock_offset

    def pass_time(self, seconds: float) -> None:
        """Let time pass for what the fake times itself (the nonce window), not for sockets."""
        self.clock_offset += seconds

    def _nonce_fresh(self, channel_id: str, nonce: str) -> bool:
        used = self.nonce_times.get((channel_id, nonce))
        return used is not None and self.now() - used <= self.nonce_window

    def _with_referenced(self, message: dict[str, Any]) -> dict[str, Any]:
        """A Reply as Discord sends it (gateway and REST): `referenced_message` is the message
        replied to as it is now, `null` once it was deleted. Forwards carry none (their
        `message_snapshots` hold the copy)."""
        sent = _as_sent(message)
        reference = message.get("message_reference")
        if message.get("type") == 19 and reference:
            target = self.messages.get(str(reference.get("message_id")))
            if target is None or target.get("deleted"):
                sent["referenced_message"] = None
            else:
                inner = _as_sent(target)
                inner.pop("referenced_message", None)
                inner.pop("member", None)
                sent["referenced_message"] = inner
        return sent

    async def user_replies(
        self,
        channel_id: str,
        user_id: str,
        content: str,
        to: str,
        *,
        ping: bool = True,
        mentions: list[str] = (),  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """A user uses Reply on message `to`: type 19 with `message_reference` and
        `referenced_message`. With the ping on (Discord's default) the replied-to author is
        added to `mentions` (not to the text); with it off, only the reference names them."""
        target = self.messages[to]
        named = list(mentions)
        author = target["author"]["id"]
        if ping and author != user_id and author not in named:
            named.append(author)
        return await self.user_says(channel_id, user_id, content, mentions=named, reference=to)

    async def user_forwards(self, channel_id: str, user_id: str, message_id: str) -> dict[str, Any]:
        """A user forwards a message into a channel: type 0, no content of its own, a
        `message_reference` of type 1 (FORWARD) naming the original, and `message_snapshots`
        with a copy of it (a subset of the message: no author, no id)."""
        source = self.messages[message_id]
        fields = (
            "type",
            "content",
            "embeds",
            "attachments",
            "timestamp",
            "edited_timestamp",
            "flags",
            "mentions",
            "mention_roles",
            "sticker_items",
            "components",
        )
        snapshot = {k: source[k] for k in fields if k in source}
        reference: dict[str, Any] = {
            "type": 1,
            "message_id": message_id,
            "channel_id": source["channel_id"],
        }
        guild_id = self.channels[source["channel_id"]].get("guild_id")
        if guild_id is not None:
            reference["guild_id"] = guild_id
        extra = {"message_reference": reference, "message_snapshots": [{"message": snapshot}]}
        return await self.user_says(channel_id, user_id, "", extra=extra)

    async def user_sends_sticker(
        self, channel_id: str, user_id: str, name: str, *, content: str = ""
    ) -> dict[str, Any]:
        """A sticker: `sticker_items` (id, name, format), no content."""
        sticker = {"id": snowflake(), "name": name, "format_type": 1}
        return await self.user_says(
            channel_id, user_id, content, extra={"sticker_items": [sticker]}
        )

    async def user_sends_poll(
        self, channel_id: str, user_id: str, question: str, answers: list[str]
    ) -> dict[str, Any]:
        """A poll: a `poll` object (question and answers as poll media), no content."""
        poll = {
            "question": {"text": question},
            "answers": [
                {"answer_id": i + 1, "poll_media": {"text": a}} for i, a in enumerate(answers)
            ],
            "expiry": datetime.now(UTC).isoformat(),
            "allow_multiselect": False,
            "layout_type": 1,
        }
        return await self.user_says(channel_id, user_id, "", extra={"poll": poll})

    async def user_edits_partially(
        self,
        message_id: str,
        content: str,
        *,
        mentions: list[str] = (),  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """An edit delivered as a partial MESSAGE_UPDATE: the fields that changed, with `id`,
        `channel_id` and `guild_id`, and no `author` or `member` (Discord's documentation long
        said an update "may contain only a subset of the full message object payload"; discord.py
        still needs `type` and `content`, so those are sent)."""
        message = self.messages[message_id]
        message["content"] = content
        message["mentions"] = [self.users.get(m) or self.bot for m in mentions]
        message["edited_timestamp"] = _now_iso()
        data: dict[str, Any] = {
            "id": message_id,
            "channel_id": message["channel_id"],
            "type": message["type"],
            "content": content,
            "edited_timestamp": message["edited_timestamp"],
            "mentions": message["mentions"],
        }
        if "guild_id" in message:
            data["guild_id"] = message["guild_id"]
        await self.dispatch("MESSAGE_UPDATE", data)
        return message

    def _history_route(self, method: str, path: str, query: Any) -> web.Response | None:
        """GET /channels/{id}/messages: newest first whatever the direction (discord.py relies on
        it), `limit` 1-100 (default 50), `before`/`after`/`around`; no `nonce` (REST returns it
        only when a message is created), `referenced_message` resolved."""
        m = re.fullmatch(r"/channels/(\d+)/messages", path)
        if m is None or method != "GET":
            return None
        channel_id = m.group(1)
        if channel_id not in self.channels:
            return self._error(404, 10003, "Unknown Channel")
        try:
            limit = int(query.get("limit", 50))
        except ValueError:
            return self._error(400, 50035, "Invalid Form Body (limit)")
        if not 1 <= limit <= 100:
            return self._error(400, 50035, "Invalid Form Body (limit)")
        found = [
            msg
            for msg in self.messages.values()
            if msg["channel_id"] == channel_id and not msg.get("deleted")
        ]
        found.sort(key=lambda msg: int(msg["id"]), reverse=True)
        if "before" in query:
            found = [msg for msg in found if int(msg["id"]) < int(query["before"])]
        if "after" in query:
            found = [msg for msg in found if int(msg["id"]) > int(query["after"])][-limit:]
        found = found[:limit]
        out = []
        for msg in found:
            sent = self._with_referenced(msg)
            for key in ("guild_id", "member", "nonce", "injected"):
                sent.pop(key, None)
            out.append(sent)
        return _json(out)

    # --- reading what the bot did -------------------------------------------------------------

    def bot_messages(self, channel_id: str) -> list[dict[str, Any]]:
        return [
            m
            for m in self.messages.values()
            if m["channel_id"] == channel_id
            and m["author"]["id"] == self.app_id
            and not m.get("deleted")
            and not m.get("injected")
        ]

    def calls_to(self, method: str, pattern: str) -> list[Call]:
        regex = re.compile(pattern)
        return [c for c in self.calls if c.method == method and regex.search(c.path)]
