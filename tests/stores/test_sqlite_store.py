"""SQLite specifics: erased data is gone from the files, indexes serve the queries, the WAL."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from adapters.slack.installations import installation_docs
from bot.keys import PersonKey, SessionKey
from bot.stores.protocols import StoreUnavailable
from bot.stores.records import NewMessage, SessionState, ToolCallLog, utcnow
from bot.stores.sqlite import SqliteStore

CHANNEL = SessionKey("slack", "T1", "C1")
THREAD = SessionKey("slack", "T1", "C1", "1700.01")
ALICE = PersonKey("slack", "T1", "U1")
BOB = PersonKey("slack", "T1", "U2")


def msg(content: str, speaker: PersonKey) -> NewMessage:
    return NewMessage(role="user", content=content, speaker=speaker.id, turn_id="t")


def file_bytes(db: Path) -> bytes:
    wal = db.with_name(db.name + "-wal")
    return db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    made = await SqliteStore.open(tmp_path / "data" / "bot.db")
    yield made
    await made.close()


async def test_erased_text_is_gone_from_the_files(store: SqliteStore) -> None:
    secret, kept = "alice-secret-peanut-allergy-7f3a", "bob-keeps-his-words-9c1d"
    await store.append(CHANNEL, [msg(f"I have a {secret}", ALICE), msg(kept, BOB)])
    await store.append(THREAD, [msg(secret * 300, ALICE)])  # overflow pages too
    await store.add_fact(ALICE, f"Has a {secret}")
    await store.log_call(
        CHANNEL,
        ToolCallLog(
            call_id="c1",
            session=CHANNEL.id,
            speaker=ALICE.id,
            tool="t",
            arguments=f'{{"q": "{secret}"}}',
            outcome="ok",
            duration_ms=1,
            result_size=1,
        ),
    )
    state = SessionState(session=CHANNEL.id, summary=f"Alice said she has a {secret}")
    assert await store.put_state(CHANNEL, state)
    await store.compact()
    assert secret.encode() in file_bytes(store.path)

    assert await store.delete_speaker(ALICE) == 2
    assert await store.delete_all_facts(ALICE) == 1
    assert await store.delete_speaker_calls(ALICE) == 1
    state.summary = ""  # a summary drawn from her turns is rewritten, not deleted
    assert await store.put_state(CHANNEL, state)
    assert secret.encode() in file_bytes(
        store.path
    )  # the main file holds the old pages until the WAL is checkpointed
    await store.compact()

    data = file_bytes(store.path)
    assert secret.encode() not in data
    assert kept.encode() in data  # the check reads the right files
    assert [m.content for m in await store.recent(CHANNEL, limit=5)] == [kept]


async def test_queries_use_indexes(store: SqliteStore) -> None:
    conn = sqlite3.connect(store.path)
    try:

        def plan(sql: str) -> str:
            return " | ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql))

        recent = plan("SELECT doc FROM messages WHERE session = 's' ORDER BY seq DESC LIMIT 5")
        assert "USING INDEX" in recent and "TEMP B-TREE" not in recent
        between = plan("SELECT doc FROM messages WHERE session='s' AND seq > 1 AND seq <= 9")
        assert "USING INDEX" in between
        speaker = plan("SELECT DISTINCT session FROM messages WHERE speaker = 'p'")
        assert "messages_speaker" in speaker and "TEMP B-TREE" not in speaker
        assert "USING INDEX" in plan("DELETE FROM tool_calls WHERE created_at < 0")
        assert "USING" in plan(
            "SELECT doc FROM fact_versions WHERE person = 'p' AND live = 1 ORDER BY n"
        )
    finally:
        conn.close()


async def test_a_duplicate_seq_cannot_be_written(store: SqliteStore) -> None:
    await store.append(CHANNEL, [msg("one", ALICE)])
    conn = sqlite3.connect(store.path)
    try:
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(
                "INSERT INTO messages (session, seq, speaker, doc) VALUES (?, 1, 'x', '{}')",
                (CHANNEL.id,),
            )
    finally:
        conn.close()


async def test_old_tool_calls_are_purged_on_write(store: SqliteStore) -> None:
    def log(call_id: str, age: timedelta) -> ToolCallLog:
        return ToolCallLog(
            call_id=call_id,
            session=CHANNEL.id,
            speaker=ALICE.id,
            tool="t",
            arguments="{}",
            outcome="ok",
            duration_ms=1,
            result_size=1,
            created_at=utcnow() - age,
        )

    await store.log_call(CHANNEL, log("old", timedelta(days=8)))
    await store.log_call(CHANNEL, log("new", timedelta(0)))
    conn = sqlite3.connect(store.path)
    try:
        assert conn.execute("SELECT COUNT(*) FROM tool_calls").fetchone()[0] == 1
    finally:
        conn.close()


async def test_data_and_seq_counters_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "bot.db"
    first = await SqliteStore.open(path)
    await first.append(CHANNEL, [msg("a", ALICE), msg("b", BOB)])
    await first.delete_speaker(BOB)
    await first.close()
    await first.close()  # closing twice is harmless

    second = await SqliteStore.open(path)
    try:
        assert [m.content for m in await second.recent(CHANNEL, limit=5)] == ["a"]
        (c,) = await second.append(CHANNEL, [msg("c", ALICE)])
        assert c.seq == 3
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.close()
    finally:
        await second.close()
    assert not await second.ping()


async def test_a_database_locked_by_another_process_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "bot.db"
    store = await SqliteStore.open(path)
    other = sqlite3.connect(path, timeout=0)
    try:
        other.execute("BEGIN EXCLUSIVE")
        # Wait 50 ms for the lock instead of the production 5 s.
        await store._db.call(lambda c: c.execute("PRAGMA busy_timeout=50"))
        with pytest.raises(StoreUnavailable):
            await store.append(CHANNEL, [msg("blocked", ALICE)])
        other.execute("ROLLBACK")
        assert [m.seq for m in await store.append(CHANNEL, [msg("ok", ALICE)])] == [1]
    finally:
        other.close()
        await store.close()


async def test_uninstalled_bot_tokens_are_gone_from_the_files(store: SqliteStore) -> None:
    token, kept = "xoxb-uninstalled-team-token-5e2b", "xoxb-still-installed-token-81c0"
    docs = installation_docs(store)  # Slack's storage, on the store's connection
    for name in ("bot", "installer", "installer:U1"):
        await docs.put_doc("-", "T1", name, {"bot_token": token, "padding": "x" * 5000})
    await docs.put_doc("-", "T2", "bot", {"bot_token": kept})
    await store.compact()
    assert token.encode() in file_bytes(store.path)

    assert await docs.delete_docs("-", "T1") == 3
    await store.compact()

    data = file_bytes(store.path)
    assert token.encode() not in data
    assert kept.encode() in data  # the check reads the right files


async def test_expired_oauth_states_are_purged_on_write(store: SqliteStore) -> None:
    docs = installation_docs(store)
    await docs.put_oauth_state("expired", time.time() - 1)
    await docs.put_oauth_state("live", time.time() + 600)
    conn = sqlite3.connect(store.path)
    try:
        rows = conn.execute("SELECT state FROM slack_oauth_states").fetchall()
        assert rows == [("live",)]

        def plan(sql: str) -> str:
            return " | ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql))

        assert "USING INDEX" in plan("DELETE FROM slack_oauth_states WHERE expires_at <= 0")
        team = plan("DELETE FROM slack_installations WHERE enterprise_id = '-' AND team_id = 'T'")
        assert "USING" in team and "SCAN" not in team
    finally:
        conn.close()


async def test_installations_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "bot.db"
    first = await SqliteStore.open(path)
    await installation_docs(first).put_doc("-", "T1", "bot", {"bot_token": "xoxb-1"})
    await installation_docs(first).put_oauth_state("pending", time.time() + 600)
    await first.close()
    second = await SqliteStore.open(path)
    try:
        assert await installation_docs(second).get_doc("-", "T1", "bot") == {"bot_token": "xoxb-1"}
        assert await installation_docs(second).consume_oauth_state("pending")
    finally:
        await second.close()


async def test_the_worker_keeps_order_errors_and_cancellation_apart(tmp_path: Path) -> None:
    """bot.stores.sqlite_worker: jobs run in the order given; a job's error reaches its caller
    only; a caller that stopped waiting does not disturb the next; close waits for what was
    queued before it; afterwards the store says it is unavailable."""
    store = await SqliteStore.open(tmp_path / "bot.db")
    appends = [asyncio.create_task(store.append(CHANNEL, [msg(str(i), ALICE)])) for i in range(5)]
    boom = asyncio.create_task(store._db.call(lambda conn: conn.execute("SELECT nope")))
    gone = asyncio.create_task(store._db.call(lambda conn: conn.execute("SELECT 1").fetchone()))
    await asyncio.sleep(0)  # every job is queued
    gone.cancel()
    assert [s[0].seq for s in await asyncio.gather(*appends)] == [1, 2, 3, 4, 5]
    with pytest.raises(sqlite3.OperationalError, match="no such column"):
        await boom
    assert [m.content for m in await store.recent(CHANNEL, limit=10)] == list("01234")
    last = asyncio.create_task(store.append(CHANNEL, [msg("5", BOB)]))
    await asyncio.sleep(0)  # queued before the close
    await store.close()
    assert (await last)[0].seq == 6 and gone.cancelled()
    with pytest.raises(StoreUnavailable):
        await store.recent(CHANNEL, limit=1)
    reopened = await SqliteStore.open(tmp_path / "bot.db")
    assert (await reopened.head(CHANNEL))[0] == 6
    await reopened.close()
