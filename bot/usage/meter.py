"""The meter: every model request's usage, priced, added to the day's rows and the metrics.

`record` is synchronous and small (a dict update and a few counter increments) so metering adds
nothing measurable to a turn; the rows reach the store in batches off the reply path, every
`FLUSH_SECONDS` and at shutdown (a process killed with -9 loses at most that much of the
record; budgets count on the shared counters, not on these rows). A server that sends no
`usage` is estimated with tiktoken and the row says how many requests were estimated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from bot.metrics import USAGE_COST, USAGE_TOKENS
from bot.stores.usage import UsageRow, UsageStore
from bot.usage.bill import Bill, current_bill
from bot.usage.budgets import MICROS
from bot.usage.prices import Prices

log = logging.getLogger(__name__)

FLUSH_SECONDS = 2.0
MAX_PENDING_ROWS = 10_000  # a store that stays down keeps at most this many rows waiting

Estimate = Callable[[Sequence[dict[str, Any]], str], tuple[int, int]]
Spent = Callable[[Bill, int, int], None]  # background usage reported to the budgets


class UsageMeter:
    def __init__(
        self,
        store: UsageStore | None,
        prices: Prices,
        *,
        estimate: Estimate,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.prices = prices
        self.estimate = estimate
        self.clock = clock
        self.on_background: Spent | None = None  # set by the budgets (team counters)
        self._pending: dict[tuple[str, ...], UsageRow] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.dropped = 0  # rows dropped because the store stayed down (logged)
        self._closed = False

    def record(
        self,
        kind: str,
        model: str,
        *,
        prompt: int | None,
        cached: int,
        completion: int | None,
        messages: Sequence[dict[str, Any]] = (),
        content: str = "",
        estimated: bool = False,
    ) -> None:
        """One finished request. `prompt`/`completion` None: the server sent no usage (counted
        here from `messages` and `content`); `estimated`: the caller estimated them itself."""
        estimated = estimated or prompt is None or completion is None
        if estimated:
            guess_prompt, guess_completion = self.estimate(messages, content)
            prompt = guess_prompt if prompt is None else prompt
            completion = guess_completion if completion is None else completion
        assert prompt is not None and completion is not None
        cost = self.prices.cost(model, prompt, cached, completion)
        bill = current_bill() or Bill(team="")
        bill.tokens += prompt + completion
        bill.micros += cost or 0
        bill.requests += 1
        row = UsageRow(
            day=self.clock().date().isoformat(),
            team=bill.team,
            place=bill.place,
            person=bill.person,
            model=model,
            kind=kind,
            audience=bill.audience,
            requests=1,
            prompt=prompt,
            cached=cached,
            completion=completion,
            cost_micros=cost or 0,
            unpriced=0 if cost is not None else 1,
            estimated=1 if estimated else 0,
        )
        self._add(row)
        self.start()
        labels = (bill.team or "-", model, kind)
        USAGE_TOKENS.labels(*labels, "prompt").inc(prompt)
        USAGE_TOKENS.labels(*labels, "cached_prompt").inc(cached)
        USAGE_TOKENS.labels(*labels, "completion").inc(completion)
        if cost:
            USAGE_COST.labels(*labels).inc(cost / MICROS)
        if bill.background and bill.team and self.on_background is not None:
            self.on_background(bill, prompt + completion, cost or 0)

    def _add(self, row: UsageRow) -> None:
        kept = self._pending.get(row.key)
        if kept is None and len(self._pending) >= MAX_PENDING_ROWS:
            self.dropped += 1
            if self.dropped in (1, 100, 10_000):
                log.error("usage_rows_dropped", extra={"fields": {"dropped": self.dropped}})
            return
        self._pending[row.key] = row if kept is None else kept.plus(row)
        if len(self._pending) >= MAX_PENDING_ROWS // 2:
            self._wake.set()

    def forget(self, person: str, *, as_: str) -> int:
        """Re-key the person's rows not flushed yet (`/memory forget all`); how many."""
        mine = [k for k, r in self._pending.items() if r.person == person]
        for key in mine:
            row = replace(self._pending.pop(key), person=as_)
            self._add(row)
        return len(mine)

    def pending(self) -> list[UsageRow]:
        """Rows not flushed yet (reports add them, so a request just made is counted)."""
        return list(self._pending.values())

    def start(self) -> None:
        """The flushing task (started by the first request, or by the app)."""
        if self._task is None and self.store is not None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), FLUSH_SECONDS)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Write what is pending; on a store error keep it for the next try."""
        if self.store is None or not self._pending:
            return
        batch, self._pending = self._pending, {}
        try:
            await self.store.add_usage(list(batch.values()))
        except Exception as exc:
            log.warning("usage_flush_failed", extra={"fields": {"error": type(exc).__name__}})
            for row in batch.values():
                self._add(row)

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()
