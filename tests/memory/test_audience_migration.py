"""Index entries written before the audience rule get the audience of their sources at start
(`bot.memory.episodic.audiences`): the case the issue found, a consolidated memory of a private
channel that cited only the bot's reply (which carried no privacy flag) and was recalled in
other people's DMs."""

from __future__ import annotations

from pathlib import Path

from bot.keys import PersonKey, SessionKey, TeamKey
from bot.memory.episodic.audiences import settle_audiences
from bot.stores.index_sqlite import SqliteMemoryIndex
from bot.stores.memory_index import MemoryEntry, MemoryScope
from bot.stores.records import NewMessage
from bot.stores.sqlite import SqliteStore

T1 = TeamKey("slack", "T1")
ALICE, BOB = PersonKey("slack", "T1", "UA"), PersonKey("slack", "T1", "UB")
PRIVATE = SessionKey("slack", "T1", "G1")
PUBLIC = SessionKey("slack", "T1", "C1")


def legacy(eid: str, session: SessionKey, sources: list[str], kind: str = "memory") -> MemoryEntry:
    return MemoryEntry(
        id=eid,
        kind=kind,  # type: ignore[arg-type]
        team=T1.id,
        place=f"slack:T1:{session.channel}",
        session=session.id,
        private=False,  # what the old code wrote when only the bot's reply was cited
        people=[ALICE.id, BOB.id],
        source_ids=sources,
        text=f"text of {eid}",
    )


async def test_legacy_entries_take_their_sources_audience(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "bot.db")
    index = await SqliteMemoryIndex.open(tmp_path / "memory.db")
    try:
        # Messages as the old turn wrote them: only the person's message flags the place.
        await store.append(
            PRIVATE,
            [
                NewMessage(
                    role="user",
                    content="the merger is off",
                    speaker=ALICE.id,
                    turn_id="t1",
                    meta={"private_place": True},
                ),
                NewMessage(role="assistant", content="noted", speaker=ALICE.id, turn_id="t1"),
            ],
        )
        await store.append(
            PUBLIC,
            [NewMessage(role="user", content="lunch at noon", speaker=BOB.id, turn_id="t2")],
        )
        await index.add(
            [
                legacy("cites_bot", PRIVATE, [f"{PRIVATE.id}#2"]),
                legacy("public", PUBLIC, [f"{PUBLIC.id}#1"], kind="excerpt"),
                legacy("gone", PUBLIC, [f"{PUBLIC.id}#99"]),
            ]
        )
        await index.add_participants(T1, PRIVATE.id, [BOB.id])
        await index.add_participants(T1, PUBLIC.id, [BOB.id])
        bobs_dm = MemoryScope(T1, ("slack:T1:DB",), BOB)
        before = {e.id for e in (await index.changes(bobs_dm)).entries}
        assert before == {"cites_bot", "public", "gone"}  # the leak

        assert await settle_audiences(store, index) == 3
        after = {e.id: e for e in await index.entries_of_team(T1)}
        assert after["cites_bot"].audience == f"dm:{PRIVATE.team_key.id}:G1"
        assert after["cites_bot"].private
        assert after["public"].audience == "public" and not after["public"].private
        assert after["gone"].private  # sources unknown: the narrowest
        assert {e.id for e in (await index.changes(bobs_dm)).entries} == {"public"}
        assert await settle_audiences(store, index) == 0  # settled once
    finally:
        await index.close()
        await store.close()
