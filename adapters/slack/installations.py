"""Slack's installation documents and OAuth states, kept in the bot's own store.

They are Slack's business, not the core's: the turn, memory and commands never touch them, and
the core's `Store` carries no method for them. A class of its own per backend
(`installations_sqlite`, `installations_mongo`) works on the store's open connection (the
SQLite worker, the MongoDB database), so they share its file or database, its `secure_delete`
and its outage handling; the table and collection names (`slack_installations`,
`slack_oauth_states`) are those of every earlier version, so stored installs stay readable.
`slack_installation_storage(store, settings)` is what `bot slack` uses: the backend's class,
sealed with BOT_SECRET_KEY when it is set (the documents hold bot tokens).
"""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field

from bot.config import Settings
from bot.secrets import SecretBox, SecretsUnavailable, is_sealed
from bot.stores.records import SCHEMA_VERSION, utcnow

log = logging.getLogger(__name__)

SEALED_FIELD = "sealed"
DOCS = "slack_installations"  # table / collection names: unchanged, existing data stays readable
STATES = "slack_oauth_states"


@runtime_checkable
class InstallationDocStore(Protocol):
    """Slack OAuth installations: JSON documents keyed by (enterprise_id, team_id, name), plus
    single-use OAuth `state` values (the shape `adapters.slack.oauth.SlackInstallationStorage`
    asks for).

    An absent enterprise or team id is passed as "-"; an empty id or name is a ValueError.
    Documents hold bot tokens: never log them. The storage keeps what it is given; with
    BOT_SECRET_KEY set, `SealedInstallations` hands it documents already encrypted.
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


class InstallationDoc(BaseModel):
    """One installation document ("bot", "installer", "installer:<user>") of one workspace.

    `doc` holds bot tokens: it is left out of `repr` and validation errors never echo the input,
    so neither a log line nor a traceback shows it. Never log it.
    """

    model_config = ConfigDict(extra="ignore", hide_input_in_errors=True)

    schema_version: int = SCHEMA_VERSION
    enterprise_id: str  # "-" when absent
    team_id: str  # "-" when absent (enterprise-wide installs)
    name: str
    doc: dict[str, Any] = Field(repr=False)
    updated_at: datetime = Field(default_factory=utcnow)


def check_installation_key(enterprise_id: str, team_id: str, name: str | None) -> None:
    """ValueError unless the ids and the name are non-empty strings (`name` may be None where
    it means "every document of the team"). An absent enterprise or team id is "-", never "",
    so an empty part can never widen a query."""
    for part, value in (("enterprise_id", enterprise_id), ("team_id", team_id), ("name", name)):
        if value is None and part == "name":
            continue
        if not isinstance(value, str) or not value.strip():
            raise ValueError(
                f"Slack installation {part} must be a non-empty string ('-' if absent)"
            )


def check_oauth_state(state: object, expires_at: object) -> None:
    """TypeError/ValueError for an OAuth state that is not a non-empty str with a finite expiry."""
    if not isinstance(state, str):
        raise TypeError(f"an OAuth state must be a str, got {type(state).__name__}")
    if isinstance(expires_at, bool) or not isinstance(expires_at, int | float):
        raise TypeError(f"expires_at must be Unix seconds, got {expires_at!r}")
    if not state or not math.isfinite(expires_at):
        raise ValueError("an OAuth state must be non-empty with a finite expiry")


def installation_docs(store: object) -> InstallationDocStore:
    """The installation storage on an opened store's own connection (SQLite or MongoDB);
    TypeError for a backend that keeps none."""
    from bot.stores.mongo import MongoStore
    from bot.stores.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        from adapters.slack.installations_sqlite import SqliteInstallations

        return SqliteInstallations(store.worker)
    if isinstance(store, MongoStore):
        from adapters.slack.installations_mongo import MongoInstallations

        return MongoInstallations(store.db)
    raise TypeError(f"{type(store).__name__} keeps no Slack installations")


class SealedInstallations:
    """An `InstallationDocStore` that seals documents: `put_doc` stores the whole document as
    `{"sealed": "enc:v1:..."}` and `get_doc` opens it again; documents stored before
    BOT_SECRET_KEY was set come back as they are (and are sealed on their next write). OAuth
    states are random single-use values, not secrets, and pass straight through."""

    def __init__(self, inner: InstallationDocStore, box: SecretBox) -> None:
        self._inner = inner
        self._box = box

    async def get_doc(self, enterprise_id: str, team_id: str, name: str) -> dict[str, Any] | None:
        doc = await self._inner.get_doc(enterprise_id, team_id, name)
        if doc is None or set(doc) != {SEALED_FIELD} or not is_sealed(doc[SEALED_FIELD]):
            return doc
        try:
            opened = json.loads(self._box.open(doc[SEALED_FIELD]))
        except SecretsUnavailable as exc:
            log.warning(
                "slack_installation_unreadable",
                extra={
                    "fields": {
                        "enterprise": enterprise_id,
                        "team": team_id,
                        "name": name,
                        "error": str(exc),
                    }
                },
            )
            raise
        if not isinstance(opened, dict):
            raise ValueError("a sealed Slack installation document is not a JSON object")
        return opened

    async def put_doc(
        self, enterprise_id: str, team_id: str, name: str, doc: dict[str, Any]
    ) -> None:
        sealed = self._box.seal(pydantic_core.to_json(doc).decode("utf-8"))
        await self._inner.put_doc(enterprise_id, team_id, name, {SEALED_FIELD: sealed})

    async def delete_docs(self, enterprise_id: str, team_id: str, name: str | None = None) -> int:
        return await self._inner.delete_docs(enterprise_id, team_id, name)

    async def put_oauth_state(self, state: str, expires_at: float) -> None:
        await self._inner.put_oauth_state(state, expires_at)

    async def consume_oauth_state(self, state: str) -> bool:
        return await self._inner.consume_oauth_state(state)


def slack_installation_storage(store: object, settings: Settings) -> InstallationDocStore:
    """The opened store's Slack installation storage, sealed when BOT_SECRET_KEY is set."""
    docs = installation_docs(store)
    box = SecretBox.from_settings(settings)
    return docs if box is None else SealedInstallations(docs, box)
