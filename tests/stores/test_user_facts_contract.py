"""`list_user_facts`: one user's facts in every team/guild and the DM scope of one platform, and
nobody else's (run on SQLite, mongoeco and, when configured, a real MongoDB)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from bot.keys import PersonKey
from bot.stores.mongo import MongoStore
from bot.stores.protocols import Store
from bot.stores.records import FACT_SCHEMA_VERSION, utcnow
from bot.stores.sqlite import SqliteStore
from tests.stores.backends import Backend

IN_A = PersonKey("discord", "111", "42")
IN_B = PersonKey("discord", "222", "42")
IN_DM = PersonKey("discord", "@dm", "42")
# Not the same person: another platform, other users in the same places, ids that contain
# ours as a prefix or suffix, and a team whose id is our user id.
SLACK_SAME_ID = PersonKey("slack", "111", "42")
OTHER_USER = PersonKey("discord", "111", "7")
PREFIX = PersonKey("discord", "111", "421")
SUFFIX = PersonKey("discord", "@dm", "142")
TEAM_IS_OUR_ID = PersonKey("discord", "42", "9")
PLATFORM_PREFIX = PersonKey("discord2", "111", "42")


async def seed(store: Store) -> dict[str, str]:
    """One fact per person, named by its text."""
    texts: dict[str, str] = {}
    for name, person in [
        ("a", IN_A),
        ("slack", SLACK_SAME_ID),
        ("other", OTHER_USER),
        ("dm", IN_DM),
        ("prefix", PREFIX),
        ("suffix", SUFFIX),
        ("team", TEAM_IS_OUR_ID),
        ("platform", PLATFORM_PREFIX),
        ("b", IN_B),
    ]:
        fact = await store.add_fact(person, f"fact of {name}")
        texts[fact.text] = person.id
    return texts


async def test_every_scope_of_the_user_on_the_platform_and_no_one_else(store: Store) -> None:
    await seed(store)
    for asking in (IN_DM, IN_A, IN_B, PersonKey("discord", "999", "42")):  # team only names one
        facts = await store.list_user_facts(asking)
        assert [(f.text, f.person) for f in facts] == [
            ("fact of a", IN_A.id),
            ("fact of dm", IN_DM.id),
            ("fact of b", IN_B.id),
        ]
    assert [f.text for f in await store.list_user_facts(SLACK_SAME_ID)] == ["fact of slack"]
    assert [f.text for f in await store.list_user_facts(PREFIX)] == ["fact of prefix"]
    assert [f.text for f in await store.list_user_facts(SUFFIX)] == ["fact of suffix"]
    assert [f.text for f in await store.list_user_facts(PLATFORM_PREFIX)] == ["fact of platform"]
    assert await store.list_user_facts(PersonKey("discord", "111", "4")) == []
    # The per-scope query is unchanged.
    assert [f.text for f in await store.list_facts(IN_A)] == ["fact of a"]


async def test_the_audience_filter_applies_to_every_scope(store: Store) -> None:
    """In a DM scope everything is used (no filter); the filter, when given, is in the query
    for each scope alike."""
    public = await store.add_fact(IN_A, "Prefers celsius", audience="public")
    await store.add_fact(IN_A, "Allergic to cashews", audience="private:discord:111:55")
    in_dm = await store.add_fact(IN_DM, "Lives in Tromso", audience="dm:discord:@dm:9")
    in_b = await store.add_fact(IN_B, "Likes jazz", audience="public")
    await store.add_fact(OTHER_USER, "Likes blues", audience="public")
    everything = await store.list_user_facts(IN_DM)
    assert len(everything) == 4
    assert [f.id for f in await store.list_user_facts(IN_DM, audiences=["public"])] == [
        public.id,
        in_b.id,
    ]
    dms = await store.list_user_facts(IN_A, audiences=["dm:discord:@dm:9"])
    assert [f.id for f in dms] == [in_dm.id]
    assert await store.list_user_facts(IN_DM, audiences=[]) == []


async def test_live_only_unless_history_and_erasure_shows(store: Store) -> None:
    await seed(store)
    veg = await store.add_fact(IN_A, "Is vegetarian", key="diet")
    fish = await store.replace_fact(IN_A, veg.id, "Eats fish", key="diet")
    assert fish is not None
    live = [f.text for f in await store.list_user_facts(IN_DM)]
    assert live == ["fact of a", "fact of dm", "fact of b", "Eats fish"]
    history = await store.list_user_facts(IN_DM, history=True)
    assert [f.text for f in history] == [
        "fact of a",
        "fact of dm",
        "fact of b",
        "Is vegetarian",
        "Eats fish",
    ]
    assert [f.live for f in history] == [True, True, True, False, True]
    assert await store.delete_all_facts(IN_B) == 1
    assert await store.delete_fact(IN_A, fish.id)
    assert [f.text for f in await store.list_user_facts(IN_DM, history=True)] == [
        "fact of a",
        "fact of dm",
    ]
    assert [f.text for f in await store.list_user_facts(OTHER_USER)] == ["fact of other"]


async def test_the_same_fact_id_in_two_scopes_is_two_facts(backend: Backend) -> None:
    """Ids are unique per scope: both are listed, each with its person."""
    store = backend.store
    now = utcnow()
    for person in (IN_A, IN_B):
        doc = {
            "id": "same01",
            "person": person.id,
            "text": f"Likes tea in {person.team}",
            "valid_from": now.isoformat(),
            "created_at": now.isoformat(),
            "schema_version": FACT_SCHEMA_VERSION,
        }
        if isinstance(store, SqliteStore):
            conn = sqlite3.connect(store.path)
            conn.execute(
                "INSERT INTO fact_versions (person, id, live_norm, live, doc, user_key) "
                "VALUES (?, 'same01', ?, 1, json(?), 'discord:42')",
                (person.id, doc["text"].lower(), json.dumps(doc)),
            )
            conn.commit()
            conn.close()
        else:
            await backend.raw_insert(
                "facts",
                {
                    **doc,
                    "created_at": now,
                    "live": True,
                    "live_norm": str(doc["text"]).lower(),
                    "user_key": "discord:42",
                },
            )
    facts = await store.list_user_facts(IN_DM)
    assert sorted((f.id, f.person) for f in facts) == [("same01", IN_A.id), ("same01", IN_B.id)]


async def test_the_sqlite_query_uses_its_index(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "bot.db")
    try:
        await seed(store)
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / "bot.db")
    try:
        for sql in (
            "SELECT doc FROM fact_versions WHERE user_key = ? AND live = 1 ORDER BY n",
            "SELECT doc FROM fact_versions WHERE user_key = ? ORDER BY n",
        ):
            plan = " ".join(str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, ("x",)))
            assert "USING INDEX fact_versions_user" in plan, plan
    finally:
        conn.close()


async def test_sqlite_rows_written_before_user_key_get_one(tmp_path: Path) -> None:
    path = tmp_path / "bot.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE fact_versions (n INTEGER PRIMARY KEY, person TEXT NOT NULL, "
        "id TEXT NOT NULL, live_norm TEXT NOT NULL, live INTEGER NOT NULL, doc TEXT NOT NULL, "
        "UNIQUE (person, id), UNIQUE (person, live_norm));"
    )
    now = utcnow().isoformat()
    for n, person in enumerate((IN_A, OTHER_USER)):
        doc = (
            f'{{"id": "old00{n}", "person": "{person.id}", "text": "old {n}", '
            f'"valid_from": "{now}", "created_at": "{now}", "schema_version": 2}}'
        )
        conn.execute(
            "INSERT INTO fact_versions (person, id, live_norm, live, doc) VALUES (?, ?, ?, 1, ?)",
            (person.id, f"old00{n}", f"old {n}", doc),
        )
    conn.commit()
    conn.close()
    store = await SqliteStore.open(path)
    try:
        assert [f.id for f in await store.list_user_facts(IN_DM)] == ["old000"]
        await store.add_fact(IN_DM, "new in the DM")
        assert [f.text for f in await store.list_user_facts(IN_B)] == ["old 0", "new in the DM"]
    finally:
        await store.close()


async def test_mongo_documents_written_before_user_key_get_one(backend: Backend) -> None:
    if backend.name == "sqlite":
        pytest.skip("see test_sqlite_rows_written_before_user_key_get_one")
    store = backend.store
    assert isinstance(store, MongoStore)
    now = utcnow()
    for n, person in enumerate((IN_A, OTHER_USER)):
        await backend.raw_insert(
            "facts",
            {
                "id": f"old00{n}",
                "person": person.id,
                "text": f"old {n}",
                "valid_from": now.isoformat(),
                "created_at": now,
                "live": True,
                "live_norm": f"old {n}",
                "schema_version": FACT_SCHEMA_VERSION,
            },
        )
    assert await store.list_user_facts(IN_DM) == []  # not found before the upgrade
    await store.ensure_indexes()
    assert [f.id for f in await store.list_user_facts(IN_DM)] == ["old000"]
    names = [i["key"] for i in (await store.db["facts"].index_information()).values()]
    assert [("user_key", 1), ("live", 1), ("created_at", 1)] in [list(k) for k in names]


async def test_an_interrupted_mongo_replacement_is_finished_on_a_user_read(
    backend: Backend,
) -> None:
    if backend.name == "sqlite":
        pytest.skip("SQLite replaces in one transaction")
    store = backend.store
    veg = await store.add_fact(IN_A, "Is vegetarian", key="diet")
    now = utcnow()
    await backend.raw_insert(
        "facts",
        {
            "id": "newv01",
            "person": IN_A.id,
            "text": "Eats fish",
            "key": "diet",
            "replaces": [veg.id],
            "valid_from": now.isoformat(),
            "created_at": now,
            "live": True,
            "live_norm": "eats fish",
            "user_key": "discord:42",
            "schema_version": FACT_SCHEMA_VERSION,
        },
    )
    assert [f.id for f in await store.list_user_facts(IN_DM)] == ["newv01"]
    (old,) = [f for f in await store.list_facts(IN_A, history=True) if f.id == veg.id]
    assert (old.live, old.replaced_by) == (False, "newv01")
