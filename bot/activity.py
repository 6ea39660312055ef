"""How many turns this process is running, and a moment when it runs none.

Background work that only serves later conversations (indexing for episodic recall) waits for
such a moment, within a bound of its own, so that it never competes with the turns people are
waiting on for the event loop, the store's connection threads or the CPU. Counted in
`BotApp.run_turn`, so every platform's turns count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class TurnActivity:
    def __init__(self) -> None:
        self._running = 0
        self._quiet = asyncio.Event()
        self._quiet.set()

    @property
    def running(self) -> int:
        return self._running

    @contextmanager
    def turn(self) -> Iterator[None]:
        self._running += 1
        self._quiet.clear()
        try:
            yield
        finally:
            self._running -= 1
            if self._running == 0:
                self._quiet.set()

    async def quiet(self, timeout: float) -> bool:
        """Wait (at most `timeout` seconds) until no turn runs; False when the time ran out."""
        if self._running == 0:
            return True
        try:
            await asyncio.wait_for(self._quiet.wait(), max(timeout, 0.0))
        except TimeoutError:
            return False
        return True
