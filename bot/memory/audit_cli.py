"""`bot memory audit --user PLATFORM:TEAM:USER --text PHRASE`: print where a phrase (or a record
of that person) still occurs in any store the bot writes, matched the way people type it (see
`bot.memory.audit` for what matches). Read-only: it opens nothing for writing and creates
nothing (no file, no directory, no key, no collection, no database).

Exit 0 found nowhere, 1 found, 2 bad input (a phrase over MAX_PHRASE characters is refused
before it is read further; our message is one line on stderr, argparse's own errors add its
usage line), 3 a store unreadable: an unreachable MongoDB or Redis, a file that cannot be read,
or a BOT_DATA_DIR that is missing, not a directory, or without the file the configuration keeps
there (`bot.db` without MONGODB_URI; `inbox.db` with MongoDB and no Redis, unless
BOT_INBOX=off): a mistyped BOT_DATA_DIR must not read as "found nowhere". With MongoDB and Redis
the bot keeps nothing there, so a missing BOT_DATA_DIR is simply not scanned."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bot.config import Settings
from bot.keys import PersonKey
from bot.memory.audit import AuditError, Finding, Matcher, audit
from bot.stores.inbox_sqlite import INBOX_FILENAME
from bot.stores.redis_cache import DEFAULT_PREFIX
from bot.stores.sqlite import DB_FILENAME

EXIT_NONE, EXIT_FOUND, EXIT_USAGE, EXIT_UNREADABLE = 0, 1, 2, 3
MAX_USER = 300


def parse_person(text: str) -> PersonKey:
    """`slack:T123:U456`, `discord:<guild or @dm>:<user>`, `console:local:<user>`."""
    shown = repr(text[:MAX_USER]) + ("…" if len(text) > MAX_USER else "")
    parts = text.split(":") if len(text) <= MAX_USER else []
    if len(parts) != 3:
        raise ValueError(f"--user must be PLATFORM:TEAM:USER, got {shown}")
    try:
        return PersonKey(*parts)
    except ValueError:
        raise ValueError(f"--user must be PLATFORM:TEAM:USER, got {shown}") from None


def kept_in_data_dir(settings: Settings) -> list[str]:
    """The files the configuration keeps in BOT_DATA_DIR, which must be there to be read."""
    if not settings.mongodb_uri:
        return [DB_FILENAME]
    if not settings.redis_url and settings.bot_inbox != "off":
        return [INBOX_FILENAME]
    return []


def data_dir_to_scan(settings: Settings) -> Path | None:
    """BOT_DATA_DIR, or None when the configuration keeps nothing there and there is none.
    AuditError when a file the configuration keeps there is missing: a mistyped BOT_DATA_DIR
    (or a bot that never ran there) must not read as "found nowhere"."""
    data_dir = Path(settings.bot_data_dir)
    expected = kept_in_data_dir(settings)
    if not expected and not data_dir.exists():
        return None
    if not data_dir.is_dir():
        why = "is not a directory" if data_dir.exists() else "does not exist"
        raise AuditError(f"BOT_DATA_DIR={data_dir} {why}: the audit cannot say nowhere")
    for name in expected:
        if not (data_dir / name).is_file():
            raise AuditError(
                f"BOT_DATA_DIR={data_dir} holds no {name}: not the bot's data directory"
                " (mistyped?), so the audit cannot say nowhere"
            )
    return data_dir


async def run_audit(settings: Settings, user: str, phrase: str) -> int:
    try:
        person = parse_person(user)
    except ValueError as exc:
        print(f"bot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        Matcher(phrase)  # its length is checked before anything else reads it
    except ValueError as exc:
        print(f"bot: --text: {exc}", file=sys.stderr)
        return EXIT_USAGE
    mongo: Any = None
    redis_client: Any = None
    try:
        store: Any = None
        data_dir = data_dir_to_scan(settings)
        try:
            if settings.mongodb_uri:
                from pymongo import AsyncMongoClient

                mongo = AsyncMongoClient(settings.mongodb_uri, serverSelectionTimeoutMS=5000)
                store = _MongoView(mongo[settings.mongodb_db])
            if settings.redis_url:
                import redis.asyncio as redis

                redis_client = redis.Redis.from_url(
                    settings.redis_url, socket_timeout=5, socket_connect_timeout=5
                )
        except Exception as exc:
            raise AuditError(f"cannot connect: {' '.join(str(exc).split())[:200]}") from exc
        findings = await audit(
            phrase=phrase,
            person=person,
            store=store,
            # Also with MongoDB: the inbox (without Redis) and write marks live in inbox.db there.
            data_dir=data_dir,
            redis_client=redis_client,
            redis_prefix=settings.bot_redis_prefix or DEFAULT_PREFIX,
        )
    except AuditError as exc:
        print(f"bot: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    finally:
        if mongo is not None:
            await mongo.close()
        if redis_client is not None:
            await redis_client.aclose()
    return report(findings, person, phrase)


class _MongoView:
    def __init__(self, db: Any) -> None:
        self.db = db


def report(findings: list[Finding], person: PersonKey, phrase: str) -> int:
    for f in findings:
        print(f"FOUND {f.store}: {f.where}" + (f" ({f.detail})" if f.detail else ""))
    if findings:
        print(f"{len(findings)} place(s) still hold the phrase or records of {person.id}.")
        return EXIT_FOUND
    print(f"Found nowhere: no store holds {phrase!r} or any record of {person.id}.")
    return EXIT_NONE
