"""Slack installation documents sealed at rest (they hold bot tokens).

`SealedInstallations` wraps the store's `InstallationDocStore` methods: `put_doc` stores the
whole document as `{"sealed": "enc:v1:..."}` and `get_doc` opens it again; documents stored
before BOT_SECRET_KEY was set come back as they are (and are sealed on their next write). OAuth
states are random single-use values, not secrets, and pass straight through.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pydantic_core

from bot.config import Settings
from bot.secrets import SecretBox, SecretsUnavailable, is_sealed
from bot.stores.installations import InstallationDocStore, installation_docs

log = logging.getLogger(__name__)

SEALED_FIELD = "sealed"


class SealedInstallations:
    """An `InstallationDocStore` (and so a Slack installation storage) that seals documents."""

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
