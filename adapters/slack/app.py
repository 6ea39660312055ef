"""Wiring: one Bolt AsyncApp, its Web API client and the adapter's helpers.

The Web API client honours SLACK_API_URL, retries rate-limited calls per Retry-After, and
shares one aiohttp session (Bolt makes a client per request; without a shared session every
call would open a new connection). With OAuth, installations with token rotation are rotated
by the authorizer (`TokenRotation`, over the same client).
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.middleware.ignoring_self_events.async_ignoring_self_events import (
    AsyncIgnoringSelfEvents,
)
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common.logs import emit
from adapters.common.tasks import TaskTracker
from adapters.slack.approvals import ApprovalSweep
from adapters.slack.clients import client_like
from adapters.slack.config import SlackConfig, SlackConfigError
from adapters.slack.handlers import SlackHandlers
from adapters.slack.oauth import (
    InstallationAuthorize,
    SingleTeamAuthorize,
    SlackInstallationStorage,
    StorageInstallationStore,
    StorageOAuthStateStore,
    TokenRotation,
)
from adapters.slack.traits import INBOX_KIND, SLACK
from bot.core import BotCore
from bot.eventloop import running_loop_name
from bot.platforms import register

_LOG = logging.getLogger(__name__)


class _IgnoringSelfEventsButDeletions(AsyncIgnoringSelfEvents):
    """Bolt's own filter of the bot's own events, letting one kind through: a deletion of one
    of the bot's messages (its votes go, `adapters.slack.feedback.own_reply_deleted`). Routing
    and the record of heard messages ignore the bot's own messages themselves."""

    @classmethod
    def _is_self_event(cls, auth_result: Any, user_id: Any, bot_id: Any, body: Any) -> bool:
        event = body.get("event") if isinstance(body, dict) else None
        if isinstance(event, dict) and event.get("subtype") == "message_deleted":
            return False
        return bool(super()._is_self_event(auth_result, user_id, bot_id, body))


def keep_own_deletions(app: AsyncApp) -> None:
    """Swap Bolt's self-event filter for the one that lets the bot's own deletions through."""
    middleware = app._async_middleware_list
    for i, item in enumerate(middleware):
        if type(item) is AsyncIgnoringSelfEvents:
            middleware[i] = _IgnoringSelfEventsButDeletions(
                base_logger=app._base_logger,
                ignoring_self_assistant_message_events_enabled=(
                    item.ignoring_self_assistant_message_events_enabled
                ),
            )


INSTALL_PATH = "/slack/install"
REDIRECT_PATH = "/slack/oauth_redirect"
EVENTS_PATH = "/slack/events"


class SlackRuntime:
    """The Bolt app plus what must be started and stopped with it."""

    def __init__(
        self,
        core: BotCore,
        config: SlackConfig,
        storage: SlackInstallationStorage | None = None,
    ) -> None:
        config.validate()
        register(SLACK)  # the core's rules for Slack's keys (bot.platforms)
        self.core = core
        self.config = config
        self.tasks = TaskTracker()
        self.client = AsyncWebClient(
            base_url=config.base_url,
            retry_handlers=[
                AsyncConnectionErrorRetryHandler(max_retry_count=1),
                AsyncRateLimitErrorRetryHandler(max_retry_count=config.rate_limit_retries),
            ],
        )
        self.installation_store: StorageInstallationStore | None = None
        self.single_team: SingleTeamAuthorize | None = None
        oauth_settings: AsyncOAuthSettings | None = None
        authorize: AsyncAuthorize
        if config.oauth_enabled:
            if storage is None:
                raise SlackConfigError(
                    "SLACK_CLIENT_ID is set but the Slack adapter got no installation storage"
                )
            self.installation_store = StorageInstallationStore(
                storage, cache_seconds=config.installation_cache_seconds
            )
            oauth_settings = AsyncOAuthSettings(
                client_id=config.client_id,
                client_secret=config.client_secret,
                scopes=list(config.scopes),
                user_scopes=[],
                redirect_uri=config.redirect_uri,
                install_path=INSTALL_PATH,
                redirect_uri_path=REDIRECT_PATH,
                install_page_rendering_enabled=False,
                authorization_url=config.authorization_url,
                installation_store=self.installation_store,
                state_store=StorageOAuthStateStore(storage),
                logger=_LOG,
            )
            rotator = AsyncTokenRotator(
                client_id=str(config.client_id),
                client_secret=str(config.client_secret),
                client=self.client,
            )
            rotation = TokenRotation(
                self.installation_store,
                rotator,
                minutes_before_expiry=config.token_rotation_minutes,
                wait_seconds=config.token_rotation_wait_seconds,
            )
            authorize = InstallationAuthorize(self.installation_store, rotation)
        else:
            self.single_team = SingleTeamAuthorize(str(config.bot_token), self.client)
            authorize = self.single_team
        self.app = AsyncApp(
            name="chatbot-slack",
            signing_secret=config.signing_secret,
            client=self.client,
            authorize=authorize,  # type: ignore[arg-type]  # an AsyncAuthorize may return None
            installation_store=self.installation_store,
            oauth_settings=oauth_settings,
            process_before_response=False,
            ignoring_self_events_enabled=True,
        )
        keep_own_deletions(self.app)
        if oauth_settings is None and self.app.oauth_flow is not None:
            # Bolt builds an OAuth flow (with a file store) from these variables on its own.
            raise SlackConfigError(
                "SLACK_CLIENT_ID/SLACK_CLIENT_SECRET are set in the environment, but the Slack "
                "adapter was configured for one workspace; unset them or pass them in SlackConfig"
            )
        self.authorize = authorize
        self.handlers = SlackHandlers(
            core, config, self.tasks, self.installation_store, client_for=self.client_for
        )
        self.handlers.register(self.app)
        self.sweep = ApprovalSweep(
            core, config, self.client_for, self.handlers.resumed_sink, self.handlers.turn_slot
        )
        self._session: aiohttp.ClientSession | None = None

    async def client_for(self, team: str, enterprise: str | None) -> AsyncWebClient | None:
        """A Web API client with the bot token of `team` (an inbox entry carries no token):
        the same authorization Bolt runs per request, on the shared HTTP session."""
        context = AsyncBoltContext({"enterprise_id": enterprise, "team_id": team})
        result = await self.authorize(
            context=context, enterprise_id=enterprise, team_id=team, user_id=None
        )
        if result is None or not result.bot_token:
            return None
        return client_like(self.client, token=result.bot_token, team_id=team)

    async def start(self) -> None:
        """Open the shared HTTP session; learn the bot's identity early (single workspace)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=max(100, self.config.max_concurrent_turns)),
            )
            self.client.session = self._session
        self.handlers.guard.start()
        self.core.serve_inbox(INBOX_KIND, self.handlers.on_queued)
        self.sweep.start()
        if self.single_team is not None:
            identity = await self.single_team.identity()
            if identity is None:
                emit(_LOG, "slack_auth_test_failed", logging.WARNING)
        emit(
            _LOG,
            "slack_runtime_started",
            mode="socket" if self.config.socket_mode else "http",
            oauth=self.config.oauth_enabled,
            api_url=self.config.base_url,
            event_loop=running_loop_name(),
        )

    async def stop(self) -> None:
        """Stop taking inbox entries and finish in-flight answers (bounded; the rest are handed
        back for another replica), then close the session."""
        await self.sweep.stop()
        handed_back = await self.core.stop_inbox(self.config.shutdown_grace_seconds)
        if handed_back:
            emit(_LOG, "slack_handed_back", entries=handed_back)
        left = await self.tasks.drain(self.config.shutdown_grace_seconds)
        await self.handlers.guard.stop()
        await self.handlers.files.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
        emit(_LOG, "slack_runtime_stopped", cancelled=left)
