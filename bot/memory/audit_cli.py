"""`bot memory audit --user PLATFORM:TEAM:USER --text PHRASE`: print where a phrase (or a record
of that person) still occurs in any store the bot writes. Read-only: it opens nothing for
writing and creates nothing. Exit 0 found nowhere, 1 found, 2 bad input, 3 a store unreadable."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bot.config import Settings
from bot.keys import PersonKey
from bot.memory.audit import MAX_PHRASE, AuditError, Finding, audit
from bot.stores.redis_cache import DEFAULT_PREFIX

EXIT_NONE, EXIT_FOUND, EXIT_USAGE, EXIT_UNREADABLE = 0, 1, 2, 3


def parse_person(text: str) -> PersonKey:
    """`slack:T123:U456`, `discord:<guild or @dm>:<user>`, `console:local:<user>`."""
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"--user must be PLATFORM:TEAM:USER, got {text!r}")
    return PersonKey(*parts)


async def run_audit(settings: Settings, user: str, phrase: str) -> int:
    try:
        person = parse_person(user)
    except ValueError as exc:
        print(f"bot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not phrase.strip() or len(phrase) > MAX_PHRASE:
        print(f"bot: --text must be 1-{MAX_PHRASE} characters", file=sys.stderr)
        return EXIT_USAGE
    mongo: Any = None
    redis_client: Any = None
    try:
        store: Any = None
        if settings.mongodb_uri:
            from pymongo import AsyncMongoClient

            mongo = AsyncMongoClient(settings.mongodb_uri, serverSelectionTimeoutMS=5000)
            store = _MongoView(mongo[settings.mongodb_db])
        if settings.redis_url:
            import redis.asyncio as redis

            redis_client = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
        data_dir = Path(settings.bot_data_dir)
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
