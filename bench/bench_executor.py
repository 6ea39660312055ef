"""The tool executor's own overhead per call: parse + validate + dispatch + envelope + record.

The tool body is a no-op, so what is timed is the engine. Prints p50/p90/p99 per call for
batches of 1, 8 and 64 parallel calls (one model response each), with the info log line off
(the default level) and on (to a handler that drops records). Target: p50 < 0.5 ms per call.

Run: python bench/bench_executor.py
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from typing import Annotated, Literal

from pydantic import Field

from tools.declare import tool
from tools.executor import ExecutorConfig, ToolExecutor
from tools.registry import ToolRegistry
from tools.types import ToolCallRecord, ToolCallRequest, ToolContext

SAMPLES = 3000  # timed calls per batch size (at least 200 batches)


@tool(description="Does nothing.")
async def noop(
    location: Annotated[str, Field(description="City.")],
    unit: Literal["celsius", "fahrenheit"] = "celsius",
    days: int = 1,
) -> dict[str, str]:
    return {"location": location, "unit": unit}


async def _record(record: ToolCallRecord, ctx: ToolContext) -> None:
    return None


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(executor: ToolExecutor, batch: int) -> list[float]:
    reg = ToolRegistry([noop])
    ctx = ToolContext("bench-session", "bench-user", "bench-team")
    calls = [
        ToolCallRequest(
            f"call_{i}", "noop", '{"location": "Berlin", "unit": "celsius", "days": "3"}'
        )
        for i in range(batch)
    ]
    for _ in range(50):  # warm up
        await executor.execute(calls, ctx, reg)
    per_call: list[float] = []
    for _ in range(max(200, SAMPLES // batch)):
        start = time.perf_counter()
        records = await executor.execute(calls, ctx, reg)
        elapsed = time.perf_counter() - start
        assert all(r.outcome == "ok" for r in records)
        per_call.append(elapsed * 1000.0 / batch)
    return per_call


async def main() -> None:
    executor = ToolExecutor(ExecutorConfig(max_concurrency=64), on_record=_record)
    log = logging.getLogger("tools.executor")
    print("tool executor overhead per call (ms), no-op tool body")
    print(f"{'log':>5} {'batch':>6} {'p50':>8} {'p90':>8} {'p99':>8} {'mean':>8}")
    for log_on in (False, True):
        log.handlers.clear()
        log.propagate = not log_on
        if log_on:
            log.addHandler(logging.NullHandler())
        log.setLevel(logging.INFO if log_on else logging.WARNING)
        for batch in (1, 8, 64):
            ms = await _measure(executor, batch)
            print(
                f"{'info' if log_on else 'off':>5} {batch:>6} {_pct(ms, 0.5):>8.4f} "
                f"{_pct(ms, 0.9):>8.4f} {_pct(ms, 0.99):>8.4f} {statistics.fmean(ms):>8.4f}"
            )


if __name__ == "__main__":
    asyncio.run(main())
