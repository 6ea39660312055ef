"""Per-person OAuth connections against the fake protected MCP server: the real `mcp` client
(through `PersonOAuth`, the SDK's OAuthClientProvider) and the real SQLite store.

The "browser" is plain httpx following the authorization URL to the fake's login page, where
the test chooses who signs in; the callback query it ends at is handed to `SignIns.finish`, as
`GET /oauth/callback` does."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from bot.connections.base import NeedsSignIn, Owner
from bot.connections.person_tools import PersonTools
from bot.connections.signin import ServerAuth, SignInFailed, SignIns
from bot.secrets import SecretBox
from bot.stores.connections import ConnectionStore, connections_of
from bot.stores.sqlite import SqliteStore
from testkit.fakes.oauth_mcp import FakeOAuthMcp
from tools.mcp.connection import McpPool
from tools.types import ToolContext

PUBLIC = "http://127.0.0.1:9"
TEAM = "slack:T1"
ALICE = Owner(TEAM, "slack:T1:UALICE", "tickets")
BOB = Owner(TEAM, "slack:T1:UBOB", "tickets")


@dataclass
class World:
    fake: FakeOAuthMcp
    store: SqliteStore
    conns: ConnectionStore
    signins: SignIns
    people: PersonTools
    pool: McpPool
    server: ServerAuth


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    box = SecretBox("a passphrase for the tests only")
    store = await SqliteStore.open(tmp_path / "bot.db")
    conns = connections_of(store)
    assert conns is not None
    pool = McpPool(connect_timeout=10.0)
    async with FakeOAuthMcp(access_ttl=4) as fake:
        try:
            yield World(
                fake,
                store,
                conns,
                SignIns(conns, box, PUBLIC),
                PersonTools(conns, box, pool, PUBLIC),
                pool,
                ServerAuth(fake.url),
            )
        finally:
            await pool.aclose()
            await store.close()


async def browse(url: str, user: str) -> dict[str, str]:
    """The person's browser: the authorization URL, the login page, back to the callback."""
    async with httpx.AsyncClient() as http:
        first = await http.get(url)
        assert first.status_code == 302, first.text
        login = await http.get(first.headers["location"] + f"&user={user}")
        assert login.status_code == 302
    back = urlsplit(login.headers["location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == f"{PUBLIC}/oauth/callback"
    return dict(parse_qsl(back.query))


async def connect(w: World, owner: Owner, user: str) -> dict[str, str]:
    started = await w.signins.start(owner, w.server, {"message": "m1"})
    assert started.link.startswith(f"{PUBLIC}/oauth/start?s=")
    assert await w.signins.open_link(started.link.split("s=")[1]) == started.authorize
    query = await browse(started.authorize, user)
    done = await w.signins.finish(query)
    assert done.owner == owner and done.waiting == {"message": "m1"}
    return query


async def call(w: World, owner: Owner, tool: str = "tickets_whoami") -> str:
    tools = {t.name: t for t in await w.people.tools(owner, "tickets@T1", w.server, None)}
    ctx = ToolContext(session_id="slack:T1:C1:1.1", speaker_id=owner.person, team_id=TEAM)
    result = await tools[tool].fn(tools[tool].args_model(), ctx)
    return str(result)


async def test_two_people_each_call_with_their_own_subject(world: World) -> None:
    with pytest.raises(NeedsSignIn):
        await call(world, ALICE)
    await connect(world, ALICE, "alice")
    await connect(world, BOB, "bob")
    assert "alice" in await call(world, ALICE)
    assert "bob" in await call(world, BOB)
    assert "alice" in await call(world, ALICE, "tickets_my_tickets")
    assert world.fake.calls == [
        ("alice", "whoami"),
        ("bob", "whoami"),
        ("alice", "my_tickets"),
    ]
    # one registration serves the team (dynamic client registration once)
    assert len(world.fake.server.clients) == 1


async def test_refresh_before_expiry_without_a_new_link(world: World) -> None:
    await connect(world, ALICE, "alice")
    assert "alice" in await call(world, ALICE)
    assert world.fake.server.token_requests == ["authorization_code"]
    await asyncio.sleep(2.2)  # past the refresh point (half the 4 s lifetime), not the expiry
    assert "alice" in await call(world, ALICE)
    assert world.fake.server.token_requests == ["authorization_code", "refresh_token"]
    # the rotated refresh token was stored: a second refresh works (the old one would be a
    # replay, which the fake answers by revoking the whole grant)
    await asyncio.sleep(2.2)
    assert "alice" in await call(world, ALICE)
    assert world.fake.server.token_requests[-1] == "refresh_token"
    assert "replayed refresh token" not in world.fake.server.refused


async def test_a_new_process_uses_the_stored_tokens(world: World) -> None:
    await connect(world, ALICE, "alice")
    await world.pool.aclose()  # a restart: nothing in memory
    assert "alice" in await call(world, ALICE)
    assert world.fake.server.token_requests == ["authorization_code"]


async def test_a_refused_refresh_asks_to_connect_again(world: World) -> None:
    await connect(world, ALICE, "alice")
    await connect(world, BOB, "bob")
    assert "alice" in await call(world, ALICE)
    world.fake.server.refuse_refresh("alice")
    await asyncio.sleep(2.2)
    with pytest.raises(NeedsSignIn):
        await call(world, ALICE)
    assert await world.conns.get(TEAM, ALICE.person, "tickets") is None
    with pytest.raises(NeedsSignIn):
        await call(world, ALICE)
    assert "bob" in await call(world, BOB)  # Bob's connection is his own
    await connect(world, ALICE, "alice")
    assert "alice" in await call(world, ALICE)


async def test_a_replayed_or_forged_callback_is_refused(world: World) -> None:
    query = await connect(world, ALICE, "alice")
    with pytest.raises(SignInFailed, match="already used or has expired"):
        await world.signins.finish(query)
    with pytest.raises(SignInFailed, match="already used or has expired"):
        await world.signins.finish({**query, "state": "made-up"})
    with pytest.raises(SignInFailed, match="no sign-in"):
        await world.signins.finish({"code": "x"})
    started = await world.signins.start(BOB, world.server)
    other = await browse(started.authorize, "bob")
    with pytest.raises(SignInFailed, match="another authorization server"):
        await world.signins.finish({**other, "iss": "http://evil.test"})
    with pytest.raises(SignInFailed, match="already used"):  # the state went with the attempt
        await world.signins.finish(other)


async def test_an_expired_link_is_refused(world: World) -> None:
    late = SignIns(world.conns, SecretBox("a passphrase for the tests only"), PUBLIC, state_ttl=-1)
    started = await late.start(ALICE, world.server)
    with pytest.raises(SignInFailed, match="expired"):
        await late.open_link(started.link.split("s=")[1])
    with pytest.raises(SignInFailed, match="expired"):
        await late.finish(await browse(started.authorize, "alice"))


async def test_no_token_or_code_in_the_store_file_or_logs(
    world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await connect(world, ALICE, "alice")
    await connect(world, BOB, "bob")
    await call(world, ALICE)
    await call(world, BOB)
    await asyncio.sleep(2.2)
    await call(world, ALICE)  # a refresh: rotated tokens written back
    await world.store.close()
    secrets = world.fake.server.issued
    assert len(secrets) >= 8
    raw = await asyncio.to_thread(
        lambda: b"".join(p.read_bytes() for p in tmp_path.glob("bot.db*"))
    )
    # everything the bot's side logged, at DEBUG (the test's own browser, plain `httpx`, is
    # the person's, not the bot's)
    bots = [r for r in caplog.records if r.name.split(".")[0] not in ("httpx", "httpcore")]
    logs = "\n".join(r.getMessage() + str(getattr(r, "fields", "")) for r in bots)
    for secret in secrets:
        assert secret.encode() not in raw
        assert secret not in logs
    world.store = await SqliteStore.open(tmp_path / "bot.db")  # for the fixture's close


async def test_one_persons_concurrent_turns_share_one_session(world: World) -> None:
    await connect(world, ALICE, "alice")
    built = await asyncio.gather(
        *(world.people.tools(ALICE, "tickets@T1", world.server, None) for _ in range(5))
    )
    assert len({id(tools) for tools in built}) == 1  # one session, its one adapted listing
    assert world.pool.keys() == ["tickets@T1#slack:T1:UALICE"]
    assert "alice" in await call(world, ALICE)
