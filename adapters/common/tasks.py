"""Background work started after an event is accepted, tracked so shutdown can wait for it.

Adapters (Slack after its 3-second ack, Discord after a gateway dispatch) only hand each turn to
this tracker, which keeps a strong reference to every task (asyncio itself keeps only weak ones)
and lets `drain()` finish in-flight answers on SIGTERM instead of dropping them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

from adapters.common.logs import emit
from bot import metrics

_LOG = logging.getLogger(__name__)
T = TypeVar("T")


class TaskTracker:
    def __init__(self, platform: str = "slack") -> None:
        self._platform = platform
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        if self._closed:
            coro.close()
            raise RuntimeError("shutting down")
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            metrics.ERRORS.labels(self._platform, "task_failed").inc()
            emit(
                _LOG,
                f"{self._platform}_task_failed",
                logging.ERROR,
                task=task.get_name(),
                error=type(exc).__name__,
            )

    def __len__(self) -> int:
        return len(self._tasks)

    async def drain(self, grace: float) -> int:
        """Stop taking work, wait up to `grace` seconds for running tasks, cancel the rest."""
        self._closed = True
        if not self._tasks:
            return 0
        pending = set(self._tasks)
        emit(_LOG, f"{self._platform}_draining", tasks=len(pending), grace=grace)
        _, still = await asyncio.wait(pending, timeout=grace)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=1.0)
        return len(still)
