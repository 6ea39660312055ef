"""`bot memory audit` finds a person's words wherever the durable inbox keeps them: a Redis
stream under the bot's own prefix (BOT_REDIS_PREFIX), and `inbox.db` in the data directory when
the store is MongoDB. The entries are written by the real inboxes; the oracle is the phrase we
put in."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis as sync_redis
import redis.asyncio as redis

from bot.memory.audit import audit
from bot.stores.inbox import InboxItem
from bot.stores.inbox_redis import RedisInbox
from bot.stores.inbox_sqlite import INBOX_FILENAME, SqliteInbox
from bot.stores.sqlite import DB_FILENAME, SqliteStore
from bot.stores.sqlite_worker import SqliteWorker
from tests.memory.test_audit_cli import audit_cli

USER = "slack:T1:U1"


def mention(phrase: str) -> InboxItem:
    event = {"type": "app_mention", "user": "U1", "text": f"<@UBOT> {phrase}", "ts": "1.2"}
    return InboxItem(kind="slack.message", session="slack:T1:C1:1.2", body={"event": event})


@pytest.mark.redis
async def test_a_message_waiting_in_the_redis_inbox_is_found(
    redis_url: str, redis_prefix: str
) -> None:
    phrase = f"orca-{uuid.uuid4().hex[:8]}"
    box = RedisInbox.from_url(redis_url, prefix=redis_prefix)
    client = redis.Redis.from_url(redis_url)
    try:
        assert await box.put(mention(f"my badge is {phrase}")) is not None
        found = await audit(phrase=phrase, redis_client=client, redis_prefix=redis_prefix)
        # The entry's body is a key of its own (bot.stores.inbox_redis): found there.
        [where] = [f.where for f in found]
        assert where.startswith(f"key {redis_prefix}inbox:body:")
    finally:
        await client.aclose()
        await box.close()


@pytest.mark.redis
async def test_the_cli_scans_redis_under_bot_redis_prefix(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    phrase = f"orca-{uuid.uuid4().hex[:8]}"
    client = sync_redis.Redis.from_url(redis_url)
    try:
        client.set(f"{redis_prefix}hot:slack:T1:C1:-", f"my badge is {phrase}", ex=60)
    finally:
        client.close()
    data = tmp_path / "data"
    await (await SqliteStore.open(data / DB_FILENAME)).close()  # the store, without Mongo
    hit = audit_cli(
        data, "--user", USER, "--text", phrase, REDIS_URL=redis_url, BOT_REDIS_PREFIX=redis_prefix
    )
    assert hit.returncode == 1, hit.stdout + hit.stderr
    assert f"FOUND redis: key {redis_prefix}hot:" in hit.stdout


@pytest.mark.mongo
async def test_with_mongodb_the_inbox_file_in_the_data_dir_is_scanned(
    mongoeco_uri: str, tmp_path: Path
) -> None:
    phrase = f"orca-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "data"
    data.mkdir()
    box = await SqliteInbox.open(SqliteWorker(data / INBOX_FILENAME), owns_worker=True)
    try:
        assert await box.put(mention(f"my badge is {phrase}")) is not None
    finally:
        await box.close()
    db = f"t{uuid.uuid4().hex[:10]}"
    hit = audit_cli(data, "--user", USER, "--text", phrase, MONGODB_URI=mongoeco_uri, MONGODB_DB=db)
    assert hit.returncode == 1, hit.stdout + hit.stderr
    assert f"FOUND sqlite: {INBOX_FILENAME}" in hit.stdout
