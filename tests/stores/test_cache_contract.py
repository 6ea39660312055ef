"""The cache contract, run against the in-process cache and a real Redis."""

from __future__ import annotations

import asyncio
import time

import pytest

from bot.stores.protocols import Cache, LockTimeout


async def test_json_values_round_trip(cache: Cache) -> None:
    value = {"summary": "hi", "n": [1, 2.5, True], "nested": {"x": None}}
    await cache.set_json("state:s1", value, ttl=30)
    assert await cache.get_json("state:s1") == value
    assert await cache.get_json("state:missing") is None
    await cache.set_json("state:s1", "replaced", ttl=30)
    assert await cache.get_json("state:s1") == "replaced"
    await cache.delete("state:s1")
    await cache.delete("state:s1")  # deleting a missing key is fine
    assert await cache.get_json("state:s1") is None


async def test_returned_values_are_copies(cache: Cache) -> None:
    original = {"items": [1]}
    await cache.set_json("k", original, ttl=30)
    original["items"].append(2)
    got = await cache.get_json("k")
    assert got is not None
    got["items"].append(3)
    assert await cache.get_json("k") == {"items": [1]}


async def test_values_expire(cache: Cache) -> None:
    await cache.set_json("short", 1, ttl=0.15)
    await cache.set_json("long", 2, ttl=30)
    assert await cache.get_json("short") == 1
    await asyncio.sleep(0.3)
    assert await cache.get_json("short") is None
    assert await cache.get_json("long") == 2


async def test_set_nx_deduplicates_until_expiry(cache: Cache) -> None:
    results = await asyncio.gather(*(cache.set_nx("event:Ev1", ttl=0.2) for _ in range(5)))
    assert sorted(results) == [False, False, False, False, True]
    assert not await cache.set_nx("event:Ev1", ttl=0.2)
    assert await cache.set_nx("event:Ev2", ttl=0.2)
    await asyncio.sleep(0.35)
    assert await cache.set_nx("event:Ev1", ttl=0.2)


async def test_non_positive_ttl_is_refused(cache: Cache) -> None:
    with pytest.raises(ValueError):
        await cache.set_json("k", 1, ttl=0)
    with pytest.raises(ValueError):
        await cache.set_nx("k", ttl=-1)


async def test_lock_is_mutually_exclusive(cache: Cache) -> None:
    inside, most, done = 0, 0, []

    async def worker(i: int) -> None:
        nonlocal inside, most
        async with cache.lock("session:s1", ttl=5, wait=5):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.005)
            done.append(i)
            inside -= 1

    await asyncio.gather(*(worker(i) for i in range(10)))
    assert most == 1 and sorted(done) == list(range(10))


async def test_lock_wait_times_out(cache: Cache) -> None:
    async with cache.lock("session:s2", ttl=5, wait=1):
        started = time.monotonic()
        with pytest.raises(LockTimeout):
            async with cache.lock("session:s2", ttl=5, wait=0.1):
                pytest.fail("acquired a held lock")
        assert 0.09 <= time.monotonic() - started < 1.0
    async with cache.lock("session:s2", ttl=5, wait=0):  # free again once released
        pass


async def test_lock_is_released_when_the_body_raises(cache: Cache) -> None:
    with pytest.raises(RuntimeError):
        async with cache.lock("session:s3", ttl=5, wait=1):
            raise RuntimeError("turn failed")
    async with cache.lock("session:s3", ttl=5, wait=0):
        pass


async def test_lock_expires_and_a_stale_holder_cannot_release_it(cache: Cache) -> None:
    second_in = asyncio.Event()
    release_second = asyncio.Event()

    async def second() -> None:
        async with cache.lock("session:s4", ttl=5, wait=2):
            second_in.set()
            await release_second.wait()

    async with cache.lock("session:s4", ttl=0.2, wait=1):
        task = asyncio.create_task(second())
        await asyncio.wait_for(second_in.wait(), 2)  # got it after our TTL ran out
    # Leaving our expired lock must not have released the second holder's.
    with pytest.raises(LockTimeout):
        async with cache.lock("session:s4", ttl=5, wait=0.05):
            pass
    release_second.set()
    await task


async def test_a_kept_alive_lock_outlasts_its_ttl_while_held(cache: Cache) -> None:
    async with cache.lock("session:s5", ttl=0.3, wait=1, keep_alive=True):
        await asyncio.sleep(1.0)  # three TTLs: renewed meanwhile
        with pytest.raises(LockTimeout):
            async with cache.lock("session:s5", ttl=5, wait=0.05):
                pass
    async with cache.lock("session:s5", ttl=5, wait=0):  # released, so free at once
        pass


async def test_locks_do_not_collide_with_values(cache: Cache) -> None:
    async with cache.lock("k", ttl=5, wait=1):
        assert await cache.set_nx("k", ttl=5)
        assert await cache.get_json("k") is not None


async def test_ping(cache: Cache) -> None:
    assert await cache.ping()


async def test_incr_adds_amounts_per_key_negative_too(cache: Cache) -> None:
    """Budgets reserve and settle with amounts (a settle may give part of a reservation back)."""
    assert await cache.incr(["spent:a", "spent:b"], ttl=60.0, amounts=[500, 7]) == [500, 7]
    results = await asyncio.gather(
        *(cache.incr(["spent:a"], ttl=60.0, amounts=[100]) for _ in range(10))
    )
    assert sorted(r[0] for r in results) == list(range(600, 1600, 100))
    assert await cache.incr(["spent:a", "spent:b"], ttl=60.0, amounts=[-250, 0]) == [1250, 7]
    assert await cache.incr(["spent:new"], ttl=60.0, amounts=[-3]) == [-3]


async def test_incr_counts_per_key_in_a_fixed_window(cache: Cache) -> None:
    assert await cache.incr(["rate:a", "rate:b"], ttl=1.0) == [1, 1]
    assert await cache.incr(["rate:a"], ttl=1.0) == [2]
    results = await asyncio.gather(*(cache.incr(["rate:a", "rate:b"], ttl=1.0) for _ in range(5)))
    assert sorted(r[0] for r in results) == [3, 4, 5, 6, 7]
    assert sorted(r[1] for r in results) == [2, 3, 4, 5, 6]
    await asyncio.sleep(0.6)
    assert await cache.incr(["rate:a"], ttl=1.0) == [8]  # does not push the expiry back
    await asyncio.sleep(0.6)
    assert await cache.incr(["rate:a"], ttl=1.0) == [1]
