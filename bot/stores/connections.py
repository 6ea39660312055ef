"""Per-person connections to `auth=user` tool servers, and the sign-ins under way.

A connection is keyed by team, person, server (the install's name) and issuer; its tokens and
the client registration arrive here already sealed (`bot.tool_connections.sealing`), so the store
never holds a token in plain text. A pending sign-in is stored under the SHA-256 of its `state`
(the state itself only travels in the person's browser) and is taken at most once: `take_pending`
deletes it in the same step that reads it, and an expired one is never returned.

Registered clients (dynamic client registration) are kept per team, server and issuer: one
registration serves every person of the team, as a real app's would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Connection:
    team: str  # TeamKey.id
    person: str  # PersonKey.id
    server: str  # the install's name
    issuer: str
    tokens: str  # sealed JSON: the OAuth token and when its access token expires
    connected_at: float
    updated_at: float


@dataclass(frozen=True)
class PendingSignIn:
    state_hash: str
    team: str
    person: str
    server: str
    expires_at: float
    doc: str  # sealed JSON: verifier, endpoints, the waiting message's reference


class ConnectionStore(Protocol):
    async def put(self, conn: Connection) -> None:
        """Insert or replace the person's connection to that server."""
        ...

    async def get(self, team: str, person: str, server: str) -> Connection | None: ...

    async def of_person(self, team: str, person: str) -> list[Connection]:
        """The person's connections in that team, by server name."""
        ...

    async def remove(self, team: str, person: str, server: str) -> bool: ...

    async def remove_server(self, team: str, server: str) -> int:
        """Everyone's connections (and sign-ins under way) to a removed install."""
        ...

    async def forget_person(self, person: str) -> int:
        """Everything held for one person (`/memory forget all`)."""
        ...

    async def put_client(self, team: str, server: str, issuer: str, sealed: str) -> None: ...

    async def get_client(self, team: str, server: str, issuer: str) -> str | None: ...

    async def add_pending(self, pending: PendingSignIn) -> None: ...

    async def peek_pending(self, state_hash: str, now: float) -> PendingSignIn | None:
        """The sign-in for that state, left in place (the link is opened before the callback);
        None if unknown, used or expired."""
        ...

    async def take_pending(self, state_hash: str, now: float) -> PendingSignIn | None:
        """The sign-in for that state, deleted as it is read; None if unknown, used or expired."""
        ...


def connections_of(store: object) -> ConnectionStore | None:
    """The connection store on the same connection as a durable store, or None."""
    from bot.stores.mongo import MongoStore
    from bot.stores.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        from bot.stores.connections_sqlite import SqliteConnections

        return SqliteConnections(store.worker)
    if isinstance(store, MongoStore):
        from bot.stores.connections_mongo import MongoConnections

        return MongoConnections(store.db)
    return None
