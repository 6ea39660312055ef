"""KeyLocks: the one keyed-lock helper (the bot's session turns, the executor's write calls)."""

from __future__ import annotations

import asyncio

from tools.keylocks import KeyLocks


async def test_one_holder_per_key_in_arrival_order_and_forgotten_after() -> None:
    locks: KeyLocks[str] = KeyLocks()
    order: list[str] = []
    first_in, release_first = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with locks.hold("s1"):
            first_in.set()
            await release_first.wait()
            order.append("first")

    async def waiter(name: str) -> None:
        async with locks.hold("s1"):
            order.append(name)

    holder = asyncio.create_task(first())
    await first_in.wait()
    waiters = [asyncio.create_task(waiter(n)) for n in ("a", "b", "c")]
    for _ in range(3):  # let each waiter reach the lock
        await asyncio.sleep(0)
    assert locks.users("s1") == 4
    async with locks.hold("other"):  # another key is not blocked
        assert locks.users("other") == 1
    release_first.set()
    await asyncio.gather(holder, *waiters)
    assert order == ["first", "a", "b", "c"]
    assert len(locks) == 0 and locks.users("s1") == 0


async def test_a_cancelled_waiter_leaves_no_entry() -> None:
    locks: KeyLocks[str] = KeyLocks()
    async with locks.hold("k"):
        waiting = asyncio.create_task(locks.hold("k").__aenter__())
        await asyncio.sleep(0)
        assert locks.users("k") == 2
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert locks.users("k") == 1
    assert len(locks) == 0


async def test_the_app_and_the_executor_share_it(make_app: object) -> None:
    """Both lock maps are this one helper, and neither keeps an entry after the work is done."""
    from bot.app import BotApp
    from tests.helpers import say

    app = await make_app()  # type: ignore[operator]
    assert isinstance(app, BotApp)
    await say(app, "hello")
    assert isinstance(app.session_locks, KeyLocks) and len(app.session_locks) == 0
    assert isinstance(app.toolboxes.executor._locks, KeyLocks)
