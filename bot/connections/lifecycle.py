"""Connections end with what they belong to: `/memory forget all` takes the person's (every
server, every sign-in under way), `/tools remove N` takes everyone's for that install. The
person's open MCP sessions (which hold their tokens in memory) are closed too."""

from __future__ import annotations

import logging

from bot.keys import PersonKey
from bot.stores.connections import ConnectionStore
from tools.mcp.connection import McpPool

log = logging.getLogger("bot.connections")


async def close_sessions(
    pool: McpPool,
    *,
    install: str | None = None,
    person: str | None = None,
    only: str | None = None,
) -> None:
    """Close the per-person sessions of one install (everyone's), of one person (all of
    theirs), or with `only`, that person's session to that one install."""
    for key in pool.keys():
        name, sep, owner = key.partition("#")
        if not sep or (only is not None and name != only):
            continue
        if (install is not None and name == install) or (person is not None and owner == person):
            await pool.forget(key)


class ConnectionsTier:
    """The erasure tier of `bot.memory.erasure` for tool connections."""

    def __init__(self, store: ConnectionStore, pool: McpPool) -> None:
        self.store, self.pool = store, pool

    async def erase_person(self, person: PersonKey) -> int:
        gone = await self.store.forget_person(person.id)
        await close_sessions(self.pool, person=person.id)
        return gone

    async def compact(self) -> None:
        return None


async def remove_install(
    store: ConnectionStore, pool: McpPool, team: str, name: str, install: str
) -> int:
    """Everyone's connections to an install that was removed."""
    gone = await store.remove_server(team, name)
    await close_sessions(pool, install=install)
    if gone:
        log.info(
            "tool_connections_removed",
            extra={"fields": {"team": team, "server": name, "count": gone}},
        )
    return gone
