"""The heard-messages record (`bot.stores.heard`): one contract, both backends (its own SQLite
file; a MongoDB database served by mongoeco)."""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from bot.messages import HeardMessage
from bot.stores.heard import (
    CUT_NOTE,
    MAX_AGE,
    MAX_FILES,
    MAX_TEXT,
    PER_PLACE,
    HeardStore,
    Mark,
    bounded,
    page_key,
)
from bot.stores.heard_mongo import MongoHeardStore
from bot.stores.heard_sqlite import SqliteHeardStore
from bot.stores.mongo import MongoStore

PUBLIC = "public"
PRIVATE = "private:slack:T1:G1"
NOW = time.time()


@pytest.fixture(params=["sqlite", "mongoeco"])
async def heard(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[HeardStore]:
    if request.param == "sqlite":
        made: HeardStore = await SqliteHeardStore.open(tmp_path / "heard.db")
        try:
            yield made
        finally:
            await made.close()
        return
    name = f"t_{uuid.uuid4().hex[:12]}"
    store = await MongoStore.open(request.getfixturevalue("mongoeco_uri"), name)
    try:
        yield await MongoHeardStore.open(store.client, name)
    finally:
        await store.client.drop_database(name)
        await store.close()


def said(
    n: int,
    *,
    channel: str = "C1",
    thread: str = "",
    author: str = "U1",
    text: str | None = None,
    audience: str = PUBLIC,
    bot: bool = False,
    at: float | None = None,
    team: str = "T1",
) -> HeardMessage:
    return HeardMessage(
        platform="slack",
        team=team,
        channel=channel,
        thread=thread,
        message_id=f"{1000 + n}.000100",
        author=author,
        text=f"message number {n}" if text is None else text,
        at=NOW - 3600 + n if at is None else at,
        audience=audience,
        name=f"name {author}",
        bot=bot,
        files=(f"file{n}.pdf",),
    )


async def recent(store: HeardStore, thread: str = "", **kw: object) -> list[HeardMessage]:
    args: dict[str, object] = {
        "audiences": (PUBLIC,),
        "before": NOW + 1,
        "after": NOW - MAX_AGE,
        "limit": 50,
    }
    args.update(kw)
    return await store.recent("slack", "T1", "C1", thread, **args)  # type: ignore[arg-type]


async def test_records_round_trip_oldest_first_within_their_place(heard: HeardStore) -> None:
    records = [said(3), said(1), said(2, thread="1001.000100"), said(4, channel="C2")]
    assert await heard.add(records) == 4
    assert await recent(heard) == [said(1), said(3)]  # whole records, oldest first
    assert await recent(heard, "1001.000100") == [said(2, thread="1001.000100")]
    assert await recent(heard, limit=1) == [said(3)]  # the newest ones when limited


async def test_reading_filters_by_audience_and_time(heard: HeardStore) -> None:
    await heard.add([said(1), said(2, audience=PRIVATE), said(3)])
    assert [r.text for r in await recent(heard)] == ["message number 1", "message number 3"]
    both = await recent(heard, audiences=(PUBLIC, PRIVATE))
    assert len(both) == 3
    assert await recent(heard, audiences=()) == []
    assert [r.text for r in await recent(heard, before=said(3).at - 0.5)] == ["message number 1"]
    assert len(await recent(heard, before=said(3).at)) == 2  # up to that instant, inclusive
    assert [r.text for r in await recent(heard, after=said(1).at)] == ["message number 3"]


async def test_the_same_message_heard_twice_is_one_record_the_latest_kept(
    heard: HeardStore,
) -> None:
    await heard.add([said(1)])
    await heard.add([said(1, text="changed")])
    assert [r.text for r in await recent(heard)] == ["changed"]
    assert await heard.count() == 1


async def test_a_place_keeps_its_newest_records_only(heard: HeardStore) -> None:
    await heard.add([said(n) for n in range(PER_PLACE + 30)])
    await heard.add([said(n, thread="T") for n in range(5)])  # another place: untouched
    kept = await recent(heard, limit=PER_PLACE + 50)
    assert [r.message_id for r in kept] == [said(n).message_id for n in range(30, PER_PLACE + 30)]
    assert len(await recent(heard, "T")) == 5


async def test_prune_drops_records_kept_too_long_by_when_they_were_written(
    heard: HeardStore,
) -> None:
    """A message's own time (a platform clock may be off) does not decide: a record is kept
    `MAX_AGE` from when it was written."""
    await heard.add([said(1, at=NOW - 30 * MAX_AGE), said(2)])
    assert await heard.prune(time.time()) == 0
    assert len(await heard.by_author("slack", "T1", "U1")) == 2
    assert await heard.prune(time.time() + MAX_AGE + 60) == 2
    assert await heard.count() == 0


async def test_marks_keep_the_earliest_time_and_are_cleared(heard: HeardStore) -> None:
    assert await heard.since("slack", "T1", "C1", "") is None
    await heard.mark([Mark("slack", "T1", "C1", "", 50.0)])
    await heard.mark([Mark("slack", "T1", "C1", "", 70.0), Mark("slack", "T1", "C1", "9.1", 80.0)])
    assert await heard.since("slack", "T1", "C1", "") == 50.0
    assert await heard.since("slack", "T1", "C1", "9.1") == 80.0
    assert await heard.since("slack", "T2", "C1", "") is None
    await heard.clear_marks()
    assert await heard.since("slack", "T1", "C1", "") is None


async def test_find_and_delete_by_platform_id_in_a_channel_or_the_team(heard: HeardStore) -> None:
    await heard.add([said(1), said(2, channel="C2"), said(3)])
    ids = [said(1).message_id, said(2).message_id]
    assert [r.channel for r in await heard.find("slack", "T1", None, ids)] == ["C1", "C2"]
    assert [r.channel for r in await heard.find("slack", "T1", "C2", ids)] == ["C2"]
    assert await heard.find("slack", "T9", None, ids) == []
    assert await heard.delete("slack", "T1", "C2", ids) == 1
    assert await heard.delete("slack", "T1", None, ids) == 1
    assert [r.text for r in await recent(heard)] == ["message number 3"]


async def test_rewrite_replaces_the_text_only(heard: HeardStore) -> None:
    await heard.add([said(1)])
    assert await heard.rewrite([replace(said(1), text="edited words")]) == 1
    assert await heard.rewrite([replace(said(9), text="nothing there")]) == 0
    (record,) = await recent(heard)
    assert record == replace(said(1), text="edited words")


async def test_a_persons_records_are_listed_and_erased_in_their_team_only(
    heard: HeardStore,
) -> None:
    await heard.add([said(1), said(2, author="U2"), said(3, team="T2"), said(4, channel="C2")])
    mine = await heard.by_author("slack", "T1", "U1")
    assert [r.message_id for r in mine] == [said(1).message_id, said(4).message_id]
    assert await heard.delete_author("slack", "T1", "U1") == 2
    assert await heard.by_author("slack", "T1", "U1") == []
    assert len(await heard.by_author("slack", "T2", "U1")) == 1
    assert len(await heard.by_author("slack", "T1", "U2")) == 1


async def test_bot_records_page_in_key_order(heard: HeardStore) -> None:
    bots = [said(n, author="B1", bot=True, channel=f"C{n % 3}") for n in range(7)]
    await heard.add([*bots, said(50)])
    seen: list[HeardMessage] = []
    after = ""
    while page := await heard.bot_records("slack", "T1", after=after, limit=3):
        seen += page
        after = page_key(page[-1])
    assert sorted(r.message_id for r in seen) == sorted(b.message_id for b in bots)
    assert [page_key(r) for r in seen] == sorted(page_key(r) for r in seen)


async def test_erased_words_leave_the_sqlite_file(tmp_path: Path) -> None:
    store = await SqliteHeardStore.open(tmp_path / "heard.db")
    try:
        await store.add([said(1, text="my locker code is zebra-4417")])
        await store.compact()
        await store.delete_author("slack", "T1", "U1")
        await store.compact()
    finally:
        await store.close()
    assert b"zebra-4417" not in (tmp_path / "heard.db").read_bytes()
    conn = sqlite3.connect(tmp_path / "heard.db")
    try:
        assert conn.execute("SELECT count(*) FROM heard").fetchone() == (0,)
    finally:
        conn.close()


def test_bounded_cuts_text_and_files_and_refuses_bad_ids() -> None:
    big = replace(said(1), text="x" * (MAX_TEXT * 50), files=tuple(f"f{i}" for i in range(99)))
    cut = bounded(big)
    assert cut is not None and len(cut.text) == MAX_TEXT and cut.text.endswith(CUT_NOTE)
    assert len(cut.files) == MAX_FILES
    assert bounded(said(1)) == said(1)
    for bad in ("", "a:b", "x" * 500, "has space"):
        assert bounded(replace(said(1), channel=bad)) is None
        assert bounded(replace(said(1), message_id=bad)) is None
        assert bounded(replace(said(1), author=bad)) is None
    assert bounded(replace(said(1), thread="a:b")) is None
