"""The record of heard messages (`bot.memory.heard.Hearing`) on its real SQLite store: what a
turn is shown, coverage and the one platform call, the audience rule, bounds on what arrives,
erasure and deletes (waiting records included), a store that is down."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.keys import PersonKey, TeamKey
from bot.memory.copies import WordCutter
from bot.memory.heard import CONTEXT_CHARS, MAX_PENDING, Hearing, readable_in
from bot.messages import FetchEarlier, HeardMessage, IncomingMessage, MessageRef
from bot.stores.heard import MAX_TEXT
from bot.stores.heard_sqlite import SqliteHeardStore
from bot.stores.protocols import StoreUnavailable

T0 = 1_800_000_000.0
PRIVATE = "private:slack:T1:G1"


@pytest.fixture
async def hearing(tmp_path: Path) -> AsyncIterator[Hearing]:
    made = Hearing(await SqliteHeardStore.open(tmp_path / "heard.db"), flush_delay=0.01)
    try:
        yield made
    finally:
        await made.close()


def heard(
    n: int,
    text: str,
    *,
    channel: str = "C1",
    thread: str = "",
    author: str = "U2",
    audience: str = "public",
    bot: bool = False,
) -> HeardMessage:
    return HeardMessage(
        platform="slack",
        team="T1",
        channel=channel,
        thread=thread,
        message_id=f"{T0 + n:.6f}",
        author=author,
        text=text,
        at=T0 + n,
        audience=audience,
        name=f"person {author}",
        bot=bot,
    )


def mention(
    n: int,
    *,
    channel: str = "C1",
    thread: str | None = None,
    private: bool = False,
    earlier: FetchEarlier | None = None,
) -> IncomingMessage:
    ts = f"{T0 + n:.6f}"
    return IncomingMessage(
        platform="slack",
        team="T1",
        channel=channel,
        thread=thread or ts,
        user="U1",
        text="what now?",
        message_id=ts,
        is_private=private,
        sent_at=datetime.fromtimestamp(T0 + n, UTC),
        earlier=earlier,
    )


class Platform:
    """Stands for the adapter's one platform call (`IncomingMessage.earlier`): counts calls."""

    def __init__(self, answer: list[HeardMessage] | None) -> None:
        self.answer = answer
        self.calls = 0

    async def __call__(self, limit: int) -> list[HeardMessage] | None:
        self.calls += 1
        return self.answer


async def test_a_thread_heard_from_its_start_is_shown_and_asks_nothing(hearing: Hearing) -> None:
    hearing.hear(heard(1, "where do we meet?"))
    hearing.hear(heard(2, "at the station", thread=f"{T0 + 1:.6f}", author="U3"))
    hearing.hear(heard(3, "alert: train late", thread=f"{T0 + 1:.6f}", author="B1", bot=True))
    platform = Platform([])
    shown = await hearing.earlier(mention(4, thread=f"{T0 + 1:.6f}", earlier=platform))
    assert [r.text for r in shown.records] == [
        "where do we meet?",
        "at the station",
        "alert: train late",
    ]
    assert platform.calls == 0 and not shown.fetched
    assert "in this thread" in shown.text and "person B1 (a bot): alert: train late" in shown.text
    assert shown.text.index("where do we meet?") < shown.text.index("at the station")


async def test_without_coverage_the_platform_is_asked_once_and_what_it_gave_is_kept(
    hearing: Hearing,
) -> None:
    thread = f"{T0 + 1:.6f}"
    given = [heard(1, "root said"), heard(2, "reply said", thread=thread)]
    # What the adapter hands back is placed and scoped by the core, whatever it claims.
    claimed = [replace(r, channel="C9", audience="private:x:y:z") for r in given]
    platform = Platform(claimed)
    first = await hearing.earlier(mention(5, thread=thread, earlier=platform))
    assert [r.text for r in first.records] == ["root said", "reply said"] and first.fetched
    second = await hearing.earlier(mention(6, thread=thread, earlier=platform))
    assert [r.text for r in second.records] == ["root said", "reply said"]
    assert platform.calls == 1 and not second.fetched


async def test_a_refused_or_failing_platform_call_shows_nothing_and_never_raises(
    hearing: Hearing,
) -> None:
    thread = f"{T0 + 1:.6f}"
    refused = Platform(None)
    assert (await hearing.earlier(mention(5, thread=thread, earlier=refused))).text == ""
    assert (await hearing.earlier(mention(6, thread=thread, earlier=refused))).text == ""
    assert refused.calls == 1  # a refusal (Slack's 429) is not asked again at once

    async def broken(limit: int) -> list[HeardMessage] | None:
        raise RuntimeError("adapter bug")

    other = f"{T0 + 2:.6f}"
    assert (await hearing.earlier(mention(6, thread=other, earlier=broken))).text == ""
    junk = Platform([heard(1, "fine"), "not a record", heard(2, "x", channel="a:b")])  # type: ignore[list-item]
    third = f"{T0 + 3:.6f}"
    shown = await hearing.earlier(mention(7, channel="C5", thread=third, earlier=junk))
    assert [r.text for r in shown.records] == ["fine", "x"]  # the place is the mention's


async def test_a_top_level_mention_never_asks_the_platform(hearing: Hearing) -> None:
    platform = Platform([heard(1, "from the platform")])
    hearing.hear(heard(2, "heard here"))
    shown = await hearing.earlier(mention(3, earlier=platform))
    assert [r.text for r in shown.records] == ["heard here"] and platform.calls == 0
    assert "in this channel" in shown.text


async def test_a_private_places_records_are_never_shown_in_a_public_one(hearing: Hearing) -> None:
    """A channel turned public keeps its private past to itself; a private one reads both."""
    hearing.hear(heard(1, "secret plan", channel="G1", audience=PRIVATE))
    hearing.hear(heard(2, "public note", channel="G1"))
    public = await hearing.earlier(mention(3, channel="G1", earlier=Platform([])))
    assert [r.text for r in public.records] == ["public note"]
    private = await hearing.earlier(mention(3, channel="G1", private=True))
    assert [r.text for r in private.records] == ["secret plan", "public note"]
    assert readable_in(mention(1, private=True).audience) == ("public", PRIVATE.replace("G1", "C1"))


async def test_dms_and_messages_already_in_the_conversation_are_left_out(
    hearing: Hearing,
) -> None:
    hearing.hear(heard(1, "already answered"))
    hearing.hear(heard(2, "only heard"))
    dm = replace(mention(3), is_dm=True)
    assert (await hearing.earlier(dm)).text == ""
    from bot.stores.records import StoredMessage

    stored = StoredMessage(
        session="slack:T1:C1:-",
        seq=1,
        role="user",
        content="already answered",
        speaker="slack:T1:U2",
        turn_id="t1",
        meta={"message_id": f"{T0 + 1:.6f}"},
    )
    shown = await hearing.earlier(mention(3), [stored])
    assert [r.text for r in shown.records] == ["only heard"]


async def test_what_a_turn_is_shown_is_bounded_newest_kept(hearing: Hearing) -> None:
    for n in range(300):
        hearing.hear(heard(n, f"line {n} " + "x" * (MAX_TEXT * 3)))
    shown = await hearing.earlier(mention(400))
    assert len(shown.text) <= CONTEXT_CHARS + 400
    assert "line 299 " in shown.text and "line 0 " not in shown.text
    assert all(len(r.text) <= MAX_TEXT for r in shown.records)


async def test_waiting_records_are_bounded_when_the_store_cannot_take_them(
    tmp_path: Path,
) -> None:
    store = await SqliteHeardStore.open(tmp_path / "heard.db")
    hearing = Hearing(store, flush_delay=3600)
    for n in range(MAX_PENDING + 500):
        hearing.hear(heard(n, "spam"))
    assert hearing.dropped == 500
    await store.close()  # down: the records wait, nothing raises at the caller
    with pytest.raises(StoreUnavailable):
        await hearing.flush()
    assert (await hearing.earlier(mention(MAX_PENDING + 900))).text == ""  # never raises


async def test_erasure_takes_the_persons_records_waiting_or_stored_and_cuts_bot_quotes(
    hearing: Hearing, tmp_path: Path
) -> None:
    hearing.hear(heard(1, "my badge number is 77123-delta", author="U3"))
    await hearing.flush()
    hearing.hear(heard(2, "and my desk is 4B by the window", author="U3"))  # still waiting
    hearing.hear(heard(3, "Relay: my badge number is 77123-delta", author="B1", bot=True))
    hearing.hear(heard(4, "unrelated words", author="U4"))
    person = PersonKey("slack", "T1", "U3")
    words = await hearing.words_of(person)
    assert len(words) == 2
    assert await hearing.erase_person(person) == 2
    await hearing.cut_words(TeamKey("slack", "T1"), WordCutter.of(words))
    await hearing.flush()
    await hearing.compact()
    conn = sqlite3.connect(tmp_path / "heard.db")
    try:
        texts = [json.loads(r[0])["text"] for r in conn.execute("SELECT doc FROM heard")]
    finally:
        conn.close()
    assert "unrelated words" in texts and len(texts) == 2
    assert any(t.startswith("Relay:") for t in texts)  # the bot's post, the quote cut out
    assert not any("77123-delta" in t for t in texts)
    assert b"77123-delta" not in (tmp_path / "heard.db").read_bytes()


async def test_deletes_and_edits_reach_waiting_and_stored_records(hearing: Hearing) -> None:
    hearing.hear(heard(1, "stored then deleted"))
    hearing.hear(heard(2, "stored then edited"))
    await hearing.flush()
    hearing.hear(heard(3, "waiting then deleted"))
    ref = MessageRef("slack", "T1", (), channel="C1")
    ids = [f"{T0 + n:.6f}" for n in (1, 3)]
    gone = await hearing.deleted(ref, ids)
    assert sorted(r.text for r in gone) == ["stored then deleted", "waiting then deleted"]
    assert await hearing.edited(ref, [f"{T0 + 2:.6f}"], "now edited") == 1
    assert await hearing.deleted(replace(ref, channel="C2"), [f"{T0 + 2:.6f}"]) == []
    shown = await hearing.earlier(mention(9))
    assert [r.text for r in shown.records] == ["now edited"]


async def test_hearing_never_raises_on_bad_input_and_is_cheap_to_call(hearing: Hearing) -> None:
    for bad in (
        heard(1, "x", channel=""),
        heard(1, "x", channel="a" * 5000),
        replace(heard(1, "x"), text=None),  # type: ignore[arg-type]
        replace(heard(1, "x"), at="soon"),  # type: ignore[arg-type]
        replace(heard(1, "x"), message_id="1:2"),
    ):
        hearing.hear(bad)
    hearing.hear(
        replace(heard(2, "x" * 5_000_000), files=tuple("f" * 10_000 for _ in range(10_000)))
    )
    await asyncio.sleep(0.05)  # the background write runs
    shown = await hearing.earlier(mention(3))
    (record,) = shown.records
    assert len(record.text) == MAX_TEXT and len(record.files) == 10


async def test_heard_messages_reach_the_store_without_a_turn(hearing: Hearing) -> None:
    """Another replica reads the store: what this one heard is written in the background,
    what arrives during a write too."""

    async def stored(count: int) -> bool:
        for _ in range(500):  # a generous liveness bound (10 s), never a timing assertion
            if await hearing.store.count() >= count:
                return True
            await asyncio.sleep(0.02)
        return False

    hearing.hear(heard(1, "first"))
    assert await stored(1)
    for n in range(2, 50):
        hearing.hear(heard(n, f"more {n}"))
        await asyncio.sleep(0)
    assert await stored(49)
