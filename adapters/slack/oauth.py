"""Multi-workspace install: slack_sdk's installation and OAuth-state stores on the bot's own store.

slack_sdk ships no MongoDB installation store, and the adapter must not import the bot's stores,
so it asks for a tiny document storage (`SlackInstallationStorage`) that the core wires to
MongoDB or SQLite. Every installation key includes the enterprise and team.

Authorization runs on every incoming request before the 3-second ack, so it must not call Slack:
`InstallationAuthorize` builds the AuthorizeResult from the stored bot record (which carries the
bot user id and bot id) behind a short in-process cache; `SingleTeamAuthorize` calls auth.test
once per process for the single-workspace token.

The one exception is token rotation (an app with it turned on gets bot tokens that expire in 12
hours, plus a refresh token): as Bolt's own `AsyncInstallationStoreAuthorize` does, a token that
expires within `token_rotation_minutes` is traded with slack_sdk's `AsyncTokenRotator`
(oauth.v2.access, grant_type=refresh_token) and the new pair saved through the installation
store (sealed like every document when BOT_SECRET_KEY is set). Unlike Bolt's, `TokenRotation`
does it once per team however many events arrive meanwhile, waits for it at most
`token_rotation_wait_seconds` on the ack path (a still-valid old token is used meanwhile), and
when the refresh token turns out used (another process rotated first: they are single-use)
reads the pair that process saved instead of giving up.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from logging import Logger
from typing import Any

from cachetools import TTLCache
from prometheus_client import Counter
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.errors import SlackTokenRotationError
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.installation_store.models.installation import Installation
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common.logs import emit
from adapters.slack.errors import api_failed, error_code
from adapters.slack.installations import InstallationDocStore
from bot import metrics

_LOG = logging.getLogger(__name__)
NONE = "-"  # stands for an absent enterprise or team id in keys

ROTATIONS = Counter(
    "bot_slack_token_rotations_total",
    "Slack bot token rotations, by outcome (rotated | rotated_elsewhere: another process "
    "had traded the refresh token | failed | save_failed).",
    ["outcome"],
    registry=metrics.REGISTRY,
)


# The document storage the OAuth pieces need is the installations' protocol (one definition).
SlackInstallationStorage = InstallationDocStore


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
        fresh: bool = False,
    ) -> Bot | None:
        """The team's bot record; `fresh` skips this process's cache (another may have saved)."""
        key = _ids(enterprise_id, team_id, is_enterprise_install)
        cached = None if fresh else self._bots.get(key)
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
            # An older installer record (or a rotated token): the bot record's is the valid one.
            installation.bot_id = bot.bot_id
            installation.bot_user_id = bot.bot_user_id
            installation.bot_token = bot.bot_token
            installation.bot_scopes = bot.bot_scopes
            installation.bot_refresh_token = bot.bot_refresh_token
            installation.bot_token_expires_at = bot.bot_token_expires_at
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


def _expires_within(bot: Bot, seconds: float) -> bool:
    expires_at = bot.bot_token_expires_at
    return expires_at is not None and expires_at <= time.time() + seconds


class TokenRotation:
    """Rotates expiring bot tokens, once per team and refresh token (see the module docstring)."""

    def __init__(
        self,
        store: StorageInstallationStore,
        rotator: AsyncTokenRotator,
        *,
        minutes_before_expiry: int = 15,
        wait_seconds: float = 2.0,
    ) -> None:
        self._store = store
        self._rotator = rotator
        self._minutes = minutes_before_expiry
        self._wait = wait_seconds
        self._inflight: dict[tuple[str, str], asyncio.Task[Bot | None]] = {}
        # (enterprise, team, the refresh token traded) -> the new record: an event that read
        # the old record before the rotation finished gets the new one, not a second trade.
        self._done: TTLCache[tuple[str, str, str], Bot] = TTLCache(10_000, 300.0)
        self._unsaved: dict[tuple[str, str], Bot] = {}  # rotated, but the store failed
        # A refused trade is not tried again for a minute (not once per event meanwhile).
        self._failed: TTLCache[tuple[str, str, str], bool] = TTLCache(10_000, 60.0)

    async def fresh(self, bot: Bot) -> Bot | None:
        """`bot`, or its rotated successor when its token expires soon; None: no valid token."""
        key = _ids(bot.enterprise_id, bot.team_id, bot.is_enterprise_install)
        unsaved = self._unsaved.get(key)
        if unsaved is not None:
            await self._save(key, unsaved)
            return unsaved
        if not bot.bot_refresh_token or not _expires_within(bot, self._minutes * 60):
            return bot
        done = self._done.get((*key, bot.bot_refresh_token))
        if done is not None:
            return done
        if (*key, bot.bot_refresh_token) in self._failed:
            return None if _expires_within(bot, 0) else bot
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._rotate(key, bot))
            self._inflight[key] = task
            task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        try:
            return await asyncio.wait_for(asyncio.shield(task), self._wait)
        except TimeoutError:
            emit(_LOG, "slack_token_rotation_slow", logging.WARNING, team=key[1])
            return None if _expires_within(bot, 0) else bot

    async def _rotate(self, key: tuple[str, str], bot: Bot) -> Bot | None:
        old = str(bot.bot_refresh_token)
        try:
            rotated = await self._rotator.perform_bot_token_rotation(
                bot=bot, minutes_before_expiration=self._minutes
            )
        except Exception as exc:
            cause = exc.api_error if isinstance(exc, SlackTokenRotationError) else exc
            return await self._after_failure(key, bot, error_code(cause))
        if rotated is None:  # not a bot token in the answer, or not expiring after all
            return bot
        self._done[(*key, old)] = rotated
        await self._save(key, rotated)
        ROTATIONS.labels("rotated").inc()
        emit(
            _LOG,
            "slack_token_rotated",
            enterprise=key[0],
            team=key[1],
            expires_in=int((rotated.bot_token_expires_at or 0) - time.time()),
        )
        return rotated

    async def _after_failure(self, key: tuple[str, str], bot: Bot, code: str) -> Bot | None:
        """A used refresh token means another process rotated first: take what it saved."""
        try:
            stored = await self._store.async_find_bot(
                enterprise_id=bot.enterprise_id,
                team_id=bot.team_id,
                is_enterprise_install=bot.is_enterprise_install,
                fresh=True,
            )
        except Exception:
            stored = None
        if (
            stored is not None
            and stored.bot_token
            and stored.bot_refresh_token != bot.bot_refresh_token
            and not _expires_within(stored, 0)
        ):
            ROTATIONS.labels("rotated_elsewhere").inc()
            emit(_LOG, "slack_token_rotated_elsewhere", enterprise=key[0], team=key[1])
            return stored
        self._failed[(*key, str(bot.bot_refresh_token))] = True
        ROTATIONS.labels("failed").inc()
        emit(
            _LOG,
            "slack_token_rotation_failed",
            logging.ERROR,
            enterprise=key[0],
            team=key[1],
            error=code,
        )
        return None if _expires_within(bot, 0) else bot  # the old token while it lasts

    async def _save(self, key: tuple[str, str], bot: Bot) -> None:
        """Store the new pair; kept in memory and saved again on the next event if that fails
        (the old refresh token is spent: losing the new one would lose the installation)."""
        try:
            await self._store.async_save_bot(bot)
        except Exception as exc:
            self._unsaved[key] = bot
            ROTATIONS.labels("save_failed").inc()
            emit(
                _LOG,
                "slack_token_save_failed",
                logging.ERROR,
                team=key[1],
                error=type(exc).__name__,
            )
        else:
            self._unsaved.pop(key, None)


class InstallationAuthorize(AsyncAuthorize):
    """Authorize from the stored bot record: no Web API call on the ack path, except to rotate
    a token about to expire (`rotation`)."""

    def __init__(
        self, store: StorageInstallationStore, rotation: TokenRotation | None = None
    ) -> None:
        self._store = store
        self._rotation = rotation

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
        if bot.bot_refresh_token and self._rotation is not None:
            fresh = await self._rotation.fresh(bot)
            if fresh is None:
                return None
            bot = fresh
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
