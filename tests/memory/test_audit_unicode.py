"""`bot memory audit` cannot miss: it matches the way people type (`bot.textfold` on both sides,
every way the stores write text), reads only what exists (a missing data directory or an
unreachable server is exit 3), and creates nothing (files, directories, keys, collections).

Oracles: the phrase we stored and the form we typed; the data directory's listing (names, sizes,
modification times, the directory's own included) before and after; Redis keys and MongoDB
collection names before and after."""

from __future__ import annotations

import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis as sync_redis
from pymongo import MongoClient

from bot.config import Settings
from bot.memory import audit as audit_module
from bot.memory.audit import (
    MAX_PHRASE,
    AuditError,
    Matcher,
    audit,
    scan_sqlite_dir,
    scan_sqlite_file,
    scan_sqlite_rows,
)
from bot.memory.audit_cli import EXIT_UNREADABLE, EXIT_USAGE, run_audit
from bot.stores.memory_cache import MemoryCache
from bot.stores.sqlite import DB_FILENAME, SqliteStore
from bot.textfold import contains, fold
from tests.helpers import say
from tests.memory.test_audit_cli import audit_cli

USER = "console:local:UA"

# (as stored, as typed): case folding (ß is "ss"), composed and decomposed accents, both ways.
FORMS = [
    ("Straße", "STRASSE"),
    ("STRASSE", "straße"),
    ("Café", "CAFE\u0301"),
    ("Cafe\u0301", "café"),
    ("ﬁnal ÅNGSTRÖM", "FINAL a\u030angstro\u0308m"),
]


def listing(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under `root` and `root` itself: (mode, size, mtime in ns). A file created
    and removed again still shows, in its directory's mtime."""
    out: dict[str, tuple[int, int, int]] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.stat()
        out[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def free_port() -> int:
    """A local port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# --- matching ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("stored", "typed"), FORMS)
async def test_the_form_people_type_finds_the_form_the_bot_stored(
    make_app: Any, stored: str, typed: str
) -> None:
    app = await make_app()
    tag = uuid.uuid4().hex[:6]
    await say(app, f"my street is {stored} {tag}", user="UA", platform="console", team="local")
    found = await audit(phrase=f"{typed} {tag}", store=app.store, cache=app.cache)
    # The stored message's row (pydantic JSON, raw UTF-8) and its raw bytes (WAL or pages).
    assert any(f.where == "bot.db table messages" for f in found), found
    assert any(f.where.startswith(("bot.db-wal", "bot.db page")) for f in found), found
    # Accents are kept: the unaccented word is another word.
    if "\u0301" in fold(stored):
        assert await audit(phrase=f"cafe {tag}", store=app.store) == []
    assert await audit(phrase=f"nowhere-{tag}", store=app.store) == []


def escaped_forms(text: str) -> list[str]:
    """Every way the stores write a string: pydantic and json.dumps(ensure_ascii=False) keep
    UTF-8, json.dumps escapes (\\u00df), JSON inside JSON escapes twice."""
    doc = {"content": text}
    return [
        json.dumps(doc, ensure_ascii=False),
        json.dumps(doc),
        json.dumps({"result": json.dumps(doc)}),
        json.dumps({"outer": json.dumps({"result": json.dumps(doc)})}),
    ]


@pytest.mark.parametrize(("stored", "typed"), FORMS)
def test_rows_and_pages_are_read_as_the_stores_write_them(
    tmp_path: Path, stored: str, typed: str
) -> None:
    path = tmp_path / "x.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (name TEXT, doc TEXT)")
    forms = escaped_forms(f'she said "{stored}"\non Monday')
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(str(i), f) for i, f in enumerate(forms)])
    conn.commit()
    conn.close()
    m = Matcher(f'SAID "{typed}" ON monday')  # a quote and a newline, escaped in JSON
    rows = scan_sqlite_rows(path, m, None)
    assert [f.detail for f in rows] == [f"{len(forms)} row(s) hold the phrase"], rows
    one_at_a_time = [Matcher(f'"{typed}"').found_in(f) for f in forms]
    assert one_at_a_time == [True] * len(forms)
    assert any(f.where.startswith("x.db page") for f in scan_sqlite_file(path, m))


def test_free_pages_keep_what_the_bot_would_zero_and_the_audit_finds_it(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA secure_delete=OFF")  # what the bot never does: freed pages keep text
    conn.execute("CREATE TABLE t (doc TEXT)")
    text = json.dumps({"content": "Meine Straße ist schön " * 300})  # \u00df on disk
    conn.executemany("INSERT INTO t VALUES (?)", [(text,)] * 10)
    conn.commit()
    conn.execute("DELETE FROM t")
    conn.commit()
    conn.close()
    assert "Straße".encode() not in path.read_bytes()  # only the escaped form is there
    hits = scan_sqlite_file(path, Matcher("STRASSE IST SCHÖN"))
    assert any("free page" in f.where for f in hits), hits
    assert scan_sqlite_rows(path, Matcher("STRASSE"), None) == []  # no live row


def fake_db(pages: list[bytes], page_size: int = 4096) -> bytes:
    """Bytes laid out in pages, with the page size where SQLite's header keeps it."""
    data = bytearray(b"".join(p.ljust(page_size, b"\x00") for p in pages))
    data[0:16] = b"SQLite format 3\x00"
    data[16:18] = page_size.to_bytes(2, "big")
    return bytes(data)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (b"Stra" + "ß".encode()[:1], "ß".encode()[1:] + b"e Nord"),  # inside a char
        (b'"Stra\\u00', b'df\\u0065 Nord"'),  # inside an escape
        (b"Cafe", "\u0301 Nord".encode()),  # between a letter and its accent
    ],
)
def test_a_phrase_straddling_two_pages_is_found(
    tmp_path: Path, before: bytes, after: bytes
) -> None:
    page_size = 4096
    first = b"\x01" * 100 + b"x" * (page_size - 100 - len(before)) + before
    path = tmp_path / "x.db"
    path.write_bytes(fake_db([first, after, b""]))
    assert path.read_bytes()[page_size - len(before) : page_size] == before
    typed = "STRASSE NORD" if b"Stra" in before else "café nord"
    hits = scan_sqlite_file(path, Matcher(typed))
    assert [f.where for f in hits] == ["x.db page 1"], hits


def test_a_match_longer_than_the_overlap_is_still_reported(tmp_path: Path) -> None:
    # A whitespace run folds to one space, however long: "STRASSE", 100 000 newlines, "nord".
    path = tmp_path / "x.db"
    path.write_bytes(fake_db([b"\x01" * 100 + b"STRASSE" + b"\n" * 100_000 + b"nord"]))
    hits = scan_sqlite_file(path, Matcher("Straße Nord"))
    assert [f.where for f in hits] == ["x.db (across pages 1-25)"], hits


def test_a_phrase_straddling_two_blocks_of_a_file_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file is decoded a block at a time (8 MiB); here blocks of two pages, the phrase on the
    # boundary between the first block's last page and the second block's first.
    monkeypatch.setattr(audit_module, "_BLOCK", 2 * 4096)
    second = b"\x02" * (4096 - 6) + b"Stra\xc3\x9f"
    path = tmp_path / "x.db"
    path.write_bytes(fake_db([b"\x01" * 100, second, b"e NORD", b""]))
    hits = scan_sqlite_file(path, Matcher("strasse nord"))
    assert [f.where for f in hits] == ["x.db page 2"], hits


@pytest.mark.parametrize("shift", [-40, -12, -5, 0, 7])
def test_long_texts_are_folded_in_windows_that_overlap(shift: int) -> None:
    m = Matcher("Straße  Nord")
    step = audit_module._WINDOW - m.reach
    for at in (step + shift, audit_module._WINDOW + shift, 2 * step + shift):
        text = "a" * at + "STRASSE\t \n NORD" + "b" * (3 * audit_module._WINDOW)
        assert m.found_in(text), at
        assert not Matcher("Straße Süd").found_in(text)


ALPHABET = [
    *"asSeifkKσΣςιAÅ",
    "ß",
    "ẞ",
    "é",
    "e\u0301",
    "\u0301",
    "\u0323",
    "\u030a",
    "ﬁ",
    "İ",
    "\u212a",  # Kelvin sign: folds to k
    "\u212b",  # Angstrom sign
    "\u0345",  # combining ypogegrammeni: folds to ι
    "¨",  # folds to a space and a combining diaeresis
    " ",
    "\t",
    "\n",
    "\xa0",
    "\u3000",
    "\udcc3",  # a byte that is not UTF-8, as decoded
]


def test_the_quick_test_agrees_with_textfold() -> None:
    """The audit's pre-test (`str.translate` through `fold` per character) is `fold` without
    spaces; so the audit finds exactly what `bot.textfold.contains` finds."""
    rng = random.Random(19)
    checked = found = 0
    for _ in range(4000):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 14)))
        phrase = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 4)))
        assert text.translate(audit_module._TABLE) == fold(text).replace(" ", "")
        assert fold(" ".join(text.split())) == fold(text)  # the windows' squeezing
        try:
            m = Matcher(phrase)
        except ValueError:
            continue
        expected = contains(text, phrase)
        assert m.found_in(text) == expected, (text, phrase)
        checked += 1
        found += expected
    assert checked > 2000 and found > 100  # the cases were not all trivial


async def test_the_in_process_cache_is_read_as_written() -> None:
    cache = MemoryCache()
    await cache.set_json("bot:hot:x", {"content": "meine Straße"}, ttl=60)  # json.dumps
    assert audit_module.scan_memory_cache(cache, Matcher("STRASSE"))
    assert not audit_module.scan_memory_cache(cache, Matcher("strase"))


# --- creating nothing, seeing the WAL ----------------------------------------------------------


async def test_the_audit_of_a_closed_bot_creates_nothing(make_app: Any, tmp_path: Path) -> None:
    app = await make_app()
    await say(app, "I live on Hauptstraße 5", user="UA", platform="console", team="local")
    await app.close()
    data = tmp_path / "data"
    before = listing(data)
    assert not any(name.endswith(("-wal", "-shm")) for name in before), before  # closed cleanly

    hit = audit_cli(data, "--user", USER, "--text", "HAUPTSTRASSE 5")
    assert hit.returncode == 1, hit.stdout + hit.stderr
    assert "FOUND sqlite: bot.db table messages" in hit.stdout
    assert listing(data) == before

    clean = audit_cli(data, "--user", "console:local:UZ", "--text", "Nebenstraße")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert listing(data) == before


BOT_RUN = """
import asyncio, os, sys
from pathlib import Path
from bot.keys import SessionKey
from bot.stores.records import NewMessage
from bot.stores.sqlite import SqliteStore

async def main(path: str, said: str, speaker: str) -> None:
    store = await SqliteStore.open(Path(path))
    if not said:
        await store.close()  # a clean stop: everything checkpointed, no WAL left
        return
    message = NewMessage(role="user", content=said, speaker=speaker, turn_id="t1")
    await store.append(SessionKey("console", "local", "dm-UA"), [message])
    os._exit(0)  # killed: no close, no checkpoint; the message is in the WAL only

asyncio.run(main(*sys.argv[1:]))
"""


def run_bot(path: Path, said: str = "", speaker: str = "") -> None:
    """The store in a process of its own (a bot that stops cleanly, or is killed)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-c", BOT_RUN, str(path), said, speaker]
    subprocess.run(cmd, check=True, env=env, timeout=60)


def test_a_phrase_only_in_the_wal_is_found_and_nothing_changes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    run_bot(data / DB_FILENAME)  # the schema, checkpointed
    said = "Ich wohne in der Gartenstraße, café au lait"
    run_bot(data / DB_FILENAME, said, USER)
    wal = data / (DB_FILENAME + "-wal")
    assert said.encode() in wal.read_bytes()
    assert said.encode() not in (data / DB_FILENAME).read_bytes()  # not checkpointed
    before = listing(data)

    hit = audit_cli(data, "--user", "console:local:UZ", "--text", "GARTENSTRASSE, CAFE\u0301")
    assert hit.returncode == 1, hit.stdout + hit.stderr
    assert "FOUND sqlite: bot.db table messages (1 row(s) hold the phrase)" in hit.stdout
    assert "FOUND sqlite: bot.db-wal (write-ahead log)" in hit.stdout
    keyed = audit_cli(data, "--user", USER, "--text", "not said")  # the row is the person's
    assert keyed.returncode == 1, keyed.stdout + keyed.stderr
    assert "bot.db table messages (1 record(s) of this person)" in keyed.stdout
    assert listing(data) == before


def test_a_wal_past_its_last_commit_or_of_another_generation_is_not_applied(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.db"
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("CREATE TABLE t (doc TEXT)")
    writer.execute("INSERT INTO t VALUES ('committed Straße')")
    writer.commit()
    try:
        data = path.read_bytes()
        wal = (tmp_path / "x.db-wal").read_bytes()
    finally:
        writer.close()
    m = Matcher("STRASSE")
    image = audit_module.with_wal(data, wal)
    assert m.found_in(image.decode("utf-8", "surrogateescape"))
    assert "Straße".encode() not in data  # the row is in the WAL only
    assert audit_module.with_wal(data, None) == audit_module.with_wal(data, b"")
    torn = wal[:-100]  # the last (commit) frame cut short: nothing committed remains
    assert not m.found_in(audit_module.with_wal(data, torn).decode("utf-8", "surrogateescape"))
    salted = bytearray(wal)
    salted[16] ^= 0xFF  # another generation's header: its frames are not this WAL's
    assert not m.found_in(
        audit_module.with_wal(data, bytes(salted)).decode("utf-8", "surrogateescape")
    )


# --- reading only what exists: exit 3 ----------------------------------------------------------


def test_a_missing_or_mistyped_data_dir_is_exit_3_and_stays_missing(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    gone = audit_cli(missing, "--user", USER, "--text", "Straße")
    assert gone.returncode == EXIT_UNREADABLE, gone.stdout + gone.stderr
    assert "does not exist" in gone.stderr and len(gone.stderr.splitlines()) == 1
    assert "Found nowhere" not in gone.stdout and "Traceback" not in gone.stderr
    assert not missing.exists()

    typo = tmp_path / "home"  # a directory, but not the bot's
    typo.mkdir()
    (typo / "notes.txt").write_text("hello")
    before = listing(typo)
    wrong = audit_cli(typo, "--user", USER, "--text", "Straße")
    assert wrong.returncode == EXIT_UNREADABLE, wrong.stdout + wrong.stderr
    assert f"holds no {DB_FILENAME}" in wrong.stderr
    assert listing(typo) == before

    a_file = tmp_path / "data.txt"
    a_file.write_text("not a directory")
    not_dir = audit_cli(a_file, "--user", USER, "--text", "Straße")
    assert not_dir.returncode == EXIT_UNREADABLE and "not a directory" in not_dir.stderr


async def test_a_missing_store_directory_in_process_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match="does not exist"):
        await audit(phrase="x", data_dir=tmp_path / "nope")
    with pytest.raises(AuditError, match="does not exist"):
        scan_sqlite_dir(tmp_path / "nope", Matcher("x"), None)
    assert not (tmp_path / "nope").exists()


async def test_unreachable_redis_is_exit_3(tmp_path: Path) -> None:
    data = tmp_path / "data"
    await (await SqliteStore.open(data / DB_FILENAME)).close()
    down = audit_cli(
        data, "--user", USER, "--text", "Straße", REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"
    )
    assert down.returncode == EXIT_UNREADABLE, down.stdout + down.stderr
    assert "cannot read Redis" in down.stderr and "Traceback" not in down.stderr


def test_unreachable_mongodb_is_exit_3(tmp_path: Path) -> None:
    # MongoDB and no inbox: nothing is kept in BOT_DATA_DIR, so its absence is no error here.
    down = audit_cli(
        tmp_path / "data",
        "--user",
        USER,
        "--text",
        "Straße",
        MONGODB_URI=f"mongodb://127.0.0.1:{free_port()}/",
        BOT_INBOX="off",
    )
    assert down.returncode == EXIT_UNREADABLE, down.stdout + down.stderr
    assert "cannot read MongoDB" in down.stderr and "Traceback" not in down.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.mongo
@pytest.mark.redis
def test_mongodb_and_redis_are_read_folded_and_left_as_they_were(
    mongoeco_uri: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    db_name = f"t{uuid.uuid4().hex[:10]}"
    mongo: MongoClient[dict[str, Any]] = MongoClient(mongoeco_uri)
    client = sync_redis.Redis.from_url(redis_url)
    try:
        mongo[db_name]["messages"].insert_one({"doc": {"content": "un cafe\u0301 noir"}})
        # As the cache writes it: json.dumps, so "\u00df" on the wire.
        client.set(f"{redis_prefix}hot:x", json.dumps({"content": "Meine Straße"}), ex=60)
        client.hset(f"{redis_prefix}inbox:body:1", mapping={"body": "Gartenstraße 1"})
        keys = sorted(client.scan_iter(match=f"{redis_prefix}*"))
        collections = sorted(mongo[db_name].list_collection_names())
        settings = {
            "MONGODB_URI": mongoeco_uri,
            "MONGODB_DB": db_name,
            "REDIS_URL": redis_url,
            "BOT_REDIS_PREFIX": redis_prefix,
        }
        data = tmp_path / "data"  # MongoDB and Redis: nothing kept there, none needed

        for typed, where in [
            ("CAFÉ NOIR", "FOUND mongodb: collection messages (1 document(s))"),
            ("meine STRASSE", f"FOUND redis: key {redis_prefix}hot:x"),
            ("gartenstrasse", f"FOUND redis: key {redis_prefix}inbox:body:1"),
        ]:
            hit = audit_cli(data, "--user", USER, "--text", typed, **settings)
            assert hit.returncode == 1, hit.stdout + hit.stderr
            assert where in hit.stdout, hit.stdout
        nowhere = audit_cli(data, "--user", USER, "--text", "Nebenstraße", **settings)
        assert nowhere.returncode == 0, nowhere.stdout + nowhere.stderr
        unused = f"t{uuid.uuid4().hex[:10]}"  # a database nobody wrote: read, not created
        empty = audit_cli(
            data, "--user", USER, "--text", "Nebenstraße", **{**settings, "MONGODB_DB": unused}
        )
        assert empty.returncode == 0, empty.stdout + empty.stderr
        assert unused not in mongo.list_database_names()
        assert db_name in mongo.list_database_names()  # the listing can tell

        assert sorted(client.scan_iter(match=f"{redis_prefix}*")) == keys
        assert sorted(mongo[db_name].list_collection_names()) == collections
        assert not data.exists()
    finally:
        mongo.drop_database(db_name)
        mongo.close()
        client.close()


# --- bad input: exit 2, one line ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "phrase", "says"),
    [
        (USER, "x" * (MAX_PHRASE + 1), f"1-{MAX_PHRASE} characters"),
        (USER, " \t\n ", f"1-{MAX_PHRASE} characters"),
        ("console:local:", "Straße", "PLATFORM:TEAM:USER"),
        ("a:b:c:d", "Straße", "PLATFORM:TEAM:USER"),
        ("x" * 100_000, "Straße", "PLATFORM:TEAM:USER"),
        ("console:local:U\nA", "Straße", None),  # a newline in an id is the id's affair
    ],
)
async def test_bad_input_is_exit_2_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    user: str,
    phrase: str,
    says: str | None,
) -> None:
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.chdir(tmp_path)  # no developer's .env either
    settings = Settings(bot_data_dir=tmp_path / "absent")
    code = await run_audit(settings, user, phrase)
    err = capsys.readouterr().err
    if says is None:  # accepted input: the missing directory is what stops it
        assert code == EXIT_UNREADABLE, err
    else:
        assert code == EXIT_USAGE and says in err, err
    assert len(err.splitlines()) == 1 and len(err) < 600, err
    assert not (tmp_path / "absent").exists()


def test_an_over_long_phrase_is_refused_before_it_is_folded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folded: list[str] = []
    monkeypatch.setattr(audit_module, "fold", lambda text: folded.append(text) or text)
    with pytest.raises(ValueError, match=f"1-{MAX_PHRASE} characters"):
        Matcher("ß" * 10_000_000)
    assert folded == []
    Matcher("ok")
    assert folded == ["ok"]


def test_the_cli_refuses_a_long_phrase_without_a_traceback(tmp_path: Path) -> None:
    bad = audit_cli(tmp_path / "data", "--user", USER, "--text", "é" * (MAX_PHRASE + 1))
    assert bad.returncode == EXIT_USAGE, bad.stdout + bad.stderr
    assert bad.stderr.strip() == f"bot: --text: the phrase must be 1-{MAX_PHRASE} characters"
