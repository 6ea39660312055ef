"""The supervisor of `bot slack --workers N` (bot.workers) with real child processes: a worker
that keeps dying is restarted with a growing pause and then given up on (exit 3), a worker's
configuration error stops everything (exit 2), SIGTERM drains every worker (exit 0, or 1 when
one does not exit cleanly), and `auto`/numbers parse as documented."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from bot.workers import (
    EXIT_CLEAN,
    EXIT_CONFIG,
    EXIT_GAVE_UP,
    EXIT_UNCLEAN,
    GIVE_UP_AFTER,
    Supervisor,
    parse_workers,
)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


async def test_a_worker_that_keeps_dying_is_restarted_then_given_up_on() -> None:
    sup = Supervisor(_python("raise SystemExit(1)"), 1, grace=1.0, first_pause=0.01)
    started = time.monotonic()
    assert await asyncio.wait_for(sup.run(), 60) == EXIT_GAVE_UP
    assert sup.starts == GIVE_UP_AFTER
    # The pauses grew: 0.01 doubling, seven of them at least 1.27 s in all.
    assert time.monotonic() - started >= 0.01 * (2 ** (GIVE_UP_AFTER - 1) - 1)


async def test_a_configuration_error_in_a_worker_stops_them_all() -> None:
    sup = Supervisor(
        _python(
            "import os, sys, time\n"
            "if os.environ['BOT_WORKER_ID'] == '2': sys.exit(2)\n"
            "time.sleep(60)"
        ),
        2,
        grace=1.0,
    )
    assert await asyncio.wait_for(sup.run(), 30) == EXIT_CONFIG
    assert sup.starts == 2  # not restarted


async def _terminate_when_started(sup: Supervisor, ready: Path, count: int) -> int:
    run = asyncio.create_task(sup.run())
    deadline = time.monotonic() + 30
    # Each worker writes a file once it runs: its own signal that it started.
    while len(await asyncio.to_thread(os.listdir, ready)) < count:
        assert time.monotonic() < deadline, "workers did not start"
        await asyncio.sleep(0.02)
    os.kill(os.getpid(), signal.SIGTERM)  # the supervisor's handler, as `kill PID` would
    return await asyncio.wait_for(run, 30)


_WORKER = (
    "import os, signal, sys, time\n"
    "done = []\n"
    "signal.signal(signal.SIGTERM, lambda *a: done.append(1))\n"
    "open(os.path.join(sys.argv[1], os.environ['BOT_WORKER_ID']), 'w').close()\n"
    "while not done: time.sleep(0.01)\n"
    "sys.exit(int(sys.argv[2]) if os.environ['BOT_WORKER_ID'] == '1' else 0)\n"
)


@pytest.mark.parametrize(("first_code", "expected"), [(0, EXIT_CLEAN), (5, EXIT_UNCLEAN)])
async def test_sigterm_drains_every_worker(tmp_path: Path, first_code: int, expected: int) -> None:
    sup = Supervisor([sys.executable, "-c", _WORKER, str(tmp_path), str(first_code)], 2, grace=5.0)
    assert await _terminate_when_started(sup, tmp_path, 2) == expected
    assert sup.starts == 2


def test_worker_counts() -> None:
    assert parse_workers("auto", cores=2) == 2
    assert parse_workers(" 3 ") == 3
    assert parse_workers("auto") >= 1
    for bad in ("0", "65", "-1", "two", ""):
        with pytest.raises(ValueError, match="1-64 or auto"):
            parse_workers(bad)
