"""A person's sign-in to an `auth=user` MCP server, following MCP's authorization spec.

Why not the SDK's `OAuthClientProvider` for this part: it runs the sign-in inside one HTTP
request, holding the PKCE verifier and `state` in a coroutine while it waits for the browser to
come back. A chat bot cannot wait like that: the person clicks minutes later, the callback may
reach another process (several workers, Slack's HTTP endpoint behind a load balancer) or a
restarted one, and the turn that needed the server must end with a "Connect" link. So the
sign-in is split in two steps that share nothing but the store, built from the SDK's own
pieces (discovery URLs, metadata models and checks, registration request, PKCE):

1. `start`: the server's `401` → its `WWW-Authenticate` → protected resource metadata (its
   `resource` must be the server's) → authorization server metadata (its `issuer` must be the
   one the resource named) → a client: the admin's pre-registered one, or one registered
   dynamically and kept per team, server and issuer → PKCE S256, `resource`, a fresh `state`.
   The verifier and the rest are sealed and stored under the SHA-256 of `state`, for
   `STATE_TTL` seconds; the person gets a link under BOT_PUBLIC_URL (`/oauth/start?s=<state>`)
   that redirects to the authorization server while the sign-in is pending.
2. `finish` (at `GET /oauth/callback`): the state is taken from the store (once: a replayed or
   expired callback finds nothing), the `iss` of the response checked (RFC 9207), the code
   exchanged with the verifier and `resource`, and the tokens stored sealed.

After that, the SDK's `OAuthClientProvider` (`bot.connections.tokens.PersonOAuth`) uses and
refreshes the tokens for that person's own turns.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import httpx2
from mcp.client.auth import PKCEParameters
from mcp.client.auth.oauth2 import check_registration_usable
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_client_registration_request,
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    handle_registration_response,
)
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from pydantic import ValidationError

from bot.connections.base import Owner
from bot.connections.tokens import seal_tokens
from bot.secrets import SecretBox, SecretsUnavailable
from bot.stores.connections import Connection, ConnectionStore, PendingSignIn
from tools.netguard import ANY_HOST, HostPolicy, event_hooks

log = logging.getLogger("bot.connections")

STATE_TTL = 600.0  # seconds a "Connect" link works
CALLBACK_PATH = "/oauth/callback"
START_PATH = "/oauth/start"
MAX_METADATA_BYTES = 256 * 1024
CLIENT_NAME = "Chat bot"


class SignInFailed(Exception):
    """The sign-in cannot go on; the message is safe to show (no URL, code or token)."""


@dataclass(frozen=True)
class ServerAuth:
    """What the admin installed: the server and, optionally, a pre-registered client."""

    url: str
    client_id: str | None = None
    client_secret: str | None = None
    scopes: str | None = None


@dataclass(frozen=True)
class Started:
    """A sign-in under way: the "Connect" link under BOT_PUBLIC_URL given to the person, and
    the authorization server's URL it redirects to."""

    link: str
    authorize: str


@dataclass(frozen=True)
class Finished:
    """A completed sign-in: whose, which server, and the turn that waited for it."""

    owner: Owner
    waiting: dict[str, Any] = field(default_factory=dict)


def state_hash(state: str) -> str:
    return hashlib.sha256(state.encode("utf-8")).hexdigest()


def callback_url(public_url: str) -> str:
    return public_url.rstrip("/") + CALLBACK_PATH


class SignIns:
    """Starts and finishes people's sign-ins; shares nothing between the two but the store."""

    def __init__(
        self,
        store: ConnectionStore,
        box: SecretBox,
        public_url: str,
        *,
        policy: HostPolicy = ANY_HOST,
        clock: Callable[[], float] = time.time,
        state_ttl: float = STATE_TTL,
    ) -> None:
        self.store = store
        self.box = box
        self.public_url = public_url.rstrip("/")
        self.redirect_uri = callback_url(public_url)
        self._policy = policy
        self._clock = clock
        self.state_ttl = state_ttl

    def _http(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            timeout=httpx2.Timeout(10.0, connect=5.0),
            event_hooks=event_hooks(self._policy),
            follow_redirects=False,
        )

    # step 1 ---------------------------------------------------------------------------------

    async def start(
        self, owner: Owner, server: ServerAuth, waiting: Mapping[str, Any] | None = None
    ) -> Started:
        """The link for the person and where it leads (SignInFailed says why not)."""
        try:
            async with self._http() as http:
                prm, meta = await self._discover(http, server.url)
                client = await self._client(http, owner, server, meta)
        except SignInFailed:
            raise
        except (httpx2.HTTPError, OSError, ValidationError, ValueError) as exc:
            log.warning(
                "signin_discovery_failed",
                extra={"fields": {"server": owner.server, "error": type(exc).__name__}},
            )
            raise SignInFailed("the server's sign-in could not be reached") from None
        pkce = PKCEParameters.generate()
        state = secrets.token_urlsafe(32)
        resource = _resource(server.url, prm)
        scope = server.scopes or (" ".join(prm.scopes_supported) if prm.scopes_supported else None)
        params = {
            "response_type": "code",
            "client_id": client.client_id or "",
            "redirect_uri": self.redirect_uri,
            "state": state,
            "code_challenge": pkce.code_challenge,
            "code_challenge_method": "S256",
            "resource": resource,
        }
        if scope:
            params["scope"] = scope
        authorize = f"{meta.authorization_endpoint}?{urlencode(params)}"
        doc = {
            "authorize": authorize,
            "verifier": pkce.code_verifier,
            "issuer": str(meta.issuer),
            "resource": resource,
            "client": client.model_dump(mode="json", exclude_none=True),
            "metadata": meta.model_dump(mode="json", exclude_none=True),
            "prm": prm.model_dump(mode="json", exclude_none=True),
            "waiting": dict(waiting or {}),
        }
        now = self._clock()
        await self.store.add_pending(
            PendingSignIn(
                state_hash(state),
                owner.team,
                owner.person,
                owner.server,
                now + self.state_ttl,
                self.box.seal(json.dumps(doc, separators=(",", ":"))),
            )
        )
        return Started(f"{self.public_url}{START_PATH}?{urlencode({'s': state})}", authorize)

    async def _discover(
        self, http: httpx2.AsyncClient, url: str
    ) -> tuple[ProtectedResourceMetadata, OAuthMetadata]:
        probe = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        await probe.aread()
        if probe.status_code != 401:
            raise SignInFailed(
                f"the server did not ask for a sign-in (HTTP {probe.status_code}); "
                "install it without auth=user"
            )
        prm: ProtectedResourceMetadata | None = None
        www = extract_resource_metadata_from_www_auth(probe)
        for candidate in build_protected_resource_metadata_discovery_urls(www, url):
            prm = await handle_protected_resource_response(await self._get(http, candidate))
            if prm is not None:
                break
        if prm is None or not prm.authorization_servers:
            raise SignInFailed("the server publishes no protected resource metadata")
        if prm.resource and not check_resource_allowed(
            requested_resource=resource_url_from_server_url(url),
            configured_resource=str(prm.resource),
        ):
            raise SignInFailed("the server's metadata names another resource")
        issuer = str(prm.authorization_servers[0])
        for candidate in build_oauth_authorization_server_metadata_discovery_urls(issuer, url):
            ok, meta = await handle_auth_metadata_response(await self._get(http, candidate))
            if not ok:
                break
            if meta is None:
                continue
            if str(meta.issuer) != issuer:  # RFC 8414 §3.3: exactly the issuer asked about
                raise SignInFailed("the authorization server's metadata names another issuer")
            if "S256" not in (meta.code_challenge_methods_supported or []):
                raise SignInFailed("the authorization server does not support PKCE S256")
            return prm, meta
        raise SignInFailed("the authorization server publishes no metadata")

    async def _get(self, http: httpx2.AsyncClient, url: str) -> httpx2.Response:
        await self._policy.check_url(url)
        response = await http.send(create_oauth_metadata_request(url), stream=True)
        try:
            body = b""
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_METADATA_BYTES:
                    raise SignInFailed("the server's metadata is too large")
        finally:
            await response.aclose()
        return httpx2.Response(response.status_code, content=body, request=response.request)

    async def _client(
        self, http: httpx2.AsyncClient, owner: Owner, server: ServerAuth, meta: OAuthMetadata
    ) -> OAuthClientInformationFull:
        """The admin's pre-registered client, or the one registered for this team, server and
        issuer (registered now when there is none)."""
        issuer = str(meta.issuer)
        if server.client_id:
            return preregistered(server, self.redirect_uri, issuer)
        kept = await self.store.get_client(owner.team, owner.server, issuer)
        if kept is not None:
            try:
                client = OAuthClientInformationFull.model_validate_json(self.box.open(kept))
                if self.redirect_uri in [str(u) for u in client.redirect_uris or []]:
                    return client
            except (SecretsUnavailable, ValidationError):
                pass  # registered under another key or callback address: register again
        if meta.registration_endpoint is None:
            raise SignInFailed(
                "the server does not register clients itself: reinstall with client_id=..."
            )
        wanted = OAuthClientMetadata(
            redirect_uris=[self.redirect_uri],  # type: ignore[list-item]
            token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            client_name=CLIENT_NAME,
            scope=server.scopes,
        )
        request = create_client_registration_request(meta, wanted, issuer)
        await self._policy.check_url(str(request.url))
        response = await http.send(request)
        client = await handle_registration_response(response)
        check_registration_usable(client)
        client.issuer = issuer
        sealed = self.box.seal(client.model_dump_json(exclude_none=True))
        await self.store.put_client(owner.team, owner.server, issuer, sealed)
        return client

    async def open_link(self, state: str) -> str:
        """`GET /oauth/start?s=<state>`: where the link leads (the authorization server), while
        the sign-in is pending; SignInFailed otherwise."""
        if not state or len(state) > 256:
            raise SignInFailed("this link carries no sign-in")
        pending = await self.store.peek_pending(state_hash(state), self._clock())
        if pending is None:
            raise SignInFailed("this sign-in link was already used or has expired")
        try:
            return str(json.loads(self.box.open(pending.doc))["authorize"])
        except (SecretsUnavailable, KeyError, ValueError):
            raise SignInFailed("this sign-in cannot be read any more; start again") from None

    # step 2 ---------------------------------------------------------------------------------

    async def finish(self, query: Mapping[str, str]) -> Finished:
        """Complete the sign-in the callback's query belongs to; SignInFailed says why not."""
        state = query.get("state") or ""
        if not state or len(state) > 256:
            raise SignInFailed("this link carries no sign-in")
        pending = await self.store.take_pending(state_hash(state), self._clock())
        if pending is None:
            raise SignInFailed("this sign-in link was already used or has expired")
        owner = Owner(pending.team, pending.person, pending.server)
        try:
            doc: dict[str, Any] = json.loads(self.box.open(pending.doc))
        except SecretsUnavailable:
            raise SignInFailed("this sign-in cannot be read any more; start again") from None
        if query.get("error"):
            raise SignInFailed("the sign-in was not approved at the server")
        meta = OAuthMetadata.model_validate(doc["metadata"])
        iss = query.get("iss")
        if iss is not None and iss != doc["issuer"]:
            raise SignInFailed("the answer came from another authorization server")
        if iss is None and meta.authorization_response_iss_parameter_supported:
            raise SignInFailed("the authorization server's answer is incomplete")
        code = query.get("code") or ""
        if not code or len(code) > 2048:
            raise SignInFailed("the server sent no code")
        client = OAuthClientInformationFull.model_validate(doc["client"])
        token = await self._exchange(meta, client, code, doc)
        now = self._clock()
        prm = ProtectedResourceMetadata.model_validate(doc["prm"])
        await self.store.put(
            Connection(
                owner.team,
                owner.person,
                owner.server,
                doc["issuer"],
                seal_tokens(self.box, token, now=now, metadata=meta, prm=prm),
                now,
                now,
            )
        )
        log.info("tool_connected", extra={"fields": {"team": owner.team, "server": owner.server}})
        return Finished(owner, dict(doc.get("waiting") or {}))

    async def _exchange(
        self,
        meta: OAuthMetadata,
        client: OAuthClientInformationFull,
        code: str,
        doc: Mapping[str, Any],
    ) -> OAuthToken:
        data = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "client_id": client.client_id or "",
            "code_verifier": str(doc["verifier"]),
            "resource": str(doc["resource"]),
        }
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if client.client_secret and client.token_endpoint_auth_method == "client_secret_basic":
            pair = (
                f"{quote(client.client_id or '', safe='')}:{quote(client.client_secret, safe='')}"
            )
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        elif client.client_secret:
            data["client_secret"] = client.client_secret
        url = str(meta.token_endpoint)
        try:
            await self._policy.check_url(url)
            async with self._http() as http:
                response = await http.post(url, data=data, headers=headers)
                body = await response.aread()
        except (httpx2.HTTPError, OSError) as exc:
            log.warning("signin_token_failed", extra={"fields": {"error": type(exc).__name__}})
            raise SignInFailed("the authorization server could not be reached") from None
        if response.status_code != 200 or len(body) > MAX_METADATA_BYTES:
            log.warning("signin_token_refused", extra={"fields": {"status": response.status_code}})
            raise SignInFailed("the authorization server refused the sign-in")
        try:
            return OAuthToken.model_validate_json(body)
        except ValidationError:
            raise SignInFailed("the authorization server's answer could not be read") from None


def preregistered(server: ServerAuth, redirect_uri: str, issuer: str) -> OAuthClientInformationFull:
    """The client the admin registered at the provider and gave at install."""
    return OAuthClientInformationFull(
        client_id=server.client_id or "",
        client_secret=server.client_secret,
        redirect_uris=[redirect_uri],  # type: ignore[list-item]
        token_endpoint_auth_method="client_secret_post" if server.client_secret else "none",
        issuer=issuer,
    )


def _resource(url: str, prm: ProtectedResourceMetadata) -> str:
    """RFC 8707 `resource`: the metadata's when it covers the server's URL, else the URL's."""
    own = resource_url_from_server_url(url)
    if prm.resource and check_resource_allowed(
        requested_resource=own, configured_resource=str(prm.resource)
    ):
        return str(prm.resource)
    return own
