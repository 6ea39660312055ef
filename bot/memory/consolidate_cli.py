"""`bot consolidate [--now]`: without `--now`, when the next scheduled run is; with it, one run
now: a progress bar on a terminal, one line per session otherwise (logs, pipes), then totals.
A run already in progress elsewhere is reported (who holds the lease) and is not an error."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from bot.config import Settings
from bot.memory.consolidation import ConsolidationReport
from bot.memory.nightly import ConsolidationHost, build_consolidator, next_run
from bot.memory.reconcile import OUTCOMES


def print_schedule(settings: Settings, out: TextIO = sys.stdout) -> int:
    cron = settings.bot_consolidate_cron
    fire = next_run(cron)
    when = f"{fire:%Y-%m-%d %H:%M} UTC" if fire else "never"
    print(f"Next consolidation: {when} (BOT_CONSOLIDATE_CRON={cron!r}).", file=out)
    print("Run it now with `bot consolidate --now`.", file=out)
    return 0


def _counts(report: ConsolidationReport, before: dict[str, int] | None = None) -> str:
    before = before or {}
    parts = [f"{o.lower()} {report.outcomes.get(o, 0) - before.get(o, 0)}" for o in OUTCOMES]
    return ", ".join(parts)


class LineProgress:
    """One line per session: for logs and pipes."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.done = 0
        self.total = 0

    def start(self, sessions: int) -> None:
        self.total = sessions
        print(f"Consolidating {sessions} session(s) with new messages.", file=self.out, flush=True)

    def step(self, session_id: str, report: ConsolidationReport) -> None:
        """`report` is that session's own (the run's totals come at the end)."""
        self.done += 1
        line = (
            f"[{self.done}/{self.total}] {session_id}: {_counts(report)}; "
            f"memories {report.memories}; tokens {report.tokens}"
        )
        print(line, file=self.out, flush=True)


class BarProgress:
    """A tqdm bar over sessions, for a terminal."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.bar: Any = None
        self.run = ConsolidationReport()  # the sessions' reports added up

    def start(self, sessions: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=sessions, unit="session", file=self.out, desc="consolidating")

    def step(self, session_id: str, report: ConsolidationReport) -> None:
        self.run.merge(report)
        report = self.run
        if self.bar is not None:
            self.bar.set_postfix(
                add=report.outcomes.get("ADD", 0),
                upd=report.outcomes.get("UPDATE", 0),
                tokens=report.tokens,
                refresh=False,
            )
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


async def run_now(app: ConsolidationHost, out: TextIO = sys.stdout) -> int:
    progress: LineProgress | BarProgress = BarProgress(out) if out.isatty() else LineProgress(out)
    try:
        report = await build_consolidator(app).run(progress=progress)
    finally:
        if isinstance(progress, BarProgress):
            progress.close()
    if not report.ran:
        print(
            f"Consolidation is already running (lease held by {report.holder}); nothing to do.",
            file=out,
        )
        return 0
    print(
        f"Done in {report.duration_s:.1f} s: {report.sessions} session(s), "
        f"{report.steps} extraction step(s); facts: {_counts(report)}; "
        f"memories {report.memories}; model tokens {report.tokens}"
        + ("; stopped at the token cap (BOT_CONSOLIDATE_MAX_TOKENS)" if report.capped else "")
        + (f"; pruned {report.pruned_messages} message(s)" if report.pruned_messages else "")
        + (
            f"; {report.failures} session(s) failed, left for the next run"
            if report.failures
            else ""
        )
        + ".",
        file=out,
    )
    return 1 if report.failures else 0
