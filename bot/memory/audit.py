"""`bot memory audit`: does a phrase (or a person's records) still exist anywhere the bot writes?

A verification no memory product offers: after `/memory forget all`, scan every store for what
was said, not just the rows the code knows about.
- SQLite: every `*.db` file in the data directory: its raw bytes page by page, free pages
  included (what `secure_delete` and the WAL checkpoint must have zeroed), the raw bytes of its
  write-ahead log, and the rows of every table as a reader sees them, the WAL's committed frames
  applied (a row written but not yet checkpointed is seen).
- MongoDB: every document of every collection of the bot's database (the memory index's too).
- Redis: every key under the bot's prefix (names and values, the inbox's streams too), and the
  in-process cache.
- Records keyed to the person (facts, messages, tool-call logs) even if the phrase is not given
  verbatim. Deletion receipts are expected to stay (they hold counts, never content).

What matches: exactly what `bot.textfold.contains` matches (the folding the erasure uses), on
both sides: Unicode compatibility decomposition and case folding, whitespace runs as one space.
`Straße`, `STRASSE` and `strasse` find each other; a composed `é` and `e` + a combining accent
find each other; accents are kept (`resume` does not find `résumé`); no word boundaries (`orca`
finds `orca-5150`). Stored text is read the way the stores write it: bytes as UTF-8 (a byte that
is not UTF-8 stands for itself and matches nothing typed), and each text also with its JSON
string escapes read (`\u00df` as `ß`, `\"`, `\n`; JSON in JSON, up to three levels), so
`json.dumps` output and pydantic's raw UTF-8 are both searched. Raw bytes are read a page at a
time with the next bytes after it (a phrase straddling two pages or a UTF-8 character split by a
page boundary is found, named by the page it starts in, or the one before when it sits at the
very start of a page); a match spread over more bytes than that (words apart by a long whitespace
run) is still reported, for the pages around it. Bytes
split by SQLite itself (a long text continued on an overflow page elsewhere in the file) are
found in the rows, not in the raw pages.

What it guarantees: it creates and changes nothing. Files are only read as bytes: SQLite never
opens them (no `-wal`/`-shm` file appears, no lock is taken, a running bot is not blocked); the
rows are read from an in-memory copy. MongoDB and Redis are only read (no key, collection or
database appears). And it never says "nowhere" about what it could not see: a missing data
directory, a file it may not read or that is not a database, a server that does not answer are an
`AuditError` (the CLI's exit 3).

Cost: a C-speed pass per text form (decoding, then `str.translate` through a table of `fold` per
character) rules out text that cannot hold the phrase; the exact folding runs only on what
passes, in bounded windows. Memory: a database file, its WAL and the in-memory copy (about
twice the largest database), plus 8 MiB blocks of decoded text.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.keys import PersonKey
from bot.stores.protocols import Cache
from bot.textfold import contains, fold

MAX_PHRASE = 500
_KEEP_COLLECTIONS = frozenset({"erasure_receipts"})
_WINDOW = 1 << 16  # characters folded at once when a long text passes the quick test
_ESCAPE_LEVELS = 3  # JSON inside JSON inside JSON
_SEP = "\x00"  # between fields of one record: matches nothing typed, not whitespace
_ROW_BATCH = 2000  # rows asked together first
_BLOCK = 1 << 23  # bytes of a file decoded at once (a multiple of every SQLite page size)


@dataclass(frozen=True)
class Finding:
    store: str  # "sqlite", "mongodb", "redis", "memory-cache"
    where: str  # file and page, table, collection, key
    detail: str = ""


class AuditError(Exception):
    """A store could not be read; the audit cannot say "nowhere"."""


# --- matching ----------------------------------------------------------------------------------


class _FoldTable(dict[int, str | None]):
    """`str.translate` table: each character to `fold(character)` without spaces. `fold` folds
    text character by character (only whitespace runs interact), so `text.translate(table)` is
    `fold(text)` with its spaces removed, at C speed; and a folded phrase that occurs in
    `fold(text)` occurs, spaces removed, in `text.translate(table)`. (None, not "", deletes:
    it keeps CPython's fast path for ASCII text.)"""

    def __missing__(self, code: int) -> str | None:
        if len(self) > 200_000:  # decoded junk can name many characters; keep the table bounded
            self.clear()
        folded = fold(chr(code)).replace(" ", "") or None
        self[code] = folded
        return folded


_TABLE = _FoldTable()

_JSON_ESCAPE = re.compile(
    r"\\(?:u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})"
    r"|u([0-9a-fA-F]{4})|([\"\\/bfnrt]))"
)
_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape_one(m: re.Match[str]) -> str:
    high, low, code, simple = m.groups()
    if high is not None:
        return chr(0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(low, 16) - 0xDC00))
    if code is not None:
        return chr(int(code, 16))
    return _SIMPLE.get(simple, simple)


def text_forms(text: str) -> Iterator[str]:
    """The text as written, then with JSON string escapes read (again, for JSON in JSON)."""
    yield text
    for _ in range(_ESCAPE_LEVELS):
        if "\\" not in text:
            return
        unescaped = _JSON_ESCAPE.sub(_unescape_one, text)
        if unescaped == text:
            return
        text = unescaped
        yield text


class Matcher:
    """A phrase to look for, matched as `bot.textfold.contains` matches (folded both sides)."""

    def __init__(self, phrase: str) -> None:
        if len(phrase) > MAX_PHRASE or not phrase.strip():
            raise ValueError(f"the phrase must be 1-{MAX_PHRASE} characters")
        self.phrase = phrase
        folded = fold(phrase)
        self.compact = folded.replace(" ", "")
        if not self.compact:
            raise ValueError("the phrase has nothing to match once folded")
        # A match spans at most len(folded) characters of text whose whitespace runs are one
        # space (every other character folds to one or more), so windows overlap by that much.
        self.reach = len(folded) + 2
        # Raw bytes after a page that a match starting in it can reach: 4 bytes of UTF-8 per
        # character, up to 16 when JSON-escaped (nested); longer matches are found per file.
        self.reach_bytes = min(16 * self.reach, 1 << 14)

    def found_in(self, text: str) -> bool:
        return any(self._maybe(form) and self._exact(form) for form in text_forms(text))

    def found_in_bytes(self, raw: bytes) -> bool:
        return self.found_in(raw.decode("utf-8", "surrogateescape"))

    def _maybe(self, text: str) -> bool:
        """False only when the phrase cannot occur (a necessary condition, C speed)."""
        return self.compact in text.translate(_TABLE)

    def _exact(self, text: str) -> bool:
        if len(text) <= _WINDOW:
            return contains(text, self.phrase)
        squeezed = " ".join(text.split())  # folds the same: a whitespace run is one space
        step = _WINDOW - self.reach
        for start in range(0, max(len(squeezed) - self.reach, 1), step):
            window = squeezed[start : start + _WINDOW]
            if self._maybe(window) and contains(window, self.phrase):
                return True
        return False


def _flatten(value: Any, out: list[str]) -> None:
    """Every text a value holds (keys too), bytes read as UTF-8."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, bytes | bytearray | memoryview):
        out.append(bytes(value).decode("utf-8", "surrogateescape"))
    elif isinstance(value, dict):
        for k, v in value.items():
            _flatten(k, out)
            _flatten(v, out)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            _flatten(item, out)
    elif value is not None:
        out.append(str(value))


def _text_of(*values: Any) -> str:
    out: list[str] = []
    for value in values:
        _flatten(value, out)
    return _SEP.join(out)


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


def _page_size(data: bytes) -> int:
    size = int.from_bytes(data[16:18], "big") if len(data) >= 100 else 4096
    return 65536 if size == 1 else size or 4096


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise AuditError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _read_wal(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None  # none, or removed by the last connection's close meanwhile
    except OSError as exc:
        raise AuditError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _read_db(path: Path) -> tuple[bytes, bytes | None]:
    """The database file and its WAL (None when there is none), read as one consistent pair:
    the WAL is read before and after the file and must not have changed in between (a
    checkpoint or a commit meanwhile: read again)."""
    wal_path = path.with_name(path.name + "-wal")
    for _ in range(5):
        before = _read_wal(wal_path)
        data = _read(path)
        after = _read_wal(wal_path)
        if before == after:
            return data, after
    raise AuditError(f"cannot read {path}: it kept changing while read (is the bot writing?)")


def _blocks(data: bytes, m: Matcher) -> Iterator[tuple[int, int]]:
    """The [start, end) blocks of `data` that hold the phrase, each read with the `reach_bytes`
    after it (bounded memory: a block is decoded at a time, never the whole file)."""
    for start in range(0, len(data), _BLOCK):
        if m.found_in_bytes(data[start : start + _BLOCK + m.reach_bytes]):
            yield start, min(start + _BLOCK, len(data))


def _raw_findings(path: Path, data: bytes, wal: bytes | None, m: Matcher) -> list[Finding]:
    findings: list[Finding] = []
    page_size = _page_size(data)
    free = _free_pages(data, page_size)
    for start, end in _blocks(data, m):
        pages = range(start // page_size, (end + page_size - 1) // page_size)
        hits = [
            page
            for page in pages
            if m.found_in_bytes(data[page * page_size : (page + 1) * page_size + m.reach_bytes])
        ]
        for page in hits:
            kind = "free page" if page + 1 in free else "page"
            findings.append(Finding("sqlite", f"{path.name} {kind} {page + 1}"))
        if not hits:  # longer than what is read past a page (a long whitespace run inside)
            where = f"{path.name} (across pages {pages[0] + 1}-{pages[-1] + 1})"
            findings.append(Finding("sqlite", where))
    if wal is not None and any(_blocks(wal, m)):
        findings.append(Finding("sqlite", f"{path.name}-wal (write-ahead log)"))
    return findings


def scan_sqlite_file(path: Path, m: Matcher) -> list[Finding]:
    """Raw pages of a database file (free pages named) and of its WAL."""
    data, wal = _read_db(path)
    return _raw_findings(path, data, wal, m)


def _wal_checksum(data: bytes, big_endian: bool, s0: int, s1: int) -> tuple[int, int]:
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    for x0, x1 in zip(words[0::2], words[1::2], strict=True):
        s0 = (s0 + x0 + s1) & 0xFFFFFFFF
        s1 = (s1 + x1 + s0) & 0xFFFFFFFF
    return s0, s1


def with_wal(data: bytes, wal: bytes | None) -> bytearray:
    """The database as a reader sees it: the file with the WAL's committed frames applied (the
    recovery SQLite runs: frames whose salts and running checksum hold, up to the last commit),
    marked as a rollback-journal database so it can be opened from memory."""
    image = bytearray(data)
    if wal is not None and len(wal) >= 32:
        magic = int.from_bytes(wal[0:4], "big")
        page_size = int.from_bytes(wal[8:12], "big")
        big = magic == 0x377F0683
        valid_size = page_size >= 512 and page_size & (page_size - 1) == 0
        if magic in (0x377F0682, 0x377F0683) and valid_size and page_size <= 65536:
            s0, s1 = _wal_checksum(wal[0:24], big, 0, 0)
            ok = (s0, s1) == (int.from_bytes(wal[24:28], "big"), int.from_bytes(wal[28:32], "big"))
            pages: dict[int, bytes] = {}
            pending: dict[int, bytes] = {}
            size = 0
            off, frame = 32, 24 + page_size
            while ok and off + frame <= len(wal):
                head = wal[off : off + 24]
                body = wal[off + 24 : off + frame]
                if head[8:16] != wal[16:24]:
                    break
                s0, s1 = _wal_checksum(head[0:8], big, s0, s1)
                s0, s1 = _wal_checksum(body, big, s0, s1)
                if (s0, s1) != (
                    int.from_bytes(head[16:20], "big"),
                    int.from_bytes(head[20:24], "big"),
                ):
                    break
                pending[int.from_bytes(head[0:4], "big")] = body
                commit = int.from_bytes(head[4:8], "big")
                if commit:
                    pages.update(pending)
                    pending.clear()
                    size = commit
                off += frame
            if size:
                image = image[: size * page_size].ljust(size * page_size, b"\x00")
                for number, body in pages.items():
                    if 1 <= number <= size:
                        image[(number - 1) * page_size : number * page_size] = body
    if len(image) >= 100 and image[18:20] == b"\x02\x02":
        image[18:20] = b"\x01\x01"  # WAL needs shared memory; the in-memory copy needs none
    return image


def _row_findings(
    path: Path, image: bytearray, m: Matcher, person: PersonKey | None
) -> list[Finding]:
    if not image:
        return []  # an empty file: no tables
    conn = sqlite3.connect(":memory:")
    try:
        conn.deserialize(image)
        conn.execute("PRAGMA query_only = ON")
        tables = [
            str(r[0])
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not str(r[0]).startswith("sqlite_")
        ]
        findings: list[Finding] = []
        for table in tables:
            if table in _KEEP_COLLECTIONS:
                continue
            cols = [str(c[1]) for c in conn.execute(f'PRAGMA table_info("{table}")')]
            hits = keyed = 0
            cursor = conn.execute(f'SELECT * FROM "{table}"')
            while batch := cursor.fetchmany(_ROW_BATCH):
                texts = [_text_of(*row) for row in batch]
                # Rows one after another (a separator no phrase holds): when the phrase is in
                # none of them together, it is in none of them alone; else each row is asked.
                together = m.found_in(_SEP.join(texts))
                for row, text in zip(batch, texts, strict=True):
                    if together and m.found_in(text):
                        hits += 1
                    elif person is not None and _keyed(dict(zip(cols, row, strict=False)), person):
                        keyed += 1
            where = f"{path.name} table {table}"
            if hits:
                findings.append(Finding("sqlite", where, f"{hits} row(s) hold the phrase"))
            if keyed:
                findings.append(Finding("sqlite", where, f"{keyed} record(s) of this person"))
        return findings
    except sqlite3.Error as exc:
        raise AuditError(f"cannot read {path}: {exc}") from exc
    finally:
        conn.close()


def scan_sqlite_rows(path: Path, m: Matcher, person: PersonKey | None) -> list[Finding]:
    """Rows of every table holding the phrase, or keyed to the person (receipts excepted), the
    WAL's committed rows included."""
    data, wal = _read_db(path)
    return _row_findings(path, with_wal(data, wal), m, person)


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


def scan_sqlite_dir(data_dir: Path, m: Matcher, person: PersonKey | None) -> list[Finding]:
    """Every `*.db` file of the directory; AuditError when the directory is not there."""
    if not data_dir.is_dir():
        why = "is not a directory" if data_dir.exists() else "does not exist"
        raise AuditError(f"the data directory {data_dir} {why}: nothing there could be read")
    try:
        paths = sorted(data_dir.glob("*.db"))
    except OSError as exc:
        raise AuditError(f"cannot list {data_dir}: {exc.strerror or exc}") from exc
    findings: list[Finding] = []
    for path in paths:
        data, wal = _read_db(path)
        findings += _raw_findings(path, data, wal, m)
        image = with_wal(data, wal)
        del data, wal  # one copy of a large file in memory at a time, besides SQLite's
        findings += _row_findings(path, image, m, person)
    return findings


# --- MongoDB, Redis, the in-process cache ------------------------------------------------------


async def scan_mongo(db: Any, m: Matcher, person: PersonKey | None) -> list[Finding]:
    findings: list[Finding] = []
    try:
        names = sorted(await db.list_collection_names())
        for name in names:
            if name in _KEEP_COLLECTIONS or name.startswith("system."):
                continue
            hits = keyed = 0
            async for doc in db[name].find({}):
                if m.found_in(_text_of(doc)):
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


async def scan_redis(client: Any, prefix: str, m: Matcher) -> list[Finding]:
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
            if m.found_in(_text_of(raw_key, value)):
                findings.append(Finding("redis", f"key {raw_key.decode('utf-8', 'replace')}"))
    except Exception as exc:
        raise AuditError(f"cannot read Redis: {' '.join(str(exc).split())[:200]}") from exc
    return findings


def scan_memory_cache(cache: Any, m: Matcher) -> list[Finding]:
    values = getattr(cache, "_values", None)
    if not isinstance(values, dict):
        return []
    return [
        Finding("memory-cache", f"key {key}")
        for key, (_expires, raw) in list(values.items())
        if m.found_in(_text_of(key, raw))
    ]


# --- one entry point for the CLI and for tests -------------------------------------------------


async def audit(
    *,
    phrase: str,
    person: PersonKey | None = None,
    store: object | None = None,  # read for its files or database, never through its methods
    cache: Cache | None = None,
    data_dir: Path | None = None,
    redis_client: Any = None,
    redis_prefix: str = "bot:",
) -> list[Finding]:
    """Every place the phrase (or a record of `person`) still occurs. ValueError for a phrase
    out of bounds; AuditError if a store cannot be read, a missing `data_dir` included. SQLite
    files are scanned under `data_dir` (or the store's own directory)."""
    m = Matcher(phrase)
    findings: list[Finding] = []
    sqlite_path = getattr(store, "path", None)
    directory = data_dir or (Path(sqlite_path).parent if sqlite_path else None)
    if directory is not None:
        findings += await asyncio.to_thread(scan_sqlite_dir, directory, m, person)
    db = getattr(store, "db", None)
    if db is not None:
        findings += await scan_mongo(db, m, person)
    if redis_client is None and cache is not None:
        primary = getattr(cache, "primary", cache)
        redis_client = getattr(primary, "client", None) or getattr(primary, "_client", None)
        redis_prefix = getattr(primary, "prefix", redis_prefix)
    if redis_client is not None:
        findings += await scan_redis(redis_client, redis_prefix, m)
    if cache is not None:
        findings += scan_memory_cache(getattr(cache, "fallback", cache), m)
    return findings
