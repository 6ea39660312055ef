"""The memory-index contract, run against every backend (SQLite, mongoeco, real MongoDB)."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.keys import PersonKey, TeamKey
from bot.stores.index_mongo import MongoMemoryIndex
from bot.stores.index_sqlite import SqliteMemoryIndex
from bot.stores.memory_index import MemoryEntry, MemoryIndex, MemoryScope
from bot.stores.mongo import MongoStore
from tests.stores.conftest import BACKENDS, REAL_MONGODB_URI

T1, T2 = TeamKey("slack", "T1"), TeamKey("slack", "T2")
ALICE, BOB, CAROL = (PersonKey("slack", "T1", u) for u in ("UA", "UB", "UC"))
GENERAL, SECRET, DM_ALICE = "slack:T1:CGEN", "slack:T1:GSECRET", "slack:T1:DALICE"


@pytest.fixture(params=BACKENDS)
async def index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryIndex]:
    if request.param == "sqlite":
        made = await SqliteMemoryIndex.open(tmp_path / "memory.db")
        try:
            yield made
        finally:
            await made.close()
        return
    uri = REAL_MONGODB_URI if request.param == "mongodb" else None
    uri = uri or request.getfixturevalue("mongoeco_uri")
    db_name = f"t_{uuid.uuid4().hex[:12]}"
    store = await MongoStore.open(uri, db_name)
    try:
        yield await MongoMemoryIndex.open(store.client, db_name)
    finally:
        await store.client.drop_database(db_name)
        await store.close()


def entry(
    eid: str,
    text: str,
    *,
    place: str = GENERAL,
    people: tuple[PersonKey, ...] = (ALICE,),
    private: bool = False,
    team: str = "slack:T1",
    vector: list[float] | None = None,
) -> MemoryEntry:
    return MemoryEntry(
        id=eid,
        team=team,
        place=place,
        session=f"{place}:-",
        private=private,
        people=[p.id for p in people],
        source_ids=[f"{place}:-#{eid}"],
        text=text,
        occurred_at=datetime(2026, 1, 14, 9, 30, tzinfo=UTC),
        embedder="m1" if vector is not None else None,
        vector=vector,
    )


async def test_add_is_idempotent_and_round_trips(index: MemoryIndex) -> None:
    first = entry("e1", "the supplier is Ferreira & Filhos", vector=[0.5, 0.25, -1.0])
    assert await index.add([first, entry("e2", "other")]) == 2
    assert await index.add([first, entry("e3", "third")]) == 1  # e1 never twice

    got = await index.changes(MemoryScope(T1, (GENERAL,)))
    assert [e.id for e in got.entries] == ["e1", "e2", "e3"]
    e1 = got.entries[0]
    assert e1.text == first.text and e1.people == [ALICE.id] and e1.source_ids == first.source_ids
    assert e1.occurred_at == first.occurred_at and e1.kind == "excerpt"
    assert e1.embedder == "m1" and e1.vector == [0.5, 0.25, -1.0]
    assert e1.schema_version >= 1
    stamps = [e.stamp for e in got.entries]
    assert stamps == sorted(stamps) and len(set(stamps)) == 3 and got.cursor == stamps[-1]
    assert [e.id for e in await index.get(T1, ["e3", "nope", "e1"])] == ["e1", "e3"]
    assert await index.get(T2, ["e1"]) == []


async def test_changes_are_incremental(index: MemoryIndex) -> None:
    scope = MemoryScope(T1, (GENERAL,))
    await index.add([entry(f"e{i}", f"text {i}") for i in range(3)])
    first = await index.changes(scope)
    await index.add([entry("late", "later text")])
    second = await index.changes(scope, after=first.cursor)
    # Readers may be handed some already-seen entries again (merge by id), never miss one.
    assert "late" in [e.id for e in second.entries]
    assert {e.id for e in second.entries} <= {"e0", "e1", "e2", "late"}
    assert second.cursor > first.cursor


async def test_scope_filter(index: MemoryIndex) -> None:
    await index.add(
        [
            entry("general", "public talk", people=(ALICE, BOB)),
            entry("secret", "private channel talk", place=SECRET, private=True),
            entry("dm", "alice's dm", place=DM_ALICE, private=True),
            entry("bob_only", "bob alone", people=(BOB,)),
            entry(
                "other_team",
                "elsewhere",
                team="slack:T2",
                place="slack:T2:CGEN",
                people=(PersonKey("slack", "T2", "UA"),),
            ),
        ]
    )

    async def ids(scope: MemoryScope) -> set[str]:
        return {e.id for e in (await index.changes(scope)).entries}

    assert await ids(MemoryScope(T1, (GENERAL,))) == {"general", "bob_only"}
    assert await ids(MemoryScope(T1, (SECRET,))) == {"secret"}
    # A DM with Alice: her DM, and the non-private places she took part in.
    assert await ids(MemoryScope(T1, (DM_ALICE,), ALICE)) == {"dm", "general"}
    assert await ids(MemoryScope(T1, ("slack:T1:DCAROL",), CAROL)) == set()
    assert await ids(MemoryScope(T2, ("slack:T2:CGEN",))) == {"other_team"}


def test_scope_refuses_to_widen() -> None:
    with pytest.raises(ValueError):
        MemoryScope(T1)
    with pytest.raises(ValueError):
        MemoryScope(T1, ("slack:T2:CGEN",))
    with pytest.raises(ValueError):
        MemoryScope(T1, (GENERAL,), PersonKey("slack", "T2", "UA"))
    with pytest.raises(ValueError):
        MemoryScope(T1, ("slack:T1:",))


async def test_bad_entries_are_refused_before_writing(index: MemoryIndex) -> None:
    good = entry("ok", "fine")
    for bad in (
        entry("x", "   "),
        entry("x", "t", place="slack:T2:C"),
        entry("x", "t", people=(PersonKey("slack", "T2", "UA"),)),
        entry("", "t"),
    ):
        with pytest.raises(ValueError):
            await index.add([good, bad])
    assert (await index.changes(MemoryScope(T1, (GENERAL,)))).entries == []


async def test_vectors_are_set_restamped_and_found_missing(index: MemoryIndex) -> None:
    await index.add([entry("a", "alpha"), entry("b", "beta", vector=[1.0, 0.0])])
    missing = await index.missing_vectors("m2", limit=10)
    assert {e.id for e in missing} == {"a", "b"}  # another model's vector counts as missing
    assert [e.id for e in await index.missing_vectors("m1", limit=10)] == ["a"]
    assert await index.missing_vectors("m1", limit=0) == []

    scope = MemoryScope(T1, (GENERAL,))
    before = await index.changes(scope)
    assert await index.set_vectors(T1, "m2", {"a": [0.0, 1.0], "b": [1.0, 1.0]}) == 2
    after = await index.changes(scope, after=before.cursor)
    by_id = {e.id: e for e in after.entries}
    assert by_id["a"].embedder == "m2" and by_id["a"].vector == [0.0, 1.0]
    assert by_id["b"].vector == [1.0, 1.0]
    assert await index.missing_vectors("m2", limit=10) == []
    assert await index.set_vectors(T2, "m2", {"a": [0.0, 0.0]}) == 0  # other team: untouched


async def test_delete_person_and_entries_bump_generation(index: MemoryIndex) -> None:
    await index.add(
        [
            entry("ab", "shared", people=(ALICE, BOB)),
            entry("a", "alice only"),
            entry("b", "bob only", people=(BOB,)),
        ]
    )
    scope = MemoryScope(T1, (GENERAL,))
    gen0 = (await index.changes(scope)).generation
    assert {e.id for e in await index.entries_of_person(ALICE)} == {"ab", "a"}
    assert await index.delete_person(ALICE) == 2
    after = await index.changes(scope)
    assert [e.id for e in after.entries] == ["b"] and after.generation > gen0
    assert await index.entries_of_person(ALICE) == []
    assert await index.delete_entries(T2, ["b"]) == 0
    assert await index.delete_entries(T1, ["b", "nope"]) == 1
    final = await index.changes(scope)
    assert final.entries == [] and final.generation > after.generation
    assert await index.delete_person(ALICE) == 0


async def test_checkpoints_only_move_forward(index: MemoryIndex) -> None:
    assert await index.get_checkpoint("slack:T1:C:-") == 0
    await index.set_checkpoint("slack:T1:C:-", 7)
    await index.set_checkpoint("slack:T1:C:-", 3)
    await index.set_checkpoint("slack:T1:D:-", 2)
    assert await index.get_checkpoint("slack:T1:C:-") == 7
    assert await index.checkpoints() == {"slack:T1:C:-": 7, "slack:T1:D:-": 2}
    assert await index.ping()


def _file_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())


async def test_sqlite_delete_leaves_no_copy_in_the_files(tmp_path: Path) -> None:
    index = await SqliteMemoryIndex.open(tmp_path / "memory.db")
    try:
        await index.add([entry("a", "Ferreira-Filhos-sentinel supplier")])
        await index.delete_person(ALICE)
        await index.compact()
    finally:
        await index.close()
    assert b"Ferreira-Filhos-sentinel" not in _file_bytes(tmp_path)
    conn = sqlite3.connect(tmp_path / "memory.db")
    assert conn.execute("SELECT count(*) FROM memory_entries").fetchone() == (0,)
    conn.close()


async def test_a_dm_sees_the_conversations_its_person_took_part_in(index: MemoryIndex) -> None:
    await index.add(
        [entry("early", "before Bob posted"), entry("secret", "x", place=SECRET, private=True)]
    )
    await index.add_participants(T1, f"{GENERAL}:-", [ALICE.id, BOB.id])
    await index.add_participants(T1, f"{SECRET}:-", [BOB.id])
    await index.add([entry("late", "after Bob posted")])
    bob_dm = MemoryScope(T1, ("slack:T1:DBOB",), BOB)
    got = {e.id for e in (await index.changes(bob_dm)).entries}
    assert got == {"early", "late"}  # his conversation, whoever spoke; never a private place
    carol_dm = MemoryScope(T1, ("slack:T1:DCAROL",), CAROL)
    assert (await index.changes(carol_dm)).entries == []
    with pytest.raises(ValueError):
        await index.add_participants(T2, f"{GENERAL}:-", [BOB.id])
    await index.delete_person(BOB)  # erasure forgets him as a participant too
    assert (await index.changes(bob_dm)).entries == []


# --- erasure and the audience rule (issue 19) --------------------------------------------------


async def test_entries_of_team_lists_every_entry_of_that_team_only(index: MemoryIndex) -> None:
    await index.add([entry("a", "one"), entry("b", "two", place=SECRET, private=True)])
    await index.add([entry("x", "elsewhere", team="slack:T2", place="slack:T2:C9", people=())])
    assert sorted(e.id for e in await index.entries_of_team(T1)) == ["a", "b"]
    assert [e.id for e in await index.entries_of_team(T2)] == ["x"]


async def test_reset_session_drops_its_excerpts_and_rewinds_the_checkpoint(
    index: MemoryIndex,
) -> None:
    kept = entry("memory", "a consolidated memory").model_copy(update={"kind": "memory"})
    await index.add([entry("x1", "an excerpt"), entry("x2", "another"), kept])
    session = f"{GENERAL}:-"
    await index.set_checkpoint(session, 12)
    assert await index.reset_session(T1, session) == 2
    assert [e.id for e in await index.entries_of_team(T1)] == ["memory"]
    assert await index.get_checkpoint(session) == 0
    await index.set_checkpoint(session, 3)  # indexing starts over from the beginning
    assert await index.get_checkpoint(session) == 3


async def test_set_audiences_makes_an_entry_private_to_its_place(index: MemoryIndex) -> None:
    await index.add([entry("cited_bot", "said in a private channel", people=(ALICE, BOB))])
    await index.add_participants(T1, f"{GENERAL}:-", [BOB.id])
    dm_of_bob = MemoryScope(T1, ("slack:T1:DBOB",), BOB)
    assert [e.id for e in (await index.changes(dm_of_bob)).entries] == ["cited_bot"]

    private = f"private:{GENERAL}"
    assert await index.set_audiences(T1, {"cited_bot": private, "missing": "public"}) == 1
    (stored,) = await index.get(T1, ["cited_bot"])
    assert stored.audience == private and stored.private
    assert (await index.changes(dm_of_bob)).entries == []  # filtered in the query now
    assert [e.id for e in (await index.changes(MemoryScope(T1, (GENERAL,)))).entries] == [
        "cited_bot"
    ]


ALICE_T2 = PersonKey("slack", "T2", "UA")


async def test_entries_are_found_by_the_messages_they_were_drawn_from(index: MemoryIndex) -> None:
    session = f"{GENERAL}:-"
    both = entry("both", "two turns").model_copy(
        update={"source_ids": [f"{session}#3", f"{session}#5"]}
    )
    spans = entry("spans", "across sessions").model_copy(
        update={"session": "", "source_ids": [f"{session}#5", f"{SECRET}:-#1"]}
    )
    other_team = entry(
        "t2", "elsewhere", team="slack:T2", place="slack:T2:CGEN", people=(ALICE_T2,)
    ).model_copy(update={"source_ids": ["slack:T2:CGEN:-#5"]})
    await index.add([entry("3", "three"), both, spans, entry("9", "nine"), other_team])
    found = await index.entries_from_sources(T1, [f"{session}#5", f"{session}#404"])
    assert [e.id for e in found] == ["both", "spans"]  # oldest stamp first
    assert [e.id for e in await index.entries_from_sources(T1, [f"{session}#3"])] == ["3", "both"]
    assert await index.entries_from_sources(T1, []) == []
    assert await index.entries_from_sources(T1, [f"{session}#9x"]) == []
    assert await index.entries_from_sources(T2, [f"{session}#5"]) == []  # per team
    assert [e.id for e in await index.entries_from_sources(T2, ["slack:T2:CGEN:-#5"])] == ["t2"]


async def test_entries_without_an_audience_are_found_by_the_query(index: MemoryIndex) -> None:
    settled = entry("settled", "has one").model_copy(update={"audience": "public"})
    await index.add([entry("legacy", "written before"), settled])
    legacy = await index.entries_of_team(T1, without_audience=True)
    assert [e.id for e in legacy] == ["legacy"]
    await index.set_audiences(T1, {"legacy": "public"})
    assert await index.entries_of_team(T1, without_audience=True) == []
