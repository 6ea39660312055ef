"""Slack's installation documents and OAuth states: a protocol of their own, not part of `Store`.

They are Slack's business, not the core's: the turn, memory and commands never touch them, and
a platform without OAuth installs (Discord, the console) never sees them. Both durable backends
implement this protocol on the same connection as the rest of the store (tables/collections
`slack_installations` and `slack_oauth_states`); `installation_docs(store)` gives it to the Slack
start-up (`adapters.slack.main`), which seals the documents when BOT_SECRET_KEY is set.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class InstallationDocStore(Protocol):
    """Slack OAuth installations: JSON documents keyed by (enterprise_id, team_id, name), plus
    single-use OAuth `state` values.

    Structurally identical to `adapters.slack.oauth.SlackInstallationStorage` (the core does not
    import adapters). Both durable backends implement it next to `Store` (same connection), but
    `Store` does not carry it: `installation_docs(store)` hands it to Slack's start-up.
    An absent enterprise or team id is passed as "-"; an empty id or name is a ValueError.
    Documents hold bot tokens: never log them. The store keeps what it is given; with
    BOT_SECRET_KEY set, `bot.sealed_installations` hands it documents already encrypted.
    """

    async def get_doc(self, enterprise_id: str, team_id: str, name: str) -> dict[str, Any] | None:
        """The document (a fresh copy), or None."""

    async def put_doc(
        self, enterprise_id: str, team_id: str, name: str, doc: dict[str, Any]
    ) -> None:
        """Insert or replace. The document must be JSON-serialisable."""

    async def delete_docs(self, enterprise_id: str, team_id: str, name: str | None = None) -> int:
        """Delete the document called `name`, or every document of this team if None; a count."""

    async def put_oauth_state(self, state: str, expires_at: float) -> None:
        """Remember an OAuth state until `expires_at` (Unix seconds); putting it again replaces
        its expiry. Expired states are purged (SQLite: on write; MongoDB: TTL index)."""

    async def consume_oauth_state(self, state: str) -> bool:
        """Atomically delete the state; True only if it existed and had not expired, so of
        concurrent consumers of one state at most one gets True."""


def check_oauth_state(state: object, expires_at: object) -> None:
    """TypeError/ValueError for an OAuth state that is not a non-empty str with a finite expiry."""
    if not isinstance(state, str):
        raise TypeError(f"an OAuth state must be a str, got {type(state).__name__}")
    if isinstance(expires_at, bool) or not isinstance(expires_at, int | float):
        raise TypeError(f"expires_at must be Unix seconds, got {expires_at!r}")
    if not state or not math.isfinite(expires_at):
        raise ValueError("an OAuth state must be non-empty with a finite expiry")


def installation_docs(store: object) -> InstallationDocStore:
    """The installation storage of an opened store (SQLite or MongoDB); TypeError for a backend
    that keeps none."""
    if not isinstance(store, InstallationDocStore):
        raise TypeError(f"{type(store).__name__} keeps no Slack installations")
    return store
