"""A protected MCP server and its authorization server, for per-person tool connections.

Built on the `mcp` SDK's own server-side auth: `MCPServer` with `AuthSettings` and an
`OAuthAuthorizationServerProvider` (protected resource metadata, authorization server metadata,
dynamic client registration, `/authorize`, `/token`, bearer checks with the token's resource),
served over streamable HTTP by uvicorn on loopback. What a real one rejects, this one rejects:
a bad PKCE verifier, a reused code, another redirect_uri, another resource (at `/authorize` and
at `/token`), an expired access token, a refresh token used twice (which also revokes the whole
grant, as OAuth 2.1 asks for rotated refresh tokens).

The person signing in is chosen at the fake's login page: `/authorize` answers a redirect to
`/login?pending=<id>`, and the test's "browser" opens it with `&user=<subject>`; the code is
then sent to the client's redirect_uri with `state` and `iss` (RFC 9207). Access tokens live
`access_ttl` seconds. `calls` records (subject, tool) for every tool call; `token_requests`
every grant the token endpoint saw.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp_types import ToolAnnotations
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from testkit.fakes.asgi_server import LoopbackAsgi

SCOPE = "tickets"


@dataclass
class _Pending:
    client_id: str
    params: AuthorizationParams
    expires_at: float


@dataclass
class FakeAuthServer:
    """The authorization server's state (the SDK's provider protocol)."""

    issuer: str
    resource: str
    access_ttl: int
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    pending: dict[str, _Pending] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    used_refresh: dict[str, RefreshToken] = field(default_factory=dict)
    issued: list[str] = field(default_factory=list)  # every token and code handed out
    token_requests: list[str] = field(default_factory=list)  # grant types, in order
    refused: list[str] = field(default_factory=list)  # why a token request was refused

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id or ""] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        if params.resource != self.resource:
            raise AuthorizeError("invalid_target", "unknown resource")
        pending = secrets.token_urlsafe(16)
        self.pending[pending] = _Pending(client.client_id or "", params, time.time() + 300)
        return f"{self.issuer}/login?{urlencode({'pending': pending})}"

    def login(self, pending_id: str, user: str) -> str:
        """The person `user` approves: a code for the client, and where the browser goes."""
        pending = self.pending.pop(pending_id)
        code = secrets.token_urlsafe(24)
        self.issued.append(code)
        p = pending.params
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=p.scopes or [SCOPE],
            expires_at=time.time() + 60,
            client_id=pending.client_id,
            code_challenge=p.code_challenge,
            redirect_uri=p.redirect_uri,
            redirect_uri_provided_explicitly=p.redirect_uri_provided_explicitly,
            resource=p.resource,
            subject=user,
        )
        query = {"code": code, "iss": self.issuer}
        if p.state is not None:
            query["state"] = p.state
        return f"{p.redirect_uri}?{urlencode(query)}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        if code is None:
            self.refused.append("unknown or reused code")
        return code

    def _grant(
        self, client_id: str, scopes: list[str], resource: str | None, subject: str | None
    ) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.issued += [access, refresh]
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.access_ttl,
            resource=resource,
            subject=subject,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject=subject
        )
        return OAuthToken(
            access_token=access,
            expires_in=self.access_ttl,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.token_requests.append("authorization_code")
        del self.codes[authorization_code.code]  # once
        return self._grant(
            client.client_id or "",
            authorization_code.scopes,
            authorization_code.resource,
            authorization_code.subject,
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        replayed = self.used_refresh.get(refresh_token)
        if replayed is not None:  # reuse of a rotated token: the whole grant is revoked
            self.refused.append("replayed refresh token")
            self._revoke(replayed.subject, replayed.client_id)
            return None
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.token_requests.append("refresh_token")
        self.used_refresh[refresh_token.token] = self.refresh.pop(refresh_token.token)
        return self._grant(
            client.client_id or "", scopes, refresh_token.resource, refresh_token.subject
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self._revoke(token.subject, token.client_id)

    def _revoke(self, subject: str | None, client_id: str) -> None:
        for table in (self.access, self.refresh):
            for key in [
                k for k, v in table.items() if (v.subject, v.client_id) == (subject, client_id)
            ]:
                del table[key]

    def refuse_refresh(self, subject: str) -> None:
        """The person revoked the app at the provider: their refresh tokens stop working."""
        for key in [k for k, v in self.refresh.items() if v.subject == subject]:
            del self.refresh[key]

    def expire_access(self) -> None:
        for token in self.access.values():
            token.expires_at = int(time.time()) - 1


@dataclass
class FakeOAuthMcp:
    """The protected MCP server (`whoami`, `my_tickets`) with its authorization server."""

    access_ttl: int = 3600
    port: int = 0
    calls: list[tuple[str | None, str]] = field(default_factory=list)  # (subject, tool)

    def __post_init__(self) -> None:
        self._serving = LoopbackAsgi()
        self.auth: FakeAuthServer | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.issuer}/mcp"

    @property
    def server(self) -> FakeAuthServer:
        assert self.auth is not None, "start() first"
        return self.auth

    def _build(self) -> Any:
        self.auth = FakeAuthServer(self.issuer, self.url, self.access_ttl)
        mcp = MCPServer(
            "tickets",
            auth_server_provider=self.auth,
            auth=AuthSettings(
                issuer_url=self.issuer,  # type: ignore[arg-type]
                resource_server_url=self.url,  # type: ignore[arg-type]
                validate_token_resource=True,
                required_scopes=[SCOPE],
                client_registration_options=ClientRegistrationOptions(
                    enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
                ),
            ),
        )
        calls, auth = self.calls, self.auth

        def subject() -> str | None:
            token = get_access_token()
            return token.subject if token is not None else None

        @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
        def whoami() -> str:
            """Who the server thinks is calling."""
            calls.append((subject(), "whoami"))
            return f"you are {subject()}"

        @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
        def my_tickets() -> str:
            """The caller's own open tickets."""
            calls.append((subject(), "my_tickets"))
            return f"2 open tickets for {subject()}"

        @mcp.custom_route("/login", methods=["GET"])
        async def login(request: Request) -> Response:
            pending, user = request.query_params.get("pending"), request.query_params.get("user")
            if not pending or not user or pending not in auth.pending:
                return PlainTextResponse("unknown sign-in", status_code=400)
            return RedirectResponse(auth.login(pending, user), status_code=302)

        return _check_token_resource(mcp.streamable_http_app(), auth)

    async def start(self) -> FakeOAuthMcp:
        self.port = self._serving.bind(self.port)
        await self._serving.serve(self._build())
        return self

    async def stop(self) -> None:
        await self._serving.stop()

    async def __aenter__(self) -> FakeOAuthMcp:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _check_token_resource(app: Any, auth: FakeAuthServer) -> Any:
    """RFC 8707 at the token endpoint: a `resource` other than the one the code (or refresh
    token) was issued for is `invalid_target` (the SDK's handler leaves this to the provider,
    which does not see the request)."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/token" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        resource = form.get("resource")
        if resource is not None and resource != auth.resource:
            auth.refused.append("wrong resource")
            payload = b'{"error":"invalid_target","error_description":"unknown resource"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return guarded
