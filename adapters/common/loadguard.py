"""Admission control by event-loop lag: keep the 3-second ack fast when turns eat the CPU.

Acks and turns share one event loop. Turns are mostly waiting on the model, so hundreds can run
at once; but when many are in their CPU-heavy phases the loop falls behind and every ack waits
behind them. This guard measures how late a short timer fires (loop lag) and, while the lag is
above a threshold, lets new turns start only a few per tick. Running turns are never paused;
acks are never held back. A healthy loop admits up to `per_tick` new turns per tick (bursts are
smoothed, not refused); an overloaded one admits one every few ticks, so queued turns progress.

The timer runs only while turns are being admitted: it stops after `idle_after` seconds with no
admission and no waiter, and the next admission starts it again, so an idle bot's event loop
sleeps (ticking forever cost about 25 ms of CPU a second, a hundred wake-ups, doing nothing).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib

from bot import metrics


class LoopGuard:
    MIN_PROGRESS_TICKS = 5

    def __init__(
        self,
        *,
        tick: float = 0.01,
        max_lag: float = 0.015,
        per_tick: int = 20,
        idle_after: float = 2.0,
    ) -> None:
        self._tick = tick
        self._max_lag = max_lag
        self._per_tick = per_tick
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._budget = per_tick
        self._overloaded = False
        self._starved_ticks = 0
        self._idle_ticks = max(1, round(idle_after / tick))
        self._quiet = 0
        self._started = False
        self._task: asyncio.Task[None] | None = None
        self.lag = 0.0

    def start(self) -> None:
        self._started = True
        self._wake()

    @property
    def ticking(self) -> bool:
        return self._task is not None and not self._task.done()

    def _wake(self) -> None:
        self._quiet = 0
        if self._started and not self.ticking:
            self._task = asyncio.create_task(self._monitor(), name="loop-guard")

    async def stop(self) -> None:
        self._started = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def admit(self) -> None:
        """Return when a new turn may start: at once, unless this tick's budget is spent."""
        if not self._started:
            return
        self._wake()
        if not self._waiters and self._budget > 0:
            self._budget -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            raise

    async def _monitor(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiters or self._quiet < self._idle_ticks:
            self._quiet += 1
            started = loop.time()
            await asyncio.sleep(self._tick)
            self.lag = max(0.0, loop.time() - started - self._tick)
            metrics.EVENT_LOOP_LAG.set(self.lag)
            self._overloaded = self.lag > self._max_lag
            if not self._overloaded:
                self._budget, self._starved_ticks = self._per_tick, 0
            else:
                # Admit nothing while the loop is behind, but one turn every few ticks so the
                # queue always moves even under sustained load.
                self._starved_ticks += 1
                self._budget = 1 if self._starved_ticks >= self.MIN_PROGRESS_TICKS else 0
                if self._budget:
                    self._starved_ticks = 0
            while self._waiters and self._budget > 0:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    self._budget -= 1
        self._budget, self._starved_ticks, self.lag = self._per_tick, 0, 0.0
        metrics.EVENT_LOOP_LAG.set(0.0)
