"""Versioned facts (`fact_versions`) and erasure receipts in the embedded SQLite store, mixed
into `SqliteStore`.

Every version is a row; `user_key` (`platform:user`, see `fact_common.user_key`) is indexed so
one user's facts in every team and DM scope of a platform are found without reading anyone
else's. `live_norm` is the normalised text while the version is live and
`~<id>` once closed, so the unique index on (person, live_norm) forbids two live copies of one
fact while any number of closed ones may repeat it. A replacement and the close of the version
it replaces happen in one transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from bot.keys import PersonKey, SessionKey
from bot.stores import codec
from bot.stores.fact_common import closed_norm, draft_fact, lineage, user_key
from bot.stores.ids import FACT_ID_ATTEMPTS, canonical_fact_id, new_fact_id, normalize_fact
from bot.stores.protocols import StaleFact
from bot.stores.records import ErasureReceipt, Fact, FactSource
from bot.stores.sqlite_worker import transaction

if TYPE_CHECKING:
    from bot.stores.sqlite_worker import SqliteWorker

FACTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS fact_versions (
    n INTEGER PRIMARY KEY,
    person TEXT NOT NULL,
    id TEXT NOT NULL,
    live_norm TEXT NOT NULL,
    live INTEGER NOT NULL,
    doc TEXT NOT NULL,
    user_key TEXT,
    UNIQUE (person, id),
    UNIQUE (person, live_norm)
);
CREATE TABLE IF NOT EXISTS erasure_receipts (
    n INTEGER PRIMARY KEY,
    person TEXT NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS erasure_receipts_person ON erasure_receipts (person);
"""


def migrate_facts(conn: sqlite3.Connection) -> None:
    """Create `fact_versions`; move the rows of the unversioned `facts` table into it (once);
    give rows written before `user_key` theirs (once)."""
    conn.executescript(FACTS_SCHEMA)
    old = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'facts'"
    ).fetchone()
    if old is not None:
        with transaction(conn):
            conn.execute(
                "INSERT OR IGNORE INTO fact_versions (person, id, live_norm, live, doc) "
                "SELECT person, id, norm, 1, doc FROM facts ORDER BY n"
            )
            conn.execute("DROP TABLE facts")
    columns = {str(c[1]) for c in conn.execute("PRAGMA table_info(fact_versions)")}
    with transaction(conn):
        if "user_key" not in columns:
            conn.execute("ALTER TABLE fact_versions ADD COLUMN user_key TEXT")
        people = conn.execute(
            "SELECT DISTINCT person FROM fact_versions WHERE user_key IS NULL"
        ).fetchall()
        conn.executemany(
            "UPDATE fact_versions SET user_key = ? WHERE person = ? AND user_key IS NULL",
            [(user_key(str(p)), str(p)) for (p,) in people],
        )
        conn.execute(
            "CREATE INDEX IF NOT EXISTS fact_versions_user ON fact_versions (user_key, live, n)"
        )


class SqliteFacts:
    """The `FactStore` half of `SqliteStore`."""

    _db: SqliteWorker

    async def add_fact(
        self,
        person: PersonKey,
        text: str,
        *,
        key: str | None = None,
        source: FactSource = "user",
        session: SessionKey | None = None,
        source_ref: str | None = None,
        source_messages: Sequence[str] = (),
        valid_from: datetime | None = None,
    ) -> Fact:
        draft = draft_fact(
            person, text, key, source, session, source_ref, source_messages, valid_from
        )

        def run(conn: sqlite3.Connection) -> Fact:
            with transaction(conn):
                found = conn.execute(
                    "SELECT doc FROM fact_versions WHERE person = ? AND live_norm = ?",
                    (draft.person, normalize_fact(draft.text)),
                ).fetchone()
                if found is not None:
                    return codec.load_json(Fact, found[0])
                return _insert(conn, draft)

        return await self._db.call(run)

    async def replace_fact(
        self,
        person: PersonKey,
        old_id: str,
        text: str | None,
        *,
        key: str | None = None,
        source: FactSource = "user",
        session: SessionKey | None = None,
        source_ref: str | None = None,
        source_messages: Sequence[str] = (),
        valid_from: datetime | None = None,
    ) -> Fact | None:
        pid, fid = person.id, canonical_fact_id(old_id)
        draft = (
            None
            if text is None
            else draft_fact(
                person, text, key, source, session, source_ref, source_messages, valid_from
            )
        )

        def run(conn: sqlite3.Connection) -> Fact | None:
            with transaction(conn):
                row = conn.execute(
                    "SELECT doc FROM fact_versions WHERE person = ? AND id = ? AND live = 1",
                    (pid, fid),
                ).fetchone()
                if row is None:
                    raise StaleFact(fid)
                old = codec.load_json(Fact, row[0])
                when = draft.valid_from if draft is not None else codec.now_ms()
                old.valid_to, old.closed_reason = when, "updated" if draft else "deleted"
                conn.execute(
                    "UPDATE fact_versions SET live = 0, live_norm = ?, doc = ? "
                    "WHERE person = ? AND id = ?",
                    (closed_norm(fid), codec.dump_json(old), pid, fid),
                )
                if draft is None:
                    return None
                draft.replaces = [fid]
                same = conn.execute(
                    "SELECT doc FROM fact_versions WHERE person = ? AND live_norm = ?",
                    (pid, normalize_fact(draft.text)),
                ).fetchone()
                new = codec.load_json(Fact, same[0]) if same else _insert(conn, draft)
                old.replaced_by = new.id
                conn.execute(
                    "UPDATE fact_versions SET doc = ? WHERE person = ? AND id = ?",
                    (codec.dump_json(old), pid, fid),
                )
                return new

        return await self._db.call(run)

    async def list_facts(self, person: PersonKey, *, history: bool = False) -> list[Fact]:
        pid = person.id
        sql = "SELECT doc FROM fact_versions WHERE person = ?"
        if not history:
            sql += " AND live = 1"

        def run(conn: sqlite3.Connection) -> list[Fact]:
            rows = conn.execute(sql + " ORDER BY n", (pid,)).fetchall()
            return [codec.load_json(Fact, r[0]) for r in rows]

        return await self._db.call(run)

    async def list_user_facts(self, person: PersonKey, *, history: bool = False) -> list[Fact]:
        key = user_key(person.id)
        sql = "SELECT doc FROM fact_versions WHERE user_key = ?"
        if not history:
            sql += " AND live = 1"

        def run(conn: sqlite3.Connection) -> list[Fact]:
            rows = conn.execute(sql + " ORDER BY n", (key,)).fetchall()
            return [codec.load_json(Fact, r[0]) for r in rows]

        return await self._db.call(run)

    async def delete_fact(self, person: PersonKey, fact_id: str) -> bool:
        pid, fid = person.id, canonical_fact_id(fact_id)

        def run(conn: sqlite3.Connection) -> bool:
            with transaction(conn):
                rows = conn.execute(
                    "SELECT id, doc FROM fact_versions WHERE person = ?", (pid,)
                ).fetchall()
                ids = lineage(fid, {str(r[0]): codec.load_json(Fact, r[1]) for r in rows})
                for each in ids:
                    conn.execute(
                        "DELETE FROM fact_versions WHERE person = ? AND id = ?", (pid, each)
                    )
                return bool(ids)

        return await self._db.call(run)

    async def delete_all_facts(self, person: PersonKey) -> int:
        pid = person.id

        def run(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                return conn.execute("DELETE FROM fact_versions WHERE person = ?", (pid,)).rowcount

        return await self._db.call(run)

    async def add_receipt(self, receipt: ErasureReceipt) -> None:
        row = (receipt.person, codec.dump_json(receipt))

        def run(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute("INSERT INTO erasure_receipts (person, doc) VALUES (?, ?)", row)

        await self._db.call(run)

    async def receipts(self, person: PersonKey) -> list[ErasureReceipt]:
        pid = person.id

        def run(conn: sqlite3.Connection) -> list[ErasureReceipt]:
            rows = conn.execute(
                "SELECT doc FROM erasure_receipts WHERE person = ? ORDER BY n", (pid,)
            ).fetchall()
            return [codec.load_json(ErasureReceipt, r[0]) for r in rows]

        return await self._db.call(run)


def _insert(conn: sqlite3.Connection, draft: Fact) -> Fact:
    norm = normalize_fact(draft.text)
    for _ in range(FACT_ID_ATTEMPTS):
        fact = draft.model_copy(update={"id": new_fact_id()})
        cur = conn.execute(
            "INSERT INTO fact_versions (person, id, live_norm, live, doc, user_key) "
            "VALUES (?, ?, ?, 1, ?, ?) ON CONFLICT (person, id) DO NOTHING",
            (fact.person, fact.id, norm, codec.dump_json(fact), user_key(fact.person)),
        )
        if cur.rowcount == 1:
            return fact
    raise RuntimeError(f"no free fact id for {draft.person} after {FACT_ID_ATTEMPTS} attempts")
