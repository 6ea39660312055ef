"""The fake authorization server rejects what a real one rejects (checked with plain HTTP, not
with the bot's client, so these tests are an oracle for the fake itself)."""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from testkit.fakes.oauth_mcp import FakeOAuthMcp

REDIRECT = "http://127.0.0.1:9/oauth/callback"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOAuthMcp]:
    async with FakeOAuthMcp(access_ttl=60) as server:
        yield server


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


async def _code(
    http: httpx.AsyncClient, fake: FakeOAuthMcp, client_id: str, user: str
) -> tuple[str, str]:
    verifier, challenge = _pkce()
    authorize = await http.get(
        f"{fake.issuer}/authorize",
        params={
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "state": "s1",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "resource": fake.url,
        },
    )
    assert authorize.status_code == 302
    login = await http.get(authorize.headers["location"] + f"&user={user}")
    assert login.status_code == 302
    back = urlsplit(login.headers["location"])
    query = parse_qs(back.query)
    assert f"{back.scheme}://{back.netloc}{back.path}" == REDIRECT
    assert query["state"] == ["s1"] and query["iss"] == [fake.issuer]
    return query["code"][0], verifier


async def _register(http: httpx.AsyncClient, fake: FakeOAuthMcp) -> str:
    reg = await http.post(
        f"{fake.issuer}/register",
        json={
            "redirect_uris": [REDIRECT],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "client_name": "test",
        },
    )
    assert reg.status_code == 201, reg.text
    return str(reg.json()["client_id"])


async def test_discovery_starts_at_the_401(fake: FakeOAuthMcp) -> None:
    async with httpx.AsyncClient() as http:
        first = await http.post(fake.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert first.status_code == 401
        www = first.headers["www-authenticate"]
        assert "resource_metadata=" in www
        prm_url = www.split('resource_metadata="')[1].split('"')[0]
        prm = (await http.get(prm_url)).json()
        assert prm["resource"] == fake.url and prm["authorization_servers"] == [fake.issuer]
        asm = (await http.get(f"{fake.issuer}/.well-known/oauth-authorization-server")).json()
        assert asm["issuer"] == fake.issuer and asm["code_challenge_methods_supported"] == ["S256"]
        assert asm["registration_endpoint"] == f"{fake.issuer}/register"


async def test_code_exchange_rejects_what_a_real_server_rejects(fake: FakeOAuthMcp) -> None:
    async with httpx.AsyncClient() as http:
        client_id = await _register(http, fake)
        token_url = f"{fake.issuer}/token"
        base = {
            "grant_type": "authorization_code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
        }

        code, verifier = await _code(http, fake, client_id, "alice")
        bad = await http.post(
            token_url, data={**base, "code": code, "code_verifier": "x" * 50, "resource": fake.url}
        )
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_grant"

        code, verifier = await _code(http, fake, client_id, "alice")
        other = {**base, "redirect_uri": "http://127.0.0.1:9/elsewhere"}
        wrong_uri = await http.post(
            token_url, data={**other, "code": code, "code_verifier": verifier, "resource": fake.url}
        )
        assert wrong_uri.status_code == 400

        wrong_res = await http.post(
            token_url,
            data={**base, "code": code, "code_verifier": verifier, "resource": "http://x.test/mcp"},
        )
        assert wrong_res.status_code == 400 and wrong_res.json()["error"] == "invalid_target"

        good = await http.post(
            token_url, data={**base, "code": code, "code_verifier": verifier, "resource": fake.url}
        )
        assert good.status_code == 200, good.text
        again = await http.post(
            token_url, data={**base, "code": code, "code_verifier": verifier, "resource": fake.url}
        )
        assert again.status_code == 400 and again.json()["error"] == "invalid_grant"

        tokens = good.json()
        refresh = {"grant_type": "refresh_token", "client_id": client_id, "resource": fake.url}
        rotated = await http.post(
            token_url, data={**refresh, "refresh_token": tokens["refresh_token"]}
        )
        assert (
            rotated.status_code == 200
            and rotated.json()["refresh_token"] != tokens["refresh_token"]
        )
        replay = await http.post(
            token_url, data={**refresh, "refresh_token": tokens["refresh_token"]}
        )
        assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
        # the replay revoked the grant: the rotated refresh token is dead too
        after = await http.post(
            token_url, data={**refresh, "refresh_token": rotated.json()["refresh_token"]}
        )
        assert after.status_code == 400
        assert "replayed refresh token" in fake.server.refused


async def test_wrong_resource_at_authorize_and_expired_tokens(fake: FakeOAuthMcp) -> None:
    async with httpx.AsyncClient() as http:
        client_id = await _register(http, fake)
        _verifier, challenge = _pkce()
        refused = await http.get(
            f"{fake.issuer}/authorize",
            params={
                "response_type": "code",
                "client_id": client_id,
                "redirect_uri": REDIRECT,
                "state": "s",
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                "resource": "http://elsewhere.test/mcp",
            },
        )
        assert refused.status_code == 302 and "error=invalid_target" in refused.headers["location"]
        code, verifier = await _code(http, fake, client_id, "bob")
        tokens = (
            await http.post(
                f"{fake.issuer}/token",
                data={
                    "grant_type": "authorization_code",
                    "client_id": client_id,
                    "redirect_uri": REDIRECT,
                    "code": code,
                    "code_verifier": verifier,
                    "resource": fake.url,
                },
            )
        ).json()
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        headers = {
            "Authorization": f"Bearer {tokens['access_token']}",
            "Accept": "application/json, text/event-stream",
        }
        ok = await http.post(fake.url, json=ping, headers=headers)
        assert ok.status_code != 401
        fake.server.expire_access()
        expired = await http.post(fake.url, json=ping, headers=headers)
        assert expired.status_code == 401
