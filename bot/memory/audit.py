"""`bot memory audit`: does a phrase (or a person's records) still exist anywhere the bot writes?

A verification no memory product offers: after `/memory forget all`, scan every store for what
was said, not just the rows the code knows about.
- SQLite: the raw bytes of every database file under the data directory and their WALs, page by
  page, including free pages (what `secure_delete` and the WAL checkpoint must have zeroed), and
  the rows of every table (to name where a live copy sits).
- MongoDB: every document of every collection of the bot's database (the memory index's too).
- Redis: every key under the bot's prefix (names and values, the inbox's streams too), and the
  in-process cache.
- Records keyed to the person (facts, messages, tool-call logs) even if the phrase is not given
  verbatim. Deletion receipts are expected to stay (they hold counts, never content).

Matching is case-insensitive, on the raw text and on its JSON-escaped form.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.keys import PersonKey
from bot.stores.protocols import Cache, Store

MAX_PHRASE = 500
_KEEP_COLLECTIONS = frozenset({"erasure_receipts"})


@dataclass(frozen=True)
class Finding:
    store: str  # "sqlite", "mongodb", "redis", "memory-cache"
    where: str  # file and page, table, collection, key
    detail: str = ""


class AuditError(Exception):
    """A store could not be read; the audit cannot say "nowhere"."""


def needles(phrase: str) -> list[bytes]:
    """The byte strings to look for: the phrase as written and JSON-escaped, case-folded."""
    forms = {phrase, json.dumps(phrase)[1:-1], json.dumps(phrase, ensure_ascii=False)[1:-1]}
    return sorted({f.casefold().encode("utf-8") for f in forms if f})


def _contains(haystack: bytes, wanted: list[bytes]) -> bool:
    lowered = haystack.lower()
    return any(n.lower() in lowered for n in wanted)


# --- SQLite ------------------------------------------------------------------------------------


def _free_pages(data: bytes, page_size: int) -> set[int]:
    """Page numbers on the freelist (trunk and leaf pages), read from the file header."""
    if len(data) < 100:
        return set()
    trunk = int.from_bytes(data[32:36], "big")
    free: set[int] = set()
    while trunk and trunk not in free and trunk * page_size <= len(data):
        free.add(trunk)
        base = (trunk - 1) * page_size
        nxt = int.from_bytes(data[base : base + 4], "big")
        count = int.from_bytes(data[base + 4 : base + 8], "big")
        for i in range(min(count, page_size // 4 - 2)):
            off = base + 8 + 4 * i
            free.add(int.from_bytes(data[off : off + 4], "big"))
        trunk = nxt
    return free


def scan_sqlite_file(path: Path, wanted: list[bytes]) -> list[Finding]:
    """Raw pages of a database file (free pages named) and of its WAL."""
    findings: list[Finding] = []
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AuditError(f"cannot read {path}: {exc.strerror or exc}") from exc
    page_size = int.from_bytes(data[16:18], "big") if len(data) >= 100 else 4096
    page_size = 65536 if page_size == 1 else page_size or 4096
    free = _free_pages(data, page_size)
    for page in range(len(data) // page_size + (1 if len(data) % page_size else 0)):
        chunk = data[page * page_size : (page + 1) * page_size + 256]  # straddling text too
        if _contains(chunk, wanted):
            kind = "free page" if page + 1 in free else "page"
            findings.append(Finding("sqlite", f"{path.name} {kind} {page + 1}"))
    wal = path.with_name(path.name + "-wal")
    if wal.exists():
        try:
            raw = wal.read_bytes()
        except OSError as exc:
            raise AuditError(f"cannot read {wal}: {exc.strerror or exc}") from exc
        if _contains(raw, wanted):
            findings.append(Finding("sqlite", f"{wal.name} (write-ahead log)"))
    return findings


def scan_sqlite_rows(path: Path, wanted: list[bytes], person: PersonKey | None) -> list[Finding]:
    """Rows of every table holding the phrase, or keyed to the person (receipts excepted)."""
    findings: list[Finding] = []
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        raise AuditError(f"cannot open {path}: {exc}") from exc
    try:
        tables = [
            str(r[0])
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not str(r[0]).startswith("sqlite_")
        ]
        for table in tables:
            if table in _KEEP_COLLECTIONS:
                continue
            cols = [str(c[1]) for c in conn.execute(f'PRAGMA table_info("{table}")')]
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                text = " ".join("" if v is None else str(v) for v in row)
                blob = text.encode("utf-8", "replace")
                keyed = person is not None and _keyed(dict(zip(cols, row, strict=False)), person)
                if _contains(blob, wanted) or keyed:
                    why = "record of this person" if keyed else "phrase"
                    findings.append(Finding("sqlite", f"{path.name} table {table}", why))
    except sqlite3.Error as exc:
        raise AuditError(f"cannot read {path}: {exc}") from exc
    finally:
        conn.close()
    return findings


def _keyed(fields: dict[str, Any], person: PersonKey) -> bool:
    """A row or document that belongs to the person (by the keys the stores scope on)."""
    for name in ("person", "speaker"):
        if fields.get(name) == person.id:
            return True
    people = fields.get("people")
    if isinstance(people, list) and person.id in people:
        return True
    if isinstance(people, str) and person.id in people:
        return True
    return False


def scan_sqlite_dir(data_dir: Path, wanted: list[bytes], person: PersonKey | None) -> list[Finding]:
    findings: list[Finding] = []
    for path in sorted(data_dir.glob("*.db")):
        findings += scan_sqlite_file(path, wanted)
        findings += scan_sqlite_rows(path, wanted, person)
    return findings


# --- MongoDB, Redis, the in-process cache ------------------------------------------------------


async def scan_mongo(db: Any, wanted: list[bytes], person: PersonKey | None) -> list[Finding]:
    findings: list[Finding] = []
    try:
        names = sorted(await db.list_collection_names())
        for name in names:
            if name in _KEEP_COLLECTIONS or name.startswith("system."):
                continue
            hits = keyed = 0
            async for doc in db[name].find({}):
                if _contains(json.dumps(doc, default=str, ensure_ascii=False).encode(), wanted):
                    hits += 1
                elif person is not None and _keyed(doc, person):
                    keyed += 1
            if hits:
                findings.append(Finding("mongodb", f"collection {name}", f"{hits} document(s)"))
            if keyed:
                findings.append(
                    Finding("mongodb", f"collection {name}", f"{keyed} record(s) of this person")
                )
    except Exception as exc:
        raise AuditError(f"cannot read MongoDB: {' '.join(str(exc).split())[:200]}") from exc
    return findings


async def scan_redis(client: Any, prefix: str, wanted: list[bytes]) -> list[Finding]:
    findings: list[Finding] = []
    try:
        async for key in client.scan_iter(match=f"{prefix}*", count=500):
            raw_key = key if isinstance(key, bytes) else str(key).encode()
            kind = await client.type(key)
            kind = kind.decode() if isinstance(kind, bytes) else str(kind)
            value: Any = None
            if kind == "string":
                value = await client.get(key)
            elif kind == "hash":
                value = await client.hgetall(key)
            elif kind == "list":
                value = await client.lrange(key, 0, -1)
            elif kind in ("set", "zset"):
                value = await (client.smembers(key) if kind == "set" else client.zrange(key, 0, -1))
            elif kind == "stream":  # the durable inbox: events waiting for their turn
                value = await client.xrange(key)
            blob = raw_key + b" " + (value if isinstance(value, bytes) else repr(value).encode())
            if _contains(blob, wanted):
                findings.append(Finding("redis", f"key {raw_key.decode('utf-8', 'replace')}"))
    except Exception as exc:
        raise AuditError(f"cannot read Redis: {' '.join(str(exc).split())[:200]}") from exc
    return findings


def scan_memory_cache(cache: Any, wanted: list[bytes]) -> list[Finding]:
    values = getattr(cache, "_values", None)
    if not isinstance(values, dict):
        return []
    return [
        Finding("memory-cache", f"key {key}")
        for key, (_expires, raw) in list(values.items())
        if _contains(f"{key} {raw}".encode(), wanted)
    ]


# --- one entry point for the CLI and for tests -------------------------------------------------


async def audit(
    *,
    phrase: str,
    person: PersonKey | None = None,
    store: Store | None = None,
    cache: Cache | None = None,
    data_dir: Path | None = None,
    redis_client: Any = None,
    redis_prefix: str = "bot:",
) -> list[Finding]:
    """Every place the phrase (or a record of `person`) still occurs. AuditError if a store
    cannot be read. SQLite files are scanned under `data_dir` (or the store's own directory)."""
    if not phrase.strip() or len(phrase) > MAX_PHRASE:
        raise ValueError(f"the phrase must be 1-{MAX_PHRASE} characters")
    wanted = needles(phrase)
    findings: list[Finding] = []
    sqlite_path = getattr(store, "path", None)
    directory = data_dir or (Path(sqlite_path).parent if sqlite_path else None)
    if directory is not None and directory.exists():
        findings += await asyncio.to_thread(scan_sqlite_dir, directory, wanted, person)
    db = getattr(store, "db", None)
    if db is not None:
        findings += await scan_mongo(db, wanted, person)
    if redis_client is None and cache is not None:
        primary = getattr(cache, "primary", cache)
        redis_client = getattr(primary, "client", None) or getattr(primary, "_client", None)
        redis_prefix = getattr(primary, "prefix", redis_prefix)
    if redis_client is not None:
        findings += await scan_redis(redis_client, redis_prefix, wanted)
    if cache is not None:
        findings += scan_memory_cache(getattr(cache, "fallback", cache), wanted)
    return findings
