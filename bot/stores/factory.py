"""Pick the backends from configuration: MongoDB or embedded SQLite, Redis or in-process."""

from __future__ import annotations

from pathlib import Path

from pymongo.errors import ConfigurationError

from bot.stores.inbox import Inbox
from bot.stores.memory_cache import MemoryCache
from bot.stores.protocols import Cache, JsonKV, Store, StoreUnavailable
from bot.stores.redis_cache import DEFAULT_PREFIX, RedisCache
from bot.stores.resilient_cache import ResilientCache
from bot.stores.sqlite import DB_FILENAME, SqliteStore


class StoreConfigError(ValueError):
    """A store or cache setting is malformed; the message is one line naming the variable."""


async def open_store(*, mongodb_uri: str | None, mongodb_db: str, data_dir: Path) -> Store:
    """MongoDB when a URI is given (indexes ensured), else SQLite at `data_dir/bot.db`.

    Raises StoreConfigError for a malformed URI or database name, StoreUnavailable when the
    server does not answer.
    """
    if not mongodb_uri:
        try:
            return await SqliteStore.open(Path(data_dir) / DB_FILENAME)
        except (OSError, StoreUnavailable) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise StoreConfigError(
                f"BOT_DATA_DIR={data_dir} cannot hold the embedded store: {_one_line(reason)}"
            ) from exc
    from bot.stores.mongo import MongoStore  # keeps SQLite-only runs free of pymongo startup

    if not mongodb_uri.startswith(("mongodb://", "mongodb+srv://")):
        raise StoreConfigError("MONGODB_URI must start with mongodb:// or mongodb+srv://")
    if not mongodb_db or any(c in mongodb_db for c in '/\\. "$'):
        raise StoreConfigError(f"MONGODB_DB is not a valid database name: {mongodb_db!r}")
    try:
        return await MongoStore.open(mongodb_uri, mongodb_db)
    except (ConfigurationError, ValueError, TypeError) as exc:  # InvalidURI included
        raise StoreConfigError(
            f"MONGODB_URI is not a usable MongoDB URI: {_one_line(exc)}"
        ) from exc


def open_cache(*, redis_url: str | None, prefix: str = DEFAULT_PREFIX) -> Cache:
    """Redis (keys under `prefix`, BOT_REDIS_PREFIX) with an in-process fallback when a URL is
    given, else in-process only.

    Connects lazily: a Redis that is down at start is simply used once it answers.
    """
    if not redis_url:
        return MemoryCache()
    try:
        primary = RedisCache.from_url(redis_url, prefix=prefix)
    except ValueError as exc:
        raise StoreConfigError(f"REDIS_URL is not a valid Redis URL: {_one_line(exc)}") from exc
    return ResilientCache(primary, MemoryCache())


async def open_inbox(
    *,
    mode: str,
    redis_url: str | None,
    prefix: str,
    data_dir: Path,
    claim_after: float,
) -> Inbox | None:
    """The durable inbox (BOT_INBOX): Redis Streams when Redis is configured (shared by every
    replica), else a table in a SQLite file of its own under `data_dir` (`inbox.db`, with its own
    connection thread, so an ack never waits behind the conversation store's writes); None when
    off."""
    if mode == "off":
        return None
    if redis_url:
        from bot.stores.inbox_redis import RedisInbox

        return RedisInbox.from_url(redis_url, prefix=prefix, claim_after=claim_after)
    from bot.stores.inbox_sqlite import INBOX_FILENAME, SqliteInbox
    from bot.stores.sqlite_worker import SqliteWorker

    path = Path(data_dir) / INBOX_FILENAME
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return await SqliteInbox.open(SqliteWorker(path), claim_after=claim_after, owns_worker=True)


async def open_durable_kv(inbox: Inbox | None) -> JsonKV | None:
    """A key-value table that outlives the process, beside a SQLite inbox (which re-runs a
    crashed turn after a restart): where the composition keeps write tools' idempotency marks.
    None: the cache is right (with Redis it is shared and outlives any one process; with the
    inbox off nothing is re-run)."""
    from bot.stores.inbox_sqlite import SqliteInbox

    if not isinstance(inbox, SqliteInbox):
        return None
    from bot.stores.kv_sqlite import SqliteKV

    return await SqliteKV.open(inbox.worker)


def _one_line(reason: object) -> str:
    return " ".join(str(reason).split())[:300]
