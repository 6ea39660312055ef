"""The tool executor's own overhead per call: parse + validate + dispatch + envelope + record.

The tool body is a no-op, so what is timed is the engine. Prints p50/p90/p99 per call for
batches of 1, 8 and 64 parallel calls (one model response each), with the info log line off
(the default level) and on (to a handler that drops records). Target: p50 < 0.5 ms per call.

Run: python bench/bench_executor.py [--samples 3000] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Annotated, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import Field

from bench.report import Figure, add_json_option, below, print_figures, write_json
from tools.declare import tool
from tools.executor import ExecutorConfig, ToolExecutor
from tools.registry import ToolRegistry
from tools.types import ToolCallRecord, ToolCallRequest, ToolContext

SAMPLES = 3000  # timed calls per batch size (at least 200 batches)
TARGET_MS = 0.5  # p50 per call (issue 2)


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


async def _measure(executor: ToolExecutor, batch: int, samples: int) -> list[float]:
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
    for _ in range(max(200, samples // batch)):
        start = time.perf_counter()
        records = await executor.execute(calls, ctx, reg)
        elapsed = time.perf_counter() - start
        if not all(r.outcome == "ok" for r in records):
            raise RuntimeError(f"a call did not succeed: {[r.outcome for r in records]}")
        per_call.append(elapsed * 1000.0 / batch)
    return per_call


async def main(samples: int) -> list[dict[str, object]]:
    # The per-round call cap (10 by default) would refuse most of a 64-call batch: lift it, so
    # all 64 calls are the engine's work rather than refusals.
    config = ExecutorConfig(max_concurrency=64, max_calls_per_round=64, max_calls_per_turn=64)
    executor = ToolExecutor(config, on_record=_record)
    log = logging.getLogger("tools.executor")
    rows: list[dict[str, object]] = []
    print("tool executor overhead per call (ms), no-op tool body")
    print(f"{'log':>5} {'batch':>6} {'p50':>8} {'p90':>8} {'p99':>8} {'mean':>8}")
    for log_on in (False, True):
        log.handlers.clear()
        log.propagate = not log_on
        if log_on:
            log.addHandler(logging.NullHandler())
        log.setLevel(logging.INFO if log_on else logging.WARNING)
        for batch in (1, 8, 64):
            ms = await _measure(executor, batch, samples)
            row = {
                "log": "info" if log_on else "off",
                "batch": batch,
                "p50_ms": _pct(ms, 0.5),
                "p90_ms": _pct(ms, 0.9),
                "p99_ms": _pct(ms, 0.99),
                "mean_ms": statistics.fmean(ms),
            }
            rows.append(row)
            print(
                f"{row['log']:>5} {batch:>6} {row['p50_ms']:>8.4f} "
                f"{row['p90_ms']:>8.4f} {row['p99_ms']:>8.4f} {row['mean_ms']:>8.4f}"
            )
    return rows


def figures(rows: list[dict[str, object]]) -> list[Figure]:
    """Per batch size, the worse p50 of log off and log on."""
    out = []
    for batch in (1, 8, 64):
        p50 = max(float(str(r["p50_ms"])) for r in rows if r["batch"] == batch)
        label = "1 call" if batch == 1 else f"{batch} parallel calls"
        out.append(
            below(f"executor overhead p50 per call, {label}", round(p50, 4), TARGET_MS, "ms")
        )
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=SAMPLES, help="timed calls per batch size")
    add_json_option(parser)
    args = parser.parse_args()
    result = asyncio.run(main(args.samples))
    found = figures(result)
    print_figures("executor", found)
    write_json(args.json, "executor", found, {"rows": result})
