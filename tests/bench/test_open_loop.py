"""The open-loop driver sends on the clock, not after replies (`bench.open_loop`)."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from bench.open_loop import count_for, send_on_schedule


async def test_every_mention_is_sent_while_none_has_been_answered() -> None:
    """A bot that never answers until all ten have arrived: a closed loop would stall at the
    first; the open loop sends all ten at their due times."""
    started: list[tuple[int, float]] = []
    all_in = asyncio.Event()

    async def send(k: int) -> None:
        started.append((k, time.monotonic()))
        if len(started) == 10:
            all_in.set()
        await all_in.wait()  # the "reply" comes only once every mention was sent

    due = await asyncio.wait_for(send_on_schedule(50.0, 10, send), timeout=10)
    assert [k for k, _ in started] == list(range(10))
    assert all(b - a == pytest.approx(0.02) for a, b in itertools.pairwise(due))
    assert all(at >= due[k] - 0.001 for k, at in started)  # never ahead of its time


def test_bad_rates_are_refused_and_counts_follow_the_duration() -> None:
    assert count_for(30.0, 20.0) == 600 and count_for(0.01, 1.0) == 1
    with pytest.raises(ValueError, match="rate must be positive"):
        asyncio.run(send_on_schedule(0.0, 3, lambda k: asyncio.sleep(0)))
