"""One person's tokens for one server, sealed at rest, used through the `mcp` SDK's OAuth client.

`SealedTokenStorage` is the SDK's `TokenStorage` for one (team, person, server): it opens and
seals the stored connection with BOT_SECRET_KEY, so every refresh (and rotated refresh token)
is written back sealed. `PersonOAuth` is the SDK's `OAuthClientProvider` with three changes a
bot serving many people needs:

- it starts from what the sign-in stored (server metadata, the access token's expiry), so after
  a restart the token endpoint is the authorization server's, not a guess from the MCP URL;
- it refreshes `REFRESH_MARGIN` before the access token expires, never after a 401;
- it never opens a browser: where the SDK would start an interactive sign-in (no token, a
  refused refresh), it marks `needs_sign_in` and fails the request, and the bot answers the
  person with a "Connect" link instead (`bot.connections.signin`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)

from bot.connections.base import NeedsSignIn, Owner
from bot.secrets import SecretBox
from bot.stores.connections import Connection, ConnectionStore

REFRESH_MARGIN = 60.0  # seconds before expiry a token is refreshed (at most half its lifetime)

# The SDK logs a failed flow with `logger.exception` (a traceback, with URLs); the bot reports
# the failure itself, in one structured line.
logging.getLogger("mcp.client.auth.oauth2").setLevel(logging.CRITICAL)


def seal_tokens(
    box: SecretBox,
    token: OAuthToken,
    *,
    now: float,
    metadata: OAuthMetadata | None,
    prm: ProtectedResourceMetadata | None,
) -> str:
    """The sealed document of a connection: the token, when it expires, the server metadata."""
    doc: dict[str, Any] = {
        "token": token.model_dump(mode="json", exclude_none=True),
        "expires_at": now + token.expires_in if token.expires_in is not None else None,
        "lifetime": token.expires_in,
        "metadata": metadata.model_dump(mode="json", exclude_none=True) if metadata else None,
        "prm": prm.model_dump(mode="json", exclude_none=True) if prm else None,
    }
    return box.seal(json.dumps(doc, separators=(",", ":")))


def open_tokens(box: SecretBox, sealed: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(box.open(sealed))
    return value


class SealedTokenStorage:
    """The SDK's `TokenStorage` for one person's connection to one server."""

    def __init__(
        self,
        store: ConnectionStore,
        box: SecretBox,
        owner: Owner,
        client: OAuthClientInformationFull,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store, self._box, self.owner = store, box, owner
        self._client = client
        self._clock = clock
        self.loaded: Connection | None = None  # the stored row this storage last read or wrote
        self.doc: dict[str, Any] = {}

    async def load(self) -> Connection | None:
        o = self.owner
        self.loaded = await self._store.get(o.team, o.person, o.server)
        self.doc = open_tokens(self._box, self.loaded.tokens) if self.loaded else {}
        return self.loaded

    async def get_tokens(self) -> OAuthToken | None:
        if self.loaded is None:
            await self.load()
        token = self.doc.get("token")
        return OAuthToken.model_validate(token) if token else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        if self.loaded is None:
            raise NeedsSignIn("the connection was removed")
        now = self._clock()
        meta = self.doc.get("metadata")
        prm = self.doc.get("prm")
        sealed = seal_tokens(
            self._box,
            tokens,
            now=now,
            metadata=OAuthMetadata.model_validate(meta) if meta else None,
            prm=ProtectedResourceMetadata.model_validate(prm) if prm else None,
        )
        row = Connection(
            self.loaded.team,
            self.loaded.person,
            self.loaded.server,
            self.loaded.issuer,
            sealed,
            self.loaded.connected_at,
            now,
        )
        await self._store.put(row)
        self.loaded, self.doc = row, open_tokens(self._box, sealed)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        # Registration happens at sign-in only (`signin`); a provider that tried to register
        # again would be starting an interactive flow, which `PersonOAuth` refuses.
        raise NeedsSignIn("the server asked for a new registration")


class PersonOAuth(OAuthClientProvider):
    """The SDK's OAuth client for one person and server; never starts a sign-in itself."""

    def __init__(self, server_url: str, storage: SealedTokenStorage, redirect_uri: str) -> None:
        self.storage = storage
        self.needs_sign_in = False
        super().__init__(
            server_url,
            OAuthClientMetadata(redirect_uris=[redirect_uri]),  # type: ignore[list-item]
            storage,
            redirect_handler=self._no_browser,
            callback_handler=None,
        )

    async def _no_browser(self, _url: str) -> None:
        self.needs_sign_in = True
        raise NeedsSignIn("the person must sign in again")

    def stale(self, current: Connection) -> bool:
        """Whether someone else wrote the connection since this provider read or wrote it
        (a new sign-in, another process's refresh): then a fresh provider reads it."""
        loaded = self.storage.loaded
        return loaded is not None and (loaded.updated_at, loaded.tokens) != (
            current.updated_at,
            current.tokens,
        )

    def due(self) -> bool:
        """Whether the next request refreshes the token first (or must read it again)."""
        return not self._initialized or not self.context.is_token_valid()

    async def _initialize(self) -> None:
        await self.storage.load()
        await super()._initialize()
        doc = self.storage.doc
        if doc.get("metadata"):
            self.context.oauth_metadata = OAuthMetadata.model_validate(doc["metadata"])
            self.context.auth_server_url = str(self.context.oauth_metadata.issuer)
        if doc.get("prm"):
            self.context.protected_resource_metadata = ProtectedResourceMetadata.model_validate(
                doc["prm"]
            )
        self._set_expiry()

    def _set_expiry(self) -> None:
        doc = self.storage.doc
        expires_at, lifetime = doc.get("expires_at"), doc.get("lifetime")
        if expires_at is None:
            self.context.token_expiry_time = None
            return
        margin = min(REFRESH_MARGIN, float(lifetime or 0) / 2)
        self.context.token_expiry_time = float(expires_at) - margin

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        if response.status_code != 200:
            await response.aread()
            self.needs_sign_in = True
            raise NeedsSignIn("the server refused to refresh the person's token")
        ok = await super()._handle_refresh_response(response)
        self._set_expiry()
        return ok
