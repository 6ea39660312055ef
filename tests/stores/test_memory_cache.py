"""In-process cache specifics: FIFO lock hand-off (turns of a session run in arrival order)."""

from __future__ import annotations

import asyncio

import pytest

from bot.stores.memory_cache import MemoryCache
from bot.stores.protocols import LockTimeout


async def test_lock_waiters_are_served_in_arrival_order() -> None:
    cache, order = MemoryCache(), []

    async def turn(i: int) -> None:
        async with cache.lock("session:s", ttl=5, wait=5):
            order.append(i)
            await asyncio.sleep(0.001)

    tasks = []
    for i in range(10):
        tasks.append(asyncio.create_task(turn(i)))
        await asyncio.sleep(0)  # each task reaches the lock before the next is created
    await asyncio.gather(*tasks)
    assert order == list(range(10))


async def test_a_waiter_that_gives_up_does_not_block_the_next() -> None:
    cache = MemoryCache()
    async with cache.lock("k", ttl=5, wait=1):
        impatient = asyncio.create_task(_hold(cache, wait=0.05))
        patient = asyncio.create_task(_hold(cache, wait=2))
        with pytest.raises(LockTimeout):
            await impatient
    await asyncio.wait_for(patient, 1)


async def test_cancelled_waiter_leaves_the_queue() -> None:
    cache = MemoryCache()
    async with cache.lock("k", ttl=5, wait=1):
        waiter = asyncio.create_task(_hold(cache, wait=5))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    async with cache.lock("k", ttl=5, wait=0):
        pass
    assert not cache._waiters


async def _hold(cache: MemoryCache, *, wait: float) -> None:
    async with cache.lock("k", ttl=5, wait=wait):
        await asyncio.sleep(0.01)
