"""`bot slack --workers N`: N bot processes on one host, supervised by the one started.

One Python process uses one core (its interpreter lock), so a host with more cores runs more
processes. Each worker is a full `bot slack` with its own event loop; they share the listening
port (`SO_REUSEPORT`: the kernel spreads connections over them) and the durable inbox (the SQLite
table under one BOT_DATA_DIR, or Redis Streams), so an entry accepted by one worker is run by
whichever takes it, and a dead worker's entries are taken over by the others (at once on one
host: `bot.stores.leases.holder_is_dead`). Jobs that must run once per host (the nightly
consolidation, the episodic catch-up) take a lease in the store.

The parent runs no bot: it starts the workers, restarts one that dies (after a pause that grows
while it keeps dying at start), and on SIGTERM/SIGINT passes SIGTERM on and waits while each
drains. Its exit code says what happened: 0 all workers drained and exited cleanly, 1 a worker
did not (exited non-zero or was killed after the grace period), 2 a worker found bad
configuration (its one line is on stderr; restarting would not help), 3 a worker kept dying at
start and the supervisor gave up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence

from bot.logsetup import setup_logging

log = logging.getLogger(__name__)

WORKER_ID_ENV = "BOT_WORKER_ID"  # set by the supervisor in each worker (its slot, from 1)
MAX_WORKERS = 64
EXIT_CLEAN, EXIT_UNCLEAN, EXIT_CONFIG, EXIT_GAVE_UP = 0, 1, 2, 3
FIRST_PAUSE = 0.5  # seconds before restarting a worker that died; doubles while it keeps dying
MAX_PAUSE = 30.0
STABLE_AFTER = 30.0  # a worker that ran this long before dying is restarted after FIRST_PAUSE
GIVE_UP_AFTER = 8  # deaths in a row within STABLE_AFTER of their start


def parse_workers(text: str, *, cores: int | None = None) -> int:
    """'auto' (the cores this process may run on) or a number 1-64; ValueError says which."""
    value = text.strip().lower()
    if value == "auto":
        if cores is not None:
            return cores
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # not Linux
            return max(1, os.cpu_count() or 1)
    if not value.isdigit() or not 1 <= int(value) <= MAX_WORKERS:
        raise ValueError(f"must be a number 1-{MAX_WORKERS} or auto, got {text!r}")
    return int(value)


def worker_id() -> str | None:
    """This process's slot when a supervisor started it, else None."""
    return os.environ.get(WORKER_ID_ENV) or None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the worker gets SIGTERM when the supervisor dies (even by kill -9)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Supervisor:
    """Runs `argv` in `count` worker processes until SIGTERM/SIGINT (see the module doc)."""

    def __init__(
        self,
        argv: Sequence[str],
        count: int,
        *,
        grace: float,
        first_pause: float = FIRST_PAUSE,
        stable_after: float = STABLE_AFTER,
    ) -> None:
        self.argv = list(argv)
        self.count = count
        self.grace = grace  # how long a worker may drain before it is killed
        self.first_pause = first_pause
        self.stable_after = stable_after
        self.starts = 0  # workers started, restarts included
        self.outcome = EXIT_CLEAN
        self._stop = asyncio.Event()
        self._procs: dict[int, asyncio.subprocess.Process] = {}

    def _env(self, slot: int) -> dict[str, str]:
        return {**os.environ, "BOT_WORKERS": "1", WORKER_ID_ENV: str(slot)}

    def _fail(self, code: int) -> None:
        self.outcome = max(self.outcome, code)
        self._stop.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        log.info("workers_starting", extra={"fields": {"workers": self.count}})
        try:
            await asyncio.gather(*(self._slot(slot) for slot in range(1, self.count + 1)))
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        log.info("workers_stopped", extra={"fields": {"exit_code": self.outcome}})
        return self.outcome

    async def _slot(self, slot: int) -> None:
        """One worker: started, restarted when it dies, stopped with the others."""
        pause, quick_deaths = self.first_pause, 0
        while not self._stop.is_set():
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                env=self._env(slot),
                stdin=asyncio.subprocess.DEVNULL,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
            self._procs[slot] = proc
            self.starts += 1
            started = time.monotonic()
            log.info("worker_started", extra={"fields": {"worker": slot, "pid": proc.pid}})
            stopping = asyncio.ensure_future(self._stop.wait())
            exited = asyncio.ensure_future(proc.wait())
            await asyncio.wait({stopping, exited}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not exited.done():  # asked to stop: drain it
                await self._drain(slot, proc, exited)
                return
            code = proc.returncode
            ran = time.monotonic() - started
            log.warning(
                "worker_exited",
                extra={"fields": {"worker": slot, "pid": proc.pid, "code": code, "ran": ran}},
            )
            if code == EXIT_CONFIG:  # bad settings: every restart would end the same way
                self._fail(EXIT_CONFIG)
                return
            if ran >= self.stable_after:
                pause, quick_deaths = self.first_pause, 0
            quick_deaths += 1
            if quick_deaths >= GIVE_UP_AFTER:
                log.error("workers_gave_up", extra={"fields": {"worker": slot}})
                self._fail(EXIT_GAVE_UP)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=pause)
            pause = min(pause * 2, MAX_PAUSE)

    async def _drain(
        self, slot: int, proc: asyncio.subprocess.Process, exited: asyncio.Future[int]
    ) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(exited, timeout=self.grace + 15.0)
        except TimeoutError:
            log.error("worker_drain_timeout", extra={"fields": {"worker": slot, "pid": proc.pid}})
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            self.outcome = max(self.outcome, EXIT_UNCLEAN)
            return
        if code == -signal.SIGTERM:
            # Ended by the signal itself: it was still starting (its handler not installed
            # yet), so it had served nothing; any entry it took is taken over at once.
            log.info("worker_stopped_at_start", extra={"fields": {"worker": slot}})
        elif code != 0:
            log.warning("worker_unclean_exit", extra={"fields": {"worker": slot, "code": code}})
            self.outcome = max(self.outcome, EXIT_UNCLEAN)


def supervise(argv: Sequence[str], count: int, *, grace: float, log_level: str) -> int:
    """Run the supervisor in this process (its own event loop) and return its exit code."""
    setup_logging(log_level)
    return asyncio.run(Supervisor(argv, count, grace=grace).run())
