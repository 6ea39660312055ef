"""Fact versions: the contract both stores keep (run on SQLite, mongoeco, real MongoDB)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from bot.audience import UNKNOWN_FACT
from bot.keys import PersonKey, SessionKey
from bot.stores.mongo import MongoStore
from bot.stores.protocols import StaleFact, Store
from bot.stores.records import FACT_SCHEMA_VERSION, Fact, utcnow
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


# --- audiences (DESIGN, conversation behaviour: the audience rule) ----------------------------

PUBLIC = "public"
IN_G1 = "private:slack:T1:G1"
IN_G2 = "private:slack:T1:G2"
IN_DM = "dm:slack:T1:D1"


async def test_audience_is_stored_and_filters_the_query(store: Store) -> None:
    pub = await store.add_fact(ALICE, "Prefers celsius", audience=PUBLIC)
    g1 = await store.add_fact(ALICE, "Allergic to cashews", audience=IN_G1)
    dm = await store.add_fact(ALICE, "Lives in Tromso", audience=IN_DM)
    unset = await store.add_fact(ALICE, "Likes jazz")  # no audience given: the narrowest
    await store.add_fact(BOB, "Prefers fahrenheit", audience=PUBLIC)
    assert (pub.audience, g1.audience, dm.audience, unset.audience) == (
        PUBLIC,
        IN_G1,
        IN_DM,
        UNKNOWN_FACT,
    )
    assert [f.id for f in await store.list_facts(ALICE)] == [pub.id, g1.id, dm.id, unset.id]
    assert [f.audience for f in await store.list_facts(ALICE)] == [PUBLIC, IN_G1, IN_DM, "dm:?"]
    assert [f.id for f in await store.list_facts(ALICE, audiences=[PUBLIC])] == [pub.id]
    assert [f.id for f in await store.list_facts(ALICE, audiences=(PUBLIC, IN_G1))] == [
        pub.id,
        g1.id,
    ]
    assert [f.id for f in await store.list_facts(ALICE, audiences=(PUBLIC, IN_G2))] == [pub.id]
    assert await store.list_facts(ALICE, audiences=()) == []
    # History is filtered the same way: a closed version of a DM fact stays out of a channel.
    await store.replace_fact(ALICE, dm.id, "Lives in Oslo", audience=IN_DM)
    history = await store.list_facts(ALICE, history=True, audiences=(PUBLIC, IN_G1))
    assert [f.text for f in history] == ["Prefers celsius", "Allergic to cashews"]


async def test_a_replacement_carries_its_own_audience(store: Store) -> None:
    said_in_dm = await store.add_fact(ALICE, "Is vegetarian", key="diet", audience=IN_DM)
    now_public = await store.replace_fact(
        ALICE, said_in_dm.id, "Eats fish", key="diet", audience=PUBLIC
    )
    assert now_public is not None and now_public.audience == PUBLIC
    assert [f.text for f in await store.list_facts(ALICE, audiences=[PUBLIC])] == ["Eats fish"]
    (old,) = [f for f in await store.list_facts(ALICE, history=True) if not f.live]
    assert old.audience == IN_DM


async def test_the_same_fact_for_two_audiences_is_two_facts(store: Store) -> None:
    """Said in two places that do not see each other, a fact is kept for each; within one
    audience it is stored once."""
    in_g1 = await store.add_fact(ALICE, "Likes tea", audience=IN_G1)
    in_g2 = await store.add_fact(ALICE, "likes tea.", audience=IN_G2)
    assert in_g1.id != in_g2.id
    assert (await store.add_fact(ALICE, "LIKES TEA", audience=IN_G1)).id == in_g1.id
    assert [f.id for f in await store.list_facts(ALICE, audiences=[PUBLIC, IN_G2])] == [in_g2.id]
    merged = await store.replace_fact(ALICE, in_g1.id, "Likes tea", audience=IN_G2)
    assert merged is not None and merged.id == in_g2.id  # already live for that audience
    assert [f.id for f in await store.list_facts(ALICE)] == [in_g2.id]


async def test_a_fact_stored_without_an_audience_is_the_narrowest(backend: Backend) -> None:
    """A version written before facts carried an audience (by an older process, after the
    store's own upgrade ran) is read as the narrowest: listed unfiltered, never by a filter."""
    store = backend.store
    now = utcnow()
    doc = {
        "id": "old001",
        "person": ALICE.id,
        "text": "Likes jazz",
        "valid_from": now.isoformat(),
        "created_at": now.isoformat(),
        "schema_version": 2,
    }
    if isinstance(store, SqliteStore):
        conn = sqlite3.connect(store.path)
        conn.execute(
            "INSERT INTO fact_versions (person, id, live_norm, live, doc, user_key) "
            "VALUES (?, 'old001', 'likes jazz', 1, ?, 'slack:U1')",
            (ALICE.id, json.dumps(doc)),
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
                "live_norm": "likes jazz",
                "user_key": "slack:U1",
            },
        )
    (fact,) = await store.list_facts(ALICE)
    assert (fact.id, fact.audience, fact.schema_version) == (
        "old001",
        UNKNOWN_FACT,
        FACT_SCHEMA_VERSION,
    )
    assert await store.list_facts(ALICE, audiences=[PUBLIC, IN_G1]) == []
    assert await store.list_user_facts(ALICE, audiences=[PUBLIC]) == []
    assert [f.id for f in await store.list_user_facts(ALICE)] == ["old001"]


def _legacy_fact(n: int, text: str, refs: list[str], *, live: bool = True) -> dict[str, object]:
    now = utcnow().isoformat()
    return {
        "id": f"leg00{n}",
        "person": ALICE.id,
        "text": text,
        "source_messages": refs,
        "valid_from": now,
        "created_at": now,
        "valid_to": None if live else now,
        "schema_version": 2,
    }


LEGACY_MESSAGES = [
    # (session, seq, meta): written by turns before and after messages carried their audience
    ("slack:T1:C1:-", 1, {"audience": "public"}),
    ("slack:T1:G1:-", 1, {"audience": IN_G1}),
    ("slack:T1:G9:-", 1, {"private_place": True}),  # private channel or DM: unknown which
    ("slack:T1:C2:-", 1, {}),  # no flag: said in a public channel
]
LEGACY_FACTS = [
    (_legacy_fact(1, "Prefers celsius", ["slack:T1:C1:-#1"]), PUBLIC),
    (_legacy_fact(2, "Allergic to cashews", ["slack:T1:G1:-#1"]), IN_G1),
    (_legacy_fact(3, "Lives in Tromso", ["slack:T1:G9:-#1"]), "dm:slack:T1:G9"),
    (_legacy_fact(4, "Likes jazz", ["slack:T1:C2:-#1"]), PUBLIC),
    (_legacy_fact(5, "Likes blues", ["slack:T1:C2:-#1", "slack:T1:G1:-#1"]), IN_G1),
    (_legacy_fact(6, "Plays chess", ["slack:T1:C1:-#7"]), UNKNOWN_FACT),  # message gone
    (_legacy_fact(7, "Has a dog", []), UNKNOWN_FACT),
    (_legacy_fact(8, "Had a cat", ["slack:T1:C1:-#1"], live=False), PUBLIC),
]


def _check_settled(facts: list[Fact]) -> None:
    assert {f.id: f.audience for f in facts} == {
        str(doc["id"]): audience for doc, audience in LEGACY_FACTS
    }


async def test_sqlite_facts_stored_before_audiences_get_theirs_from_their_messages(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bot.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE fact_versions (n INTEGER PRIMARY KEY, person TEXT NOT NULL, "
        "id TEXT NOT NULL, live_norm TEXT NOT NULL, live INTEGER NOT NULL, doc TEXT NOT NULL, "
        "user_key TEXT, UNIQUE (person, id), UNIQUE (person, live_norm));"
        "CREATE TABLE messages (session TEXT NOT NULL, seq INTEGER NOT NULL, "
        "speaker TEXT NOT NULL, doc TEXT NOT NULL, UNIQUE (session, seq));"
    )
    for session, seq, meta in LEGACY_MESSAGES:
        doc = {"session": session, "seq": seq, "role": "user", "content": "x", "meta": meta}
        conn.execute(
            "INSERT INTO messages VALUES (?, ?, ?, ?)", (session, seq, ALICE.id, json.dumps(doc))
        )
    for doc, _ in LEGACY_FACTS:
        live = doc["valid_to"] is None
        conn.execute(
            "INSERT INTO fact_versions (person, id, live_norm, live, doc, user_key) "
            "VALUES (?, ?, ?, ?, ?, 'slack:U1')",
            (
                ALICE.id,
                doc["id"],
                str(doc["text"]).lower() if live else f"~{doc['id']}",
                int(live),
                json.dumps(doc),
            ),
        )
    conn.commit()
    conn.close()
    store = await SqliteStore.open(path)
    try:
        _check_settled(await store.list_facts(ALICE, history=True))
        public = await store.list_facts(ALICE, audiences=[PUBLIC])
        assert [f.text for f in public] == ["Prefers celsius", "Likes jazz"]
        # The live key took the audience: the same text for that audience is the same fact.
        assert (await store.add_fact(ALICE, "likes jazz", audience=PUBLIC)).id == "leg004"
    finally:
        await store.close()
    again = await SqliteStore.open(path)  # a second start changes nothing
    try:
        _check_settled(await again.list_facts(ALICE, history=True))
    finally:
        await again.close()


async def test_an_interrupted_replacement_into_another_audience_is_finished_on_a_filtered_read(
    backend: Backend,
) -> None:
    """The replacement (said in a DM) landed, the close of the public version did not: a read
    of the public facts alone must not show the old version live."""
    if backend.name == "sqlite":
        pytest.skip("SQLite replaces in one transaction")
    store = backend.store
    veg = await store.add_fact(ALICE, "Is vegetarian", key="diet", audience=PUBLIC)
    now = utcnow()
    await backend.raw_insert(
        "facts",
        {
            "id": "newv02",
            "person": ALICE.id,
            "text": "Eats fish",
            "key": "diet",
            "replaces": [veg.id],
            "audience": IN_DM,
            "valid_from": now.isoformat(),
            "created_at": now,
            "live": True,
            "live_norm": f"{IN_DM}|eats fish",
            "user_key": "slack:U1",
            "schema_version": FACT_SCHEMA_VERSION,
        },
    )
    assert await store.list_facts(ALICE, audiences=[PUBLIC]) == []
    (old,) = [f for f in await store.list_facts(ALICE, history=True) if f.id == veg.id]
    assert (old.live, old.replaced_by) == (False, "newv02")


async def test_mongo_facts_stored_before_audiences_get_theirs_from_their_messages(
    backend: Backend,
) -> None:
    if backend.name == "sqlite":
        pytest.skip("see test_sqlite_facts_stored_before_audiences_get_theirs_from_their_messages")
    store = backend.store
    assert isinstance(store, MongoStore)
    for session, seq, meta in LEGACY_MESSAGES:
        await backend.raw_insert(
            "messages",
            {"session": session, "seq": seq, "speaker": ALICE.id, "role": "user", "meta": meta},
        )
    for doc, _ in LEGACY_FACTS:
        live = doc["valid_to"] is None
        await backend.raw_insert(
            "facts",
            {
                **doc,
                "created_at": utcnow(),
                "live": live,
                "live_norm": str(doc["text"]).lower() if live else f"~{doc['id']}",
                "user_key": "slack:U1",
            },
        )
    await store.ensure_indexes()
    _check_settled(await store.list_facts(ALICE, history=True))
    public = await store.list_facts(ALICE, audiences=[PUBLIC])
    assert [f.text for f in public] == ["Prefers celsius", "Likes jazz"]
    assert (await store.add_fact(ALICE, "likes jazz", audience=PUBLIC)).id == "leg004"


async def test_the_sqlite_audience_filter_uses_its_index(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "bot.db")
    await store.close()
    conn = sqlite3.connect(tmp_path / "bot.db")
    try:
        sql = (
            "SELECT doc FROM fact_versions WHERE person = ? AND live = 1 "
            "AND audience IN (?, ?) ORDER BY n"
        )
        plan = " ".join(str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, "xyz"))
        assert "USING INDEX fact_versions_audience" in plan, plan
    finally:
        conn.close()
