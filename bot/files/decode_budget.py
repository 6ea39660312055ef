"""A process-wide budget of bytes for image decodes, shared by every turn, loop and thread.

Pillow decodes a PNG whole before anything can be scaled, so a 155 KB file of 6320x6320 pixels
costs 160 MB while it is open, and six of them at once cost gigabytes. Each decode reserves its
estimated cost (`bot.files.images.plan_image`) here first; reservations are granted in arrival
order (a large image is not starved by a stream of small ones) while they fit, and one that
waits longer than its timeout gives up with `TimeoutError` (the caller tells the person).

Waiters are futures of their own event loop, woken thread-safely, so one budget serves the
whole process whatever loop or thread releases (a decode cancelled mid-way releases when its
thread is done, not before: the memory is in use until then).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass


@dataclass(eq=False, slots=True)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    amount: int


def _grant(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class DecodeBudget:
    """At most `capacity` bytes reserved at once; FIFO; thread- and loop-safe."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._used = 0
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    @property
    def used(self) -> int:
        return self._used

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self, amount: int, timeout: float) -> None:
        """Reserve `amount` bytes, waiting at most `timeout` s (then `TimeoutError`).

        `amount` over the capacity is a caller's bug (`ValueError`): refuse such images first.
        """
        if amount > self.capacity:
            raise ValueError(f"{amount} bytes is more than the whole budget ({self.capacity})")
        amount = max(amount, 0)
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._waiters and self._used + amount <= self.capacity:
                self._used += amount
                return
            waiter = _Waiter(loop, loop.create_future(), amount)
            self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter.future
        except BaseException:
            with self._lock:
                granted = waiter not in self._waiters
                if not granted:
                    self._waiters.remove(waiter)
                    self._wake_locked()  # it may have held back smaller ones behind it
            if granted:  # the grant raced the timeout or a cancel: hand it back
                self.release(amount)
            raise

    def release(self, amount: int) -> None:
        """Hand back a reservation (from any thread)."""
        with self._lock:
            self._used -= max(amount, 0)
            self._wake_locked()

    def _wake_locked(self) -> None:
        while self._waiters and self._used + self._waiters[0].amount <= self.capacity:
            waiter = self._waiters.popleft()
            self._used += waiter.amount
            try:
                waiter.loop.call_soon_threadsafe(_grant, waiter.future)
            except RuntimeError:  # its loop is closed: nobody will use the grant
                self._used -= waiter.amount
