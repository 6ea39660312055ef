"""Slack installation storage contract (`InstallationDocStore`), run against every backend.

The same `store` fixture as the rest of the contract suite: SQLite, mongoeco, and a real
MongoDB when TEST_MONGODB_URI is set.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from adapters.slack.installations import InstallationDocStore, installation_docs
from adapters.slack.oauth import SlackInstallationStorage
from bot.stores.protocols import Store
from tests.stores.backends import Backend

TOKEN = "xoxb-1111-2222-secret-bot-token"


def bot_doc(team: str, token: str = TOKEN, **extra: Any) -> dict[str, Any]:
    """Shaped like slack_sdk's `Bot.__dict__`, which the adapter stores."""
    return {
        "app_id": "A0TEST",
        "enterprise_id": None,
        "team_id": team,
        "bot_token": token,
        "bot_id": "B1",
        "bot_user_id": f"UB{team}",
        "bot_scopes": ["app_mentions:read", "chat:write"],
        "bot_token_expires_at": None,
        "is_enterprise_install": False,
        "installed_at": 1700000000.123456,
        "custom_values": {"nested": {"list": [1, 2.5, "x", True, None]}},
        **extra,
    }


@pytest.fixture
def docs(store: Store) -> InstallationDocStore:
    return installation_docs(store)


def test_a_store_keeps_slack_installations_apart(store: Store) -> None:
    """Slack's storage is a class of its own on the store's connection (structurally the
    adapter's `SlackInstallationStorage`, checked by mypy: adapters/slack/main.py relies on
    it); neither `Store` nor the backends carry its methods."""
    as_storage = installation_docs(store)
    as_adapter_storage: SlackInstallationStorage = as_storage
    assert as_adapter_storage is as_storage and as_storage is not store
    assert "put_doc" not in Store.__dict__ and not hasattr(Store, "put_doc")
    assert not hasattr(store, "put_doc") and not hasattr(store, "consume_oauth_state")
    with pytest.raises(TypeError, match="keeps no Slack installations"):
        installation_docs(object())


# --- documents -------------------------------------------------------------------------------


async def test_put_get_and_upsert(docs: InstallationDocStore) -> None:
    assert await docs.get_doc("-", "T1", "bot") is None
    sent = bot_doc("T1")
    await docs.put_doc("-", "T1", "bot", sent)
    read = await docs.get_doc("-", "T1", "bot")
    assert read == sent

    assert read is not None
    read["bot_token"] = "changed by the caller"  # a copy: the stored document is untouched
    sent["bot_token"] = "changed after put"
    assert (await docs.get_doc("-", "T1", "bot") or {})["bot_token"] == TOKEN

    await docs.put_doc("-", "T1", "bot", bot_doc("T1", "xoxb-new", bot_id="B2"))
    replaced = await docs.get_doc("-", "T1", "bot")
    assert replaced is not None and (replaced["bot_token"], replaced["bot_id"]) == (
        "xoxb-new",
        "B2",
    )
    assert await docs.delete_docs("-", "T1") == 1  # the upsert did not add a second document


async def test_dash_ids_and_names_are_separate_keys(docs: InstallationDocStore) -> None:
    keys = [
        ("-", "T1", "bot"),
        ("E1", "T1", "bot"),
        ("E1", "-", "bot"),  # an enterprise-wide install
        ("-", "T1", "installer"),
        ("-", "T1", "installer:U1"),
        ("-", "T2", "bot"),
    ]
    for i, key in enumerate(keys):
        await docs.put_doc(*key, {"n": i})
    for i, key in enumerate(keys):
        assert await docs.get_doc(*key) == {"n": i}
    assert await docs.get_doc("-", "-", "bot") is None
    assert await docs.get_doc("E2", "T1", "bot") is None


async def test_delete_by_name_and_whole_team(docs: InstallationDocStore) -> None:
    for name in ("bot", "installer", "installer:U1", "installer:U2"):
        await docs.put_doc("-", "T1", name, bot_doc("T1"))
    await docs.put_doc("-", "T2", "bot", bot_doc("T2"))
    await docs.put_doc("E1", "T1", "bot", bot_doc("T1"))  # same team id, another enterprise

    assert await docs.delete_docs("-", "T1", "installer:U1") == 1
    assert await docs.delete_docs("-", "T1", "installer:U1") == 0
    assert await docs.get_doc("-", "T1", "installer:U1") is None
    assert await docs.get_doc("-", "T1", "installer:U2") is not None

    assert await docs.delete_docs("-", "T1") == 3
    assert await docs.delete_docs("-", "T1", None) == 0
    for name in ("bot", "installer", "installer:U2"):
        assert await docs.get_doc("-", "T1", name) is None
    assert await docs.get_doc("-", "T2", "bot") == bot_doc("T2")
    assert await docs.get_doc("E1", "T1", "bot") == bot_doc("T1")
    assert await docs.delete_docs("-", "TNEVER") == 0


@pytest.mark.parametrize(
    ("enterprise_id", "team_id", "name"),
    [("", "T1", "bot"), ("-", "", "bot"), ("-", " ", "bot"), ("-", "T1", "")],
)
async def test_empty_key_parts_are_refused(
    docs: InstallationDocStore, enterprise_id: str, team_id: str, name: str
) -> None:
    await docs.put_doc("-", "T1", "bot", bot_doc("T1"))
    with pytest.raises(ValueError):
        await docs.put_doc(enterprise_id, team_id, name, {})
    with pytest.raises(ValueError):
        await docs.get_doc(enterprise_id, team_id, name)
    with pytest.raises(ValueError):
        await docs.delete_docs(enterprise_id, team_id, name)
    if name:  # an empty enterprise or team never means "every team"
        with pytest.raises(ValueError):
            await docs.delete_docs(enterprise_id, team_id)
    assert await docs.get_doc("-", "T1", "bot") is not None


async def test_old_documents_without_schema_version_are_read(backend: Backend) -> None:
    await installation_docs(backend.store).ensure_schema()  # as an earlier version left it
    await backend.raw_insert(
        "slack_installations",
        {"enterprise_id": "-", "team_id": "T9", "name": "bot", "doc": bot_doc("T9")},
    )
    assert await installation_docs(backend.store).get_doc("-", "T9", "bot") == bot_doc("T9")


# --- OAuth states ----------------------------------------------------------------------------


async def test_a_state_is_consumed_once(docs: InstallationDocStore) -> None:
    await docs.put_oauth_state("state-1", time.time() + 600)
    await docs.put_oauth_state("state-2", expires_at=time.time() + 600)
    assert await docs.consume_oauth_state("state-1") is True
    assert await docs.consume_oauth_state("state-1") is False
    assert await docs.consume_oauth_state("never-issued") is False
    assert await docs.consume_oauth_state("") is False
    assert await docs.consume_oauth_state("state-2") is True


async def test_an_expired_state_is_not_consumable(docs: InstallationDocStore) -> None:
    await docs.put_oauth_state("stale", time.time() - 1)
    assert await docs.consume_oauth_state("stale") is False
    await docs.put_oauth_state("renewed", time.time() - 1)
    await docs.put_oauth_state("renewed", time.time() + 600)  # putting again replaces the expiry
    assert await docs.consume_oauth_state("renewed") is True
    await docs.put_oauth_state("shortened", time.time() + 600)
    await docs.put_oauth_state("shortened", time.time() - 1)
    assert await docs.consume_oauth_state("shortened") is False


async def test_concurrent_consumers_of_one_state_get_one_true(docs: InstallationDocStore) -> None:
    await docs.put_oauth_state("contested", time.time() + 600)
    results = await asyncio.gather(*(docs.consume_oauth_state("contested") for _ in range(10)))
    assert sorted(results) == [False] * 9 + [True]


async def test_bad_oauth_states_are_refused(docs: InstallationDocStore) -> None:
    with pytest.raises(ValueError):
        await docs.put_oauth_state("", time.time() + 600)
    with pytest.raises(ValueError):
        await docs.put_oauth_state("s", float("inf"))
    with pytest.raises(TypeError):
        await docs.put_oauth_state("s", "tomorrow")  # type: ignore[arg-type]
