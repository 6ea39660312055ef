"""Connections end with what they belong to, through the whole bot: `/tools remove N` takes
everyone's connections to N (and nothing of another install or team), `/memory forget all`
takes the asking person's (and nobody else's)."""

from __future__ import annotations

from typing import Any

from bot.core import CommandRequest
from bot.stores.connections import Connection, PendingSignIn, connections_of
from testkit.fakes.mcp_server import FakeMcp

ALICE, BOB = "test:T1:UA", "test:T1:UB"


def _conn(person: str, server: str, team: str = "test:T1") -> Connection:
    return Connection(team, person, server, "https://as.test", "enc:v1:x", 1.0, 1.0)


async def test_remove_and_forget_take_the_connections(make_app: Any) -> None:
    app = await make_app()
    conns = connections_of(app.store)
    assert conns is not None
    async with FakeMcp() as server:
        for name in ("tix", "crm"):
            reply = await app.handle_command(
                CommandRequest(
                    "test",
                    "T1",
                    "C1",
                    "UA",
                    "tools",
                    f"install mcp name={name} url={server.url}",
                    is_platform_admin=True,
                )
            )
            assert reply.ok, reply.text
    for person in (ALICE, BOB):
        for name in ("tix", "crm"):
            await conns.put(_conn(person, name))
    await conns.put(_conn("test:T2:UA", "tix", team="test:T2"))
    await conns.add_pending(PendingSignIn("h1", "test:T1", BOB, "tix", 1e12, "enc:v1:d"))

    gone = await app.handle_command(
        CommandRequest("test", "T1", "C1", "UA", "tools", "remove tix", is_platform_admin=True)
    )
    assert gone.ok, gone.text
    assert [c.server for c in await conns.of_person("test:T1", ALICE)] == ["crm"]
    assert [c.server for c in await conns.of_person("test:T1", BOB)] == ["crm"]
    assert await conns.take_pending("h1", now=0.0) is None
    assert await conns.get("test:T2", "test:T2:UA", "tix") is not None  # another team's

    forgot = await app.handle_command(
        CommandRequest("test", "T1", "C1", "UA", "memory", "forget all")
    )
    assert forgot.ok, forgot.text
    assert await conns.of_person("test:T1", ALICE) == []
    assert [c.server for c in await conns.of_person("test:T1", BOB)] == ["crm"]
