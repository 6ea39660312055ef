"""Multi-workspace install: slack_sdk's installation and OAuth-state stores on the bot's own store.

slack_sdk ships no MongoDB installation store, and the adapter must not import the bot's stores,
so it asks for a tiny document storage (`SlackInstallationStorage`) that the core wires to
MongoDB or SQLite. Every installation key includes the enterprise and team.

Authorization runs on every incoming request before the 3-second ack, so it must not call Slack:
`InstallationAuthorize` builds the AuthorizeResult from the stored bot record (which carries the
bot user id and bot id) behind a short in-process cache; `SingleTeamAuthorize` calls auth.test
once per process for the single-workspace token.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from logging import Logger
from typing import Any, Protocol

from cachetools import TTLCache
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.installation_store.models.installation import Installation
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common.logs import emit
from adapters.slack.errors import api_failed

_LOG = logging.getLogger(__name__)
NONE = "-"  # stands for an absent enterprise or team id in keys


class SlackInstallationStorage(Protocol):
    """JSON documents keyed by (enterprise_id, team_id, name), plus single-use OAuth states.

    `enterprise_id` / `team_id` are never empty: an absent id is passed as "-". Documents hold
    bot tokens: store them like secrets (encrypted at rest if the backend can), never log them.
    """

    async def get_doc(self, enterprise_id: str, team_id: str, name: str) -> dict[str, Any] | None:
        """The document, or None."""

    async def put_doc(
        self, enterprise_id: str, team_id: str, name: str, doc: dict[str, Any]
    ) -> None:
        """Insert or replace."""

    async def delete_docs(self, enterprise_id: str, team_id: str, name: str | None = None) -> int:
        """Delete the document called `name`, or every document of this team if None; a count."""

    async def put_oauth_state(self, state: str, expires_at: float) -> None:
        """Remember an OAuth state until `expires_at` (Unix seconds)."""

    async def consume_oauth_state(self, state: str) -> bool:
        """Atomically delete the state; True only if it existed and had not expired."""


class MemoryInstallationStorage:
    """In-process `SlackInstallationStorage` for tests and single-process development."""

    def __init__(self) -> None:
        self.docs: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.states: dict[str, float] = {}

    async def get_doc(self, enterprise_id: str, team_id: str, name: str) -> dict[str, Any] | None:
        doc = self.docs.get((enterprise_id, team_id, name))
        return dict(doc) if doc is not None else None

    async def put_doc(
        self, enterprise_id: str, team_id: str, name: str, doc: dict[str, Any]
    ) -> None:
        self.docs[(enterprise_id, team_id, name)] = dict(doc)

    async def delete_docs(self, enterprise_id: str, team_id: str, name: str | None = None) -> int:
        doomed = [
            k
            for k in self.docs
            if k[0] == enterprise_id and k[1] == team_id and (name is None or k[2] == name)
        ]
        for key in doomed:
            del self.docs[key]
        return len(doomed)

    async def put_oauth_state(self, state: str, expires_at: float) -> None:
        self.states[state] = expires_at

    async def consume_oauth_state(self, state: str) -> bool:
        expires_at = self.states.pop(state, None)
        return expires_at is not None and expires_at > time.time()


def _ids(
    enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool | None
) -> tuple[str, str]:
    team = NONE if is_enterprise_install else (team_id or NONE)
    return enterprise_id or NONE, team


class StorageInstallationStore(AsyncInstallationStore):
    """slack_sdk's AsyncInstallationStore over `SlackInstallationStorage`, with a bot cache.

    Documents per team: "bot" (latest bot install), "installer" (latest installer) and
    "installer:<user_id>"; uninstalling deletes all of the team's documents. `find_bot` is
    cached for `cache_seconds` and invalidated on this process's writes.
    """

    def __init__(self, storage: SlackInstallationStorage, *, cache_seconds: float = 60.0) -> None:
        self._storage = storage
        self._bots: TTLCache[tuple[str, str], Bot] = TTLCache(10_000, cache_seconds)

    @property
    def logger(self) -> Logger:
        return _LOG

    async def async_save(self, installation: Installation) -> None:
        e, t = _ids(installation.enterprise_id, installation.team_id, False)
        doc = dict(installation.__dict__)
        await self._storage.put_doc(e, t, "installer", doc)
        if installation.user_id:
            await self._storage.put_doc(e, t, f"installer:{installation.user_id}", doc)
        await self.async_save_bot(installation.to_bot())
        emit(_LOG, "slack_installation_saved", enterprise=e, team=t)

    async def async_save_bot(self, bot: Bot) -> None:
        if bot.bot_token is None:
            return
        e, t = _ids(bot.enterprise_id, bot.team_id, False)
        await self._storage.put_doc(e, t, "bot", dict(bot.__dict__))
        self._bots.pop((e, t), None)

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        key = _ids(enterprise_id, team_id, is_enterprise_install)
        cached = self._bots.get(key)
        if cached is not None:
            return cached
        doc = await self._storage.get_doc(key[0], key[1], "bot")
        if doc is None:
            return None
        bot = Bot(**doc)
        self._bots[key] = bot
        return bot

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        e, t = _ids(enterprise_id, team_id, is_enterprise_install)
        name = f"installer:{user_id}" if user_id else "installer"
        doc = await self._storage.get_doc(e, t, name)
        if doc is None:
            return None
        installation = Installation(**doc)
        bot = await self.async_find_bot(
            enterprise_id=enterprise_id,
            team_id=team_id,
            is_enterprise_install=is_enterprise_install,
        )
        if bot is not None and installation.bot_token != bot.bot_token:
            # An older installer record: the bot token of the latest install is the valid one.
            installation.bot_id = bot.bot_id
            installation.bot_user_id = bot.bot_user_id
            installation.bot_token = bot.bot_token
            installation.bot_scopes = bot.bot_scopes
        return installation

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        e, t = _ids(enterprise_id, team_id, False)
        self._bots.pop((e, t), None)
        await self._storage.delete_docs(e, t, "bot")

    async def async_delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        e, t = _ids(enterprise_id, team_id, False)
        if user_id:
            await self._storage.delete_docs(e, t, f"installer:{user_id}")
            latest = await self._storage.get_doc(e, t, "installer")
            if latest is not None and latest.get("user_id") == user_id:
                await self._storage.delete_docs(e, t, "installer")
        else:
            await self._storage.delete_docs(e, t, "installer")

    async def async_delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        e, t = _ids(enterprise_id, team_id, False)
        self._bots.pop((e, t), None)
        count = await self._storage.delete_docs(e, t, None)
        emit(_LOG, "slack_installation_deleted", enterprise=e, team=t, documents=count)


class StorageOAuthStateStore(AsyncOAuthStateStore):
    """Single-use OAuth `state` values with an expiry, in the same storage."""

    def __init__(
        self, storage: SlackInstallationStorage, *, expiration_seconds: float = 600.0
    ) -> None:
        self._storage = storage
        self._expiration = expiration_seconds

    @property
    def logger(self) -> Logger:
        return _LOG

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        state = secrets.token_urlsafe(24)
        await self._storage.put_oauth_state(state, time.time() + self._expiration)
        return state

    async def async_consume(self, state: str) -> bool:
        return bool(state) and await self._storage.consume_oauth_state(state)


class InstallationAuthorize(AsyncAuthorize):
    """Authorize from the stored bot record: no Web API call on the ack path."""

    def __init__(self, store: StorageInstallationStore) -> None:
        self._store = store

    async def __call__(
        self,
        *,
        context: AsyncBoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        actor_enterprise_id: str | None = None,
        actor_team_id: str | None = None,
        actor_user_id: str | None = None,
    ) -> AuthorizeResult | None:
        bot = await self._store.async_find_bot(
            enterprise_id=enterprise_id,
            team_id=team_id,
            is_enterprise_install=context.is_enterprise_install,
        )
        if bot is None:
            emit(
                _LOG,
                "slack_installation_missing",
                logging.WARNING,
                enterprise=enterprise_id,
                team=team_id,
            )
            return None
        return AuthorizeResult(
            enterprise_id=bot.enterprise_id,
            team_id=bot.team_id or team_id,
            bot_id=bot.bot_id,
            bot_user_id=bot.bot_user_id,
            bot_token=bot.bot_token,
            bot_scopes=bot.bot_scopes,
            user_id=user_id,
        )


class SingleTeamAuthorize(AsyncAuthorize):
    """One workspace, one bot token: auth.test once per process (retried until it works)."""

    def __init__(self, token: str, client: AsyncWebClient) -> None:
        self._token = token
        self._client = client
        self._result: AuthorizeResult | None = None
        self._lock = asyncio.Lock()

    async def identity(self) -> AuthorizeResult | None:
        if self._result is not None:
            return self._result
        async with self._lock:
            if self._result is None:
                try:
                    resp = await self._client.auth_test(token=self._token)
                except Exception as exc:
                    api_failed(_LOG, "auth.test", exc)
                    return None
                self._result = AuthorizeResult.from_auth_test_response(
                    auth_test_response=resp, bot_token=self._token
                )
                emit(
                    _LOG,
                    "slack_authorized",
                    team=self._result.team_id,
                    bot_user=self._result.bot_user_id,
                )
        return self._result

    async def __call__(
        self,
        *,
        context: AsyncBoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        actor_enterprise_id: str | None = None,
        actor_team_id: str | None = None,
        actor_user_id: str | None = None,
    ) -> AuthorizeResult | None:
        identity = await self.identity()
        if identity is None:
            return None
        return AuthorizeResult(
            enterprise_id=identity.enterprise_id,
            team_id=identity.team_id,
            bot_id=identity.bot_id,
            bot_user_id=identity.bot_user_id,
            bot_token=self._token,
            user_id=user_id,
        )
