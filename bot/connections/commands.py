"""`/tools connections` and `/tools disconnect N`: a person's own connections to `auth=user`
servers (names and dates only: never a token)."""

from __future__ import annotations

import datetime as dt

from bot.connections.lifecycle import close_sessions
from bot.core import CommandReply
from bot.keys import PersonKey
from bot.stores.connections import ConnectionStore
from tools.mcp.connection import McpPool


class ConnectionCommands:
    def __init__(self, store: ConnectionStore, pool: McpPool) -> None:
        self.store, self.pool = store, pool

    async def list(self, person: PersonKey) -> CommandReply:
        conns = await self.store.of_person(person.team_key.id, person.id)
        if not conns:
            return CommandReply(
                "You have not connected any tool server with your own account here. "
                "When a question needs one, I send you a link to connect it."
            )
        lines = ["Your connections here (`/tools disconnect <name>` removes one):"]
        for c in conns:
            since = dt.datetime.fromtimestamp(c.connected_at, dt.UTC).strftime("%Y-%m-%d")
            lines.append(f"• `{c.server}` (connected {since})")
        return CommandReply("\n".join(lines))

    async def disconnect(self, person: PersonKey, name: str) -> CommandReply:
        team = person.team_key.id
        if not await self.store.remove(team, person.id, name):
            return CommandReply(
                f"You have no connection named `{name[:40]}` here (see `/tools connections`).",
                ok=False,
            )
        await close_sessions(self.pool, install=None, person=person.id, only=f"{name}@{team}")
        return CommandReply(
            f"Disconnected `{name}`: I no longer use your account there. The provider may "
            "still list the app until you remove it in your account settings."
        )
