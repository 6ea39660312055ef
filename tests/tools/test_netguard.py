"""The SSRF guard: what team-installed packs may reach, checked on every request and redirect
hop after DNS resolution, and on the address actually reached."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from aiohttp import web

from tools.netguard import BlockedHost, HostPolicy, event_hooks


def _policy(
    text: str | None, *, multi: bool, dns: dict[str, list[str]] | None = None
) -> HostPolicy:
    base = HostPolicy.from_setting(text, multi_tenant=multi)
    if dns is None:
        return base

    async def resolve(host: str, port: int) -> list[str]:
        return dns.get(host, [])

    return HostPolicy(base.names, base.suffixes, base.networks, base.private_ok, resolve)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://[::169.254.169.254]/",  # IPv4-compatible
        "http://[::a9fe:a9fe]/",
        "http://[64:ff9b::169.254.169.254]/",  # NAT64 well-known prefix
        "http://[64:ff9b:1::a9fe:a9fe]/",  # NAT64 local-use prefix
        "http://[::ffff:0:169.254.169.254]/",  # IPv4-translated
        "http://[2002:a9fe:a9fe::1]/",  # 6to4
        "http://[64:ff9b::100.100.100.200]/",
        "http://[fe80::1]/",
        "http://0.0.0.0:8080/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://100.100.100.200/",
    ],
)
async def test_metadata_and_link_local_always_refused(url: str) -> None:
    # Even when the operator lists everything.
    for policy in (_policy(None, multi=False), _policy("0.0.0.0/0,::/0", multi=True)):
        with pytest.raises(BlockedHost):
            await policy.check_url(url)


async def test_embedded_ipv4_forms_are_judged_as_their_ipv4() -> None:
    multi = _policy(None, multi=True)
    for url in (
        "http://[::127.0.0.1]/",
        "http://[64:ff9b::10.0.0.5]/",
        "http://[::ffff:0:192.168.1.1]/",
    ):
        with pytest.raises(BlockedHost, match="private and local"):
            await multi.check_url(url)
    await multi.check_url("http://[64:ff9b::93.184.216.34]/")  # NAT64 of a public address
    # Loopback and unspecified stay themselves (not read as 0.0.0.1 / 0.0.0.0).
    await _policy(None, multi=False).check_url("http://[::1]:8080/")


async def test_multi_tenant_default_is_public_only() -> None:
    policy = _policy(None, multi=True, dns={"crm.example.com": ["93.184.216.34"]})
    await policy.check_url("https://crm.example.com/mcp")
    for url in (
        "http://127.0.0.1:9000/",
        "http://10.1.2.3/",
        "http://192.168.0.4/",
        "http://[::1]/",
    ):
        with pytest.raises(BlockedHost, match="private and local"):
            await policy.check_url(url)


async def test_single_tenant_default_allows_private() -> None:
    policy = _policy(None, multi=False)
    await policy.check_url("http://127.0.0.1:9000/mcp")
    await policy.check_url("http://10.0.0.5/")


async def test_dns_is_resolved_before_judging() -> None:
    dns = {
        "sneaky.example.com": ["93.184.216.34", "169.254.169.254"],
        "intra.example.com": ["10.0.0.9"],
    }
    policy = _policy(None, multi=True, dns=dns)
    with pytest.raises(BlockedHost, match="never reachable"):
        await policy.check_url("https://sneaky.example.com/")
    with pytest.raises(BlockedHost, match="private"):
        await policy.check_url("https://intra.example.com/")
    with pytest.raises(BlockedHost, match="does not resolve"):
        await policy.check_url("https://nowhere.example.com/")


async def test_allowlist_names_suffixes_and_ranges() -> None:
    dns = {
        "tickets.corp.example": ["10.0.0.7"],
        "api.partner.example": ["10.9.0.1"],
        "other.example": ["93.184.216.34"],
        "evil.corp.example": ["169.254.169.254"],
    }
    policy = _policy("tickets.corp.example, *.partner.example, 10.20.0.0/16", multi=True, dns=dns)
    await policy.check_url("http://tickets.corp.example/mcp")
    await policy.check_url("http://api.partner.example/")
    await policy.check_url("http://10.20.3.4:8080/")
    with pytest.raises(BlockedHost, match="BOT_TOOL_HOSTS"):
        await policy.check_url("http://other.example/")
    with pytest.raises(BlockedHost, match="BOT_TOOL_HOSTS"):
        await policy.check_url("http://10.21.0.1/")
    listed = _policy("*.corp.example", multi=True, dns=dns)
    with pytest.raises(BlockedHost, match="never reachable"):
        await listed.check_url("http://evil.corp.example/")


def test_bad_setting_names_the_entry() -> None:
    with pytest.raises(ValueError, match="bad host!"):
        HostPolicy.from_setting("ok.example, bad host!", multi_tenant=True)


async def test_guarded_client_checks_every_redirect_hop(
    serve_app: Callable[[web.Application], Any],
) -> None:
    hits: list[str] = []

    async def start(request: web.Request) -> web.Response:
        hits.append("start")
        raise web.HTTPFound(str(request.query["to"]))

    async def end(request: web.Request) -> web.Response:
        hits.append("end")
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/start", start)
    app.router.add_get("/end", end)
    async with serve_app(app) as base:
        policy = _policy("127.0.0.1", multi=True)
        async with httpx.AsyncClient(event_hooks=event_hooks(policy), follow_redirects=True) as c:
            resp = await c.get(f"{base}/start", params={"to": f"{base}/end"})
            assert resp.json() == {"ok": True} and hits == ["start", "end"]
            with pytest.raises(BlockedHost):
                await c.get(f"{base}/start", params={"to": "http://169.254.169.254/latest/"})
            with pytest.raises(BlockedHost):
                await c.get(f"{base}/start", params={"to": "http://10.0.0.1/"})
        # Public-only policy: the loopback server itself is never contacted.
        hits.clear()
        async with httpx.AsyncClient(event_hooks=event_hooks(_policy(None, multi=True))) as c:
            with pytest.raises(BlockedHost):
                await c.get(f"{base}/end")
        assert hits == []


async def test_peer_address_checked_after_connect(
    serve_app: Callable[[web.Application], Any],
) -> None:
    """A name that passed the check but connected somewhere forbidden (DNS rebinding): the
    answer is refused. Here `localhost` is listed by name but the policy is re-checked against
    the peer 127.0.0.1 under a ranges-only list that excludes it."""

    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"secret": "internal"})

    app = web.Application()
    app.router.add_get("/", ok)
    async with serve_app(app) as base:
        port = base.rsplit(":", 1)[1]
        dns = {"rebind.example": ["93.184.216.34"]}
        policy = _policy(None, multi=True, dns=dns)
        transport = httpx.AsyncHTTPTransport()

        class Rebinding(httpx.AsyncBaseTransport):
            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                # What a rebinding resolver does: the connection lands on loopback.
                request.url = request.url.copy_with(host="127.0.0.1")
                return await transport.handle_async_request(request)

        async with httpx.AsyncClient(transport=Rebinding(), event_hooks=event_hooks(policy)) as c:
            with pytest.raises(BlockedHost, match="private"):
                await c.get(f"http://rebind.example:{port}/")
