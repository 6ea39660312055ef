"""`/memory forget all` across every tier, verified by the audit that scans the stores' files,
documents and keys for what the person said; another person's data stays."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from bot.app import BotApp
from bot.core import CommandRequest
from bot.keys import PersonKey
from bot.memory.audit import Finding, Matcher, audit, scan_sqlite_file
from tests.helpers import say

ALICE = PersonKey("test", "T1", "UA")
BOB = PersonKey("test", "T1", "UB")
ALICE_SAYS = ["please remember that I am allergic to kiwi-7f3a", "my locker code is quasar-4242"]
BOB_SAYS = ["please remember that I am vegan-b0b", "the build broke on nebula-9c1d"]


def forget_all(user: str) -> CommandRequest:
    return CommandRequest("test", "T1", "C1", user, "memory", "forget all")


async def converse(app: BotApp) -> None:
    for text in ALICE_SAYS:
        await say(app, text, user="UA")
        await say(app, text + " (in a thread)", user="UA", thread="1700.1")
    for text in BOB_SAYS:
        await say(app, text, user="UB")
    await say(app, "hello from a private DM", user="UA", channel="D1")


async def found(app: BotApp, phrase: str, person: PersonKey | None = None) -> list[Finding]:
    return await audit(phrase=phrase, person=person, store=app.store, cache=app.cache)


async def check_forget_all(app: BotApp) -> list[Finding]:
    await converse(app)
    before = await found(app, "quasar-4242")
    assert before  # the audit can find things
    assert await found(app, "kiwi-7f3a", ALICE)
    await app.meter.flush()  # her usage rows are stored now (they name her)
    await say(app, "one more, metered but not flushed", user="UA")

    reply = await app.handle_command(forget_all("UA"))
    assert reply.ok and "Receipt: `r" in reply.text, reply.text

    for phrase in ("kiwi-7f3a", "quasar-4242", "hello from a private DM"):
        assert await found(app, phrase, ALICE) == [], phrase
    await app.meter.flush()  # what was pending at the erasure no longer names her either
    assert await found(app, "kiwi-7f3a", ALICE) == []
    assert all(r.person != ALICE.id for r in app.meter.pending())
    assert await found(app, "nebula-9c1d")  # Bob's words are intact
    assert [f.text for f in await app.store.list_facts(BOB)] == ["I am vegan-b0b"]
    (receipt,) = await app.store.receipts(ALICE)
    assert receipt.counts["facts"] >= 1 and receipt.counts["messages"] >= 12
    assert "kiwi" not in receipt.model_dump_json() and "quasar" not in receipt.model_dump_json()
    return before


async def test_forget_all_leaves_nothing_in_sqlite_files(make_app: Any) -> None:
    app = await make_app()
    await check_forget_all(app)


@pytest.mark.mongo
@pytest.mark.redis
async def test_forget_all_leaves_nothing_in_mongo_or_redis(
    make_app: Any, mongo_uri: str, redis_url: str, redis_prefix: str
) -> None:
    app = await make_app(
        mongodb_uri=mongo_uri,
        mongodb_db=f"t{uuid.uuid4().hex[:10]}",
        redis_url=redis_url,
        redis_key_prefix=redis_prefix,
    )
    before = await check_forget_all(app)
    # The hot copies live in Redis: the audit read them there before the erasure.
    assert {f.store for f in before} >= {"redis", "mongodb"}


def test_free_pages_and_the_wal_are_scanned(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "x.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA secure_delete=OFF")  # what the bot never does: freed pages keep text
    conn.execute("CREATE TABLE t (doc TEXT)")
    conn.executemany("INSERT INTO t VALUES (?)", [("secret-zebra " * 400,)] * 20)
    conn.commit()
    conn.execute("DELETE FROM t")
    conn.commit()
    conn.close()
    hits = scan_sqlite_file(path, Matcher("SECRET-zebra"))
    assert any("free page" in f.where for f in hits), hits
