"""Fact versions: the contract both stores keep (run on SQLite, mongoeco, real MongoDB)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from bot.keys import PersonKey, SessionKey
from bot.stores.mongo import MongoStore
from bot.stores.protocols import StaleFact, Store
from bot.stores.records import FACT_SCHEMA_VERSION, utcnow
from bot.stores.sqlite import SqliteStore
from tests.stores.backends import Backend

CHANNEL = SessionKey("slack", "T1", "C1")
ALICE = PersonKey("slack", "T1", "U1")
BOB = PersonKey("slack", "T1", "U2")


async def test_update_closes_the_old_version_and_links_the_new(store: Store) -> None:
    veg = await store.add_fact(
        ALICE, "Is vegetarian", key="Diet", session=CHANNEL, source_messages=["m1"]
    )
    assert (veg.key, veg.live, veg.source_messages, veg.schema_version) == (
        "diet",
        True,
        ["m1"],
        FACT_SCHEMA_VERSION,
    )
    fish = await store.replace_fact(
        ALICE, veg.id, "Eats fish (pescatarian)", key="diet", source_messages=["m9"]
    )
    assert fish is not None and fish.replaces == [veg.id] and fish.live

    live = await store.list_facts(ALICE)
    assert [f.text for f in live] == ["Eats fish (pescatarian)"]
    history = await store.list_facts(ALICE, history=True)
    assert [f.text for f in history] == ["Is vegetarian", "Eats fish (pescatarian)"]
    old = history[0]
    assert not old.live and old.valid_to is not None and old.valid_to >= old.valid_from
    assert (old.replaced_by, old.closed_reason) == (fish.id, "updated")
    assert fish.valid_from == old.valid_to


async def test_delete_closes_without_replacement_and_text_can_return(store: Store) -> None:
    veg = await store.add_fact(ALICE, "Is vegetarian", key="diet")
    assert await store.replace_fact(ALICE, veg.id, None) is None
    assert await store.list_facts(ALICE) == []
    (closed,) = await store.list_facts(ALICE, history=True)
    assert (closed.closed_reason, closed.replaced_by, closed.live) == ("deleted", None, False)
    again = await store.add_fact(ALICE, "is vegetarian.")  # live again: a new version
    assert again.id != veg.id
    assert [f.id for f in await store.list_facts(ALICE)] == [again.id]
    assert len(await store.list_facts(ALICE, history=True)) == 2


async def test_closing_what_is_not_live_is_stale(store: Store) -> None:
    veg = await store.add_fact(ALICE, "Is vegetarian")
    with pytest.raises(StaleFact):
        await store.replace_fact(BOB, veg.id, "Eats fish")  # someone else's fact
    await store.replace_fact(ALICE, veg.id, "Eats fish")
    with pytest.raises(StaleFact):
        await store.replace_fact(ALICE, veg.id, "Is vegan")  # already closed
    with pytest.raises(StaleFact):
        await store.replace_fact(ALICE, "nosuch", None)
    assert [f.text for f in await store.list_facts(ALICE)] == ["Eats fish"]


async def test_replacement_with_an_already_live_text_keeps_one_live(store: Store) -> None:
    veg = await store.add_fact(ALICE, "Is vegetarian")
    fish = await store.add_fact(ALICE, "Eats fish")
    merged = await store.replace_fact(ALICE, veg.id, "eats fish.")
    assert merged is not None and merged.id == fish.id
    assert [f.id for f in await store.list_facts(ALICE)] == [fish.id]


async def test_replacement_with_the_same_text_is_a_new_version(store: Store) -> None:
    tea = await store.add_fact(ALICE, "Prefers tea", key="drink", source="inferred")
    said = await store.replace_fact(ALICE, tea.id, "Prefers tea", key="drink", source="user")
    assert said is not None and said.id != tea.id and said.source == "user"
    assert [f.id for f in await store.list_facts(ALICE)] == [said.id]


async def test_forgetting_a_fact_erases_its_older_versions(store: Store) -> None:
    v1 = await store.add_fact(ALICE, "Is vegetarian", key="diet")
    v2 = await store.replace_fact(ALICE, v1.id, "Is vegan", key="diet")
    assert v2 is not None
    v3 = await store.replace_fact(ALICE, v2.id, "Eats fish", key="diet")
    assert v3 is not None
    other = await store.add_fact(ALICE, "Lives in Lyon")
    bobs = await store.add_fact(BOB, "Is vegetarian")
    assert await store.delete_fact(ALICE, v3.id.upper())
    assert [f.id for f in await store.list_facts(ALICE, history=True)] == [other.id]
    assert await store.list_facts(BOB) == [bobs]


async def test_forget_all_erases_every_version(store: Store) -> None:
    v1 = await store.add_fact(ALICE, "Is vegetarian", key="diet")
    await store.replace_fact(ALICE, v1.id, "Eats fish", key="diet")
    await store.add_fact(BOB, "Likes jazz")
    assert await store.delete_all_facts(ALICE) == 2
    assert await store.list_facts(ALICE, history=True) == []
    assert len(await store.list_facts(BOB)) == 1


async def test_concurrent_replacements_of_one_fact_close_it_once(store: Store) -> None:
    veg = await store.add_fact(ALICE, "Is vegetarian", key="diet")

    async def replace(text: str) -> str:
        try:
            await store.replace_fact(ALICE, veg.id, text, key="diet")
            return "done"
        except StaleFact:
            return "stale"

    outcomes = await asyncio.gather(replace("Eats fish"), replace("Is vegan"))
    live = await store.list_facts(ALICE)
    assert sorted(outcomes) == ["done", "stale"]
    closed = [f for f in await store.list_facts(ALICE, history=True) if not f.live]
    assert [f.id for f in closed] == [veg.id]
    assert len(live) == 1 and veg.id not in {f.id for f in live}


async def test_an_interrupted_mongo_replacement_is_finished_on_read(backend: Backend) -> None:
    """The replacement landed, the close did not (a crash between the two writes)."""
    if backend.name == "sqlite":
        pytest.skip("SQLite replaces in one transaction")
    store = backend.store
    veg = await store.add_fact(ALICE, "Is vegetarian", key="diet")
    now = utcnow()
    await backend.raw_insert(
        "facts",
        {
            "id": "newv01",
            "person": ALICE.id,
            "text": "Eats fish",
            "key": "diet",
            "replaces": [veg.id],
            "valid_from": now.isoformat(),
            "created_at": now,
            "live": True,
            "live_norm": "eats fish",
            "schema_version": FACT_SCHEMA_VERSION,
        },
    )
    assert [f.id for f in await store.list_facts(ALICE)] == ["newv01"]
    (old,) = [f for f in await store.list_facts(ALICE, history=True) if f.id == veg.id]
    assert (old.live, old.replaced_by) == (False, "newv01")


async def test_unversioned_sqlite_facts_are_migrated(tmp_path: Path) -> None:
    path = tmp_path / "bot.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE facts (n INTEGER PRIMARY KEY, person TEXT NOT NULL, id TEXT NOT NULL, "
        "norm TEXT NOT NULL, doc TEXT NOT NULL, UNIQUE (person, id), UNIQUE (person, norm));"
    )
    old = {
        "id": "abc123",
        "person": ALICE.id,
        "text": "Likes jazz",
        "source": "consolidation",
        "created_at": "2026-01-05T10:00:00Z",
        "schema_version": 1,
    }
    conn.execute(
        "INSERT INTO facts (person, id, norm, doc) VALUES (?, ?, ?, ?)",
        (ALICE.id, "abc123", "likes jazz", json.dumps(old)),
    )
    conn.commit()
    conn.close()
    store = await SqliteStore.open(path)
    try:
        (fact,) = await store.list_facts(ALICE)
        assert (fact.id, fact.source, fact.live) == ("abc123", "inferred", True)
        assert fact.valid_from == fact.created_at and fact.schema_version == FACT_SCHEMA_VERSION
        assert (await store.add_fact(ALICE, "likes jazz")).id == "abc123"
    finally:
        await store.close()


async def test_unversioned_mongo_facts_are_migrated(backend: Backend) -> None:
    if backend.name == "sqlite":
        pytest.skip("see test_unversioned_sqlite_facts_are_migrated")
    store = backend.store
    assert isinstance(store, MongoStore)
    await store.db["facts"].drop()
    await store.db["facts"].create_index([("person", 1), ("norm", 1)], unique=True)
    await backend.raw_insert(
        "facts",
        {
            "id": "abc123",
            "person": ALICE.id,
            "text": "Likes jazz",
            "norm": "likes jazz",
            "source": "user",
            "created_at": utcnow(),
            "schema_version": 1,
        },
    )
    await store.ensure_indexes()
    (fact,) = await store.list_facts(ALICE)
    assert (fact.id, fact.live) == ("abc123", True)
    assert (await store.add_fact(ALICE, "likes jazz")).id == "abc123"
    replaced = await store.replace_fact(ALICE, "abc123", "Likes blues")
    assert replaced is not None
    assert await store.add_fact(ALICE, "Likes jazz") != fact  # closed text may be live again
