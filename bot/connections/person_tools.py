"""An `auth=user` MCP install's tools for one person: their own session, with their own tokens.

Each person gets a session of their own in the MCP pool (keyed by install and person), whose
HTTP client carries `PersonOAuth` for that person and nobody else, so a tool built here can only
ever send its caller's token: Bob's turn builds Bob's tools, whoever else wrote in the thread.
A person with no connection, or whose refresh the server refused, gets `NeedsSignIn` (the
refused connection is deleted, so the next turn asks to connect again too).
"""

from __future__ import annotations

import asyncio
import logging

from mcp.shared.auth import OAuthClientInformationFull

from bot.connections.base import NeedsSignIn, Owner
from bot.connections.signin import ServerAuth, callback_url, preregistered
from bot.connections.tokens import PersonOAuth, SealedTokenStorage
from bot.secrets import SecretBox, SecretsUnavailable
from bot.stores.connections import Connection, ConnectionStore
from tools.declare import Tool
from tools.keylocks import KeyLocks
from tools.mcp.connection import McpPool, ServerDown
from tools.mcp.pack import adapt
from tools.packs.base import PackUnavailable

log = logging.getLogger("bot.connections")


def session_key(install: str, person: str) -> str:
    """The MCP pool's key of one person's session to one install."""
    return f"{install}#{person}"


class PersonTools:
    def __init__(
        self, store: ConnectionStore, box: SecretBox, pool: McpPool, public_url: str
    ) -> None:
        self.store, self.box, self.pool = store, box, pool
        self.redirect_uri = callback_url(public_url)
        # One person's concurrent turns share one session: the first builds it, the others wait
        # (two built at once would close each other's).
        self._building: KeyLocks[str] = KeyLocks()

    async def tools(
        self,
        owner: Owner,
        install: str,
        server: ServerAuth,
        allow: frozenset[str] | None,
    ) -> list[Tool]:
        """The person's tools of that install; NeedsSignIn when they must (re)connect."""
        key = session_key(install, owner.person)
        async with self._building.hold(key):
            row = await self.store.get(owner.team, owner.person, owner.server)
            if row is None:
                raise NeedsSignIn("not connected")
            return await self._tools(owner, key, row, server, allow)

    async def _tools(
        self,
        owner: Owner,
        key: str,
        row: Connection,
        server: ServerAuth,
        allow: frozenset[str] | None,
    ) -> list[Tool]:
        install = key.partition("#")[0]
        conn = self.pool.get(key)
        auth = conn.auth if conn is not None else None
        if (
            not isinstance(auth, PersonOAuth)
            or conn is None
            or conn.url != server.url
            or auth.stale(row)
        ):
            client = await self._client(owner, server, row.issuer)
            if client is None:
                raise NeedsSignIn("no client registration")
            storage = SealedTokenStorage(self.store, self.box, owner, client)
            auth = PersonOAuth(server.url, storage, self.redirect_uri)
            await self.pool.forget(key)
            conn = self.pool.connection(key, server.url, None, auth=auth)
        else:
            if auth.needs_sign_in:
                await self.drop(owner, install)
                raise NeedsSignIn("refused")
            if auth.due():
                conn.mark_stale()
        try:
            listing = await conn.tools()
        except ServerDown as exc:
            if auth.needs_sign_in:
                await self.drop(owner, install)
                raise NeedsSignIn("refused") from None
            raise PackUnavailable(str(exc)) from None
        cached = conn.adapted
        wanted = (conn.version, owner.server, allow)
        if isinstance(cached, tuple) and cached[0] == wanted:
            tools: list[Tool] = cached[1]
            return tools
        tools = await asyncio.to_thread(adapt, owner.server, listing, conn, allow)
        conn.adapted = (wanted, tools)
        return tools

    async def drop(self, owner: Owner, install: str) -> None:
        """The connection is unusable (refused): removed, so the person is asked again."""
        await self.store.remove(owner.team, owner.person, owner.server)
        await self.pool.forget(session_key(install, owner.person))
        log.info(
            "tool_connection_refused",
            extra={"fields": {"team": owner.team, "server": owner.server}},
        )

    async def _client(
        self, owner: Owner, server: ServerAuth, issuer: str
    ) -> OAuthClientInformationFull | None:
        if server.client_id:
            return preregistered(server, self.redirect_uri, issuer)
        sealed = await self.store.get_client(owner.team, owner.server, issuer)
        if sealed is None:
            return None
        try:
            return OAuthClientInformationFull.model_validate_json(self.box.open(sealed))
        except SecretsUnavailable:
            return None
