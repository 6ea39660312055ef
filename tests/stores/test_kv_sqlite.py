"""Durable write marks without Redis: the executor's idempotency entries in the SQLite file,
surviving the process that wrote them (real SQLite, real apps built by the production factory)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bot.stores.kv_sqlite import SqliteKV
from bot.stores.sqlite import SqliteStore


async def test_values_expire_and_can_be_deleted(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "bot.db")
    try:
        kv = await SqliteKV.open(store.worker)
        await kv.set_json("a", {"started": True}, ttl=0.2)
        await kv.set_json("b", [1, 2], ttl=60)
        assert await kv.get_json("a") == {"started": True}
        await asyncio.sleep(0.3)
        assert await kv.get_json("a") is None
        assert await kv.get_json("b") == [1, 2]
        await kv.delete("b")
        assert await kv.get_json("b") is None
    finally:
        await store.close()


async def test_an_embedded_app_keeps_write_marks_across_a_restart(make_app: Any) -> None:
    first = await make_app()
    marks = first.toolboxes.executor._cache
    assert isinstance(marks, SqliteKV)
    await marks.set_json("tools:idem:x", {"started": True, "call_id": "c1"}, ttl=60)
    await first.close()
    second = await make_app()  # the same data dir: the process after a restart
    assert await second.toolboxes.executor._cache.get_json("tools:idem:x") == {
        "started": True,
        "call_id": "c1",
    }


async def test_with_redis_the_marks_stay_in_the_shared_cache(
    make_app: Any, redis_url: str, redis_prefix: str
) -> None:
    app = await make_app(redis_url=redis_url, bot_redis_prefix=redis_prefix)
    assert app.toolboxes.executor._cache is app.cache
