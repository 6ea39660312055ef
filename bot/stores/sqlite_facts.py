"""Versioned facts (`fact_versions`) and erasure receipts in the embedded SQLite store, mixed
into `SqliteStore`.

Every version is a row; `user_key` (`platform:user`, see `fact_common.user_key`) is indexed so
one user's facts in every team and DM scope of a platform are found without reading anyone
else's. `audience` (a column, indexed with the person) is who could read what the fact came
from: readers filter on it in the query (`audience IN (...)`). `live_norm` is the audience and
normalised text while the version is live and `~<id>` once closed, so the unique index on
(person, live_norm) forbids two live copies of one fact for one audience while any number of
closed ones may repeat it. A replacement and the close of the version it replaces happen in one
transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from bot.audience import UNKNOWN_FACT
from bot.keys import PersonKey, SessionKey
from bot.stores import codec
from bot.stores.fact_common import (
    audience_of_messages,
    closed_norm,
    draft_fact,
    lineage,
    live_norm,
    message_audience,
    user_key,
)
from bot.stores.ids import FACT_ID_ATTEMPTS, canonical_fact_id, new_fact_id
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
    audience TEXT,
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
    give rows written before `user_key` theirs (once), and rows written before `audience`
    theirs (once, see `_settle_audiences`)."""
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
    with transaction(conn):
        if "audience" not in columns:
            conn.execute("ALTER TABLE fact_versions ADD COLUMN audience TEXT")
        _settle_audiences(conn)
        conn.execute(
            "CREATE INDEX IF NOT EXISTS fact_versions_audience "
            "ON fact_versions (person, live, audience, n)"
        )


def _settle_audiences(conn: sqlite3.Connection) -> None:
    """Rows stored before facts carried an audience get one: found from the messages the fact
    came from when they are still stored (`fact_common.message_audience`; the narrowest of
    them), else the narrowest there is (`UNKNOWN_FACT`: the person's DMs only). A live row's
    `live_norm` takes its audience."""
    rows = conn.execute("SELECT n, live, doc FROM fact_versions WHERE audience IS NULL").fetchall()
    if not rows:
        return
    has_messages = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages'"
    ).fetchone()
    for n, live, raw in rows:
        doc = json.loads(raw)
        audience = doc.get("audience") or (
            _audience_from_messages(conn, doc.get("source_messages") or [])
            if has_messages
            else UNKNOWN_FACT
        )
        doc["audience"] = audience
        conn.execute(
            "UPDATE fact_versions SET audience = ?, doc = ?"
            + (", live_norm = ?" if live else "")
            + " WHERE n = ?",
            (
                audience,
                json.dumps(doc),
                *((live_norm(audience, str(doc.get("text", ""))),) if live else ()),
                n,
            ),
        )


def _audience_from_messages(conn: sqlite3.Connection, refs: Sequence[object]) -> str:
    found: list[str | None] = []
    for ref in refs:
        session, _, seq = str(ref).rpartition("#")
        row = (
            conn.execute(
                "SELECT doc FROM messages WHERE session = ? AND seq = ?", (session, int(seq))
            ).fetchone()
            if seq.isdigit()
            else None
        )
        meta = json.loads(row[0]).get("meta") if row is not None else None
        found.append(message_audience(session, meta) if isinstance(meta, dict) else None)
    return audience_of_messages(found)


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
        audience: str = UNKNOWN_FACT,
    ) -> Fact:
        draft = draft_fact(
            person, text, key, source, session, source_ref, source_messages, valid_from, audience
        )

        def run(conn: sqlite3.Connection) -> Fact:
            with transaction(conn):
                found = conn.execute(
                    "SELECT doc FROM fact_versions WHERE person = ? AND live_norm = ?",
                    (draft.person, live_norm(draft.audience, draft.text)),
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
        audience: str = UNKNOWN_FACT,
    ) -> Fact | None:
        pid, fid = person.id, canonical_fact_id(old_id)
        draft = (
            None
            if text is None
            else draft_fact(
                person,
                text,
                key,
                source,
                session,
                source_ref,
                source_messages,
                valid_from,
                audience,
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
                    (pid, live_norm(draft.audience, draft.text)),
                ).fetchone()
                new = codec.load_json(Fact, same[0]) if same else _insert(conn, draft)
                old.replaced_by = new.id
                conn.execute(
                    "UPDATE fact_versions SET doc = ? WHERE person = ? AND id = ?",
                    (codec.dump_json(old), pid, fid),
                )
                return new

        return await self._db.call(run)

    async def list_facts(
        self,
        person: PersonKey,
        *,
        history: bool = False,
        audiences: Sequence[str] | None = None,
    ) -> list[Fact]:
        return await self._list("person", person.id, history, audiences)

    async def list_user_facts(
        self,
        person: PersonKey,
        *,
        history: bool = False,
        audiences: Sequence[str] | None = None,
    ) -> list[Fact]:
        return await self._list("user_key", user_key(person.id), history, audiences)

    async def _list(
        self,
        column: str,
        value: str | None,
        history: bool,
        audiences: Sequence[str] | None,
    ) -> list[Fact]:
        sql = f"SELECT doc FROM fact_versions WHERE {column} = ?"
        params: list[object] = [value]
        if not history:
            sql += " AND live = 1"
        if audiences is not None:
            wanted = sorted(set(audiences))
            if not wanted:
                return []
            sql += f" AND audience IN ({', '.join('?' * len(wanted))})"
            params += wanted

        def run(conn: sqlite3.Connection) -> list[Fact]:
            rows = conn.execute(sql + " ORDER BY n", params).fetchall()
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
    norm = live_norm(draft.audience, draft.text)
    for _ in range(FACT_ID_ATTEMPTS):
        fact = draft.model_copy(update={"id": new_fact_id()})
        cur = conn.execute(
            "INSERT INTO fact_versions (person, id, live_norm, live, doc, user_key, audience) "
            "VALUES (?, ?, ?, 1, ?, ?, ?) ON CONFLICT (person, id) DO NOTHING",
            (
                fact.person,
                fact.id,
                norm,
                codec.dump_json(fact),
                user_key(fact.person),
                fact.audience,
            ),
        )
        if cur.rowcount == 1:
            return fact
    raise RuntimeError(f"no free fact id for {draft.person} after {FACT_ID_ATTEMPTS} attempts")
