"""Circuit breaker per provider: opens after repeated transient failures, fails fast while open,
lets one probe through after the cool-down (half-open), closes on its success."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tools.breaker import BreakerBoard, BreakerConfig, CircuitBreaker
from tools.declare import tool
from tools.errors import ToolBusinessError, ToolTransientError
from tools.executor import ExecutorConfig, ToolExecutor
from tools.registry import ToolRegistry
from tools.types import ToolCallRequest, ToolContext


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_state_machine() -> None:
    clock = Clock()
    changes: list[tuple[str, str, str]] = []
    brk = CircuitBreaker(
        "p",
        BreakerConfig(threshold=3, cooldown=10),
        clock=clock,
        listener=lambda *a: changes.append(a),
    )
    for _ in range(2):
        assert brk.allow()
        brk.failure()
    assert brk.state == "closed"
    brk.success()  # consecutive failures only
    for _ in range(3):
        assert brk.allow()
        brk.failure()
    assert brk.state == "open" and not brk.allow()
    assert brk.retry_in() == pytest.approx(10)
    clock.now += 10.5
    assert brk.allow()  # the single probe
    assert brk.state == "half_open"
    assert not brk.allow()  # the others still fail fast
    brk.failure()  # the probe failed: open again, a full cool-down
    assert brk.state == "open" and not brk.allow()
    clock.now += 11
    assert brk.allow()
    brk.success()
    assert brk.state == "closed" and brk.allow()
    assert changes == [
        ("p", "closed", "open"),
        ("p", "open", "half_open"),
        ("p", "half_open", "open"),
        ("p", "open", "half_open"),
        ("p", "half_open", "closed"),
    ]
    assert brk.opens == 2


def test_released_probe_frees_the_slot() -> None:
    clock = Clock()
    brk = CircuitBreaker("p", BreakerConfig(threshold=1, cooldown=1), clock=clock)
    brk.allow()
    brk.failure()
    clock.now += 2
    assert brk.allow()
    brk.release()  # e.g. the probe was cancelled
    assert brk.allow()


class Upstream:
    """What the provider does: fail transiently until told otherwise; counts real calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.mode = "down"

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if self.mode == "down":
            raise ToolTransientError("503")
        if self.mode == "missing":
            raise ToolBusinessError("not found")
        if self.mode == "hang":
            await asyncio.sleep(30)
        return {"ok": 1}


def _setup(threshold: int = 3) -> tuple[ToolExecutor, ToolRegistry, Upstream, Clock, BreakerBoard]:
    up = Upstream()

    @tool(timeout=0.05)
    async def lookup(q: str) -> dict[str, Any]:
        """Look something up."""
        return await up()

    clock = Clock()
    board = BreakerBoard(BreakerConfig(threshold=threshold, cooldown=30), clock=clock)
    ex = ToolExecutor(ExecutorConfig(backoff_base=0.0, max_retries=1), breakers=board)
    reg = ToolRegistry([lookup.with_provider("orders@slack:T1")])
    return ex, reg, up, clock, board


CTX = ToolContext(session_id="s", speaker_id="u", team_id="t")


def _call(n: int) -> list[ToolCallRequest]:
    return [ToolCallRequest(f"c{n}", "lookup", '{"q":"x"}')]


async def test_executor_opens_fails_fast_and_half_opens() -> None:
    ex, reg, up, clock, board = _setup(threshold=3)
    [r1] = await ex.execute(_call(1), CTX, reg)  # 2 attempts, both fail
    assert r1.outcome == "transient_error" and up.calls == 2
    [r2] = await ex.execute(_call(2), CTX, reg)  # 3rd failure opens it; no retry after that
    assert up.calls == 3 and board.state("orders@slack:T1") == "open"
    assert r2.outcome == "transient_error"
    [r3] = await ex.execute(_call(3), CTX, reg)
    assert up.calls == 3  # answered without touching the provider
    assert r3.outcome == "transient_error" and r3.attempts == 0
    assert "temporarily unavailable" in r3.content and "in about 30s" in r3.content
    clock.now += 31
    up.mode = "ok"
    [r4] = await ex.execute(_call(4), CTX, reg)  # the probe
    assert r4.outcome == "ok" and up.calls == 4
    assert board.state("orders@slack:T1") == "closed"


async def test_timeouts_count_and_business_errors_do_not() -> None:
    ex, reg, up, _clock, board = _setup(threshold=2)
    up.mode = "missing"
    for n in range(5):
        [r] = await ex.execute(_call(n), CTX, reg)
        assert r.outcome == "business_error"
    assert board.state("orders@slack:T1") == "closed"
    up.mode = "hang"
    [r] = await ex.execute(_call(9), CTX, reg)
    assert r.outcome == "timeout"
    assert board.state("orders@slack:T1") == "open"
    calls = up.calls
    [r] = await ex.execute(_call(10), CTX, reg)
    assert up.calls == calls and r.attempts == 0


async def test_breakers_are_per_provider() -> None:
    ex, reg, _up, _clock, board = _setup(threshold=1)
    await ex.execute(_call(1), CTX, reg)
    assert board.state("orders@slack:T1") == "open"
    assert board.state("orders@slack:T2") == "closed"
    assert set(board.snapshot()) == {"orders@slack:T1"}
