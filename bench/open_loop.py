"""Open-loop latency: mentions arrive at a fixed rate whatever the bot does, as users send them.

A closed loop (C conversations, each waiting for its answer) slows its senders down when the
bot slows down, so at capacity it measures the queue, not what a person meets. Here mention k
is due at `start + k / rate`, taken from the clock and never from a reply, for a fixed duration;
its latency counts from when it was due (a driver that falls behind does not hide the wait).

Two parts:
- `send_on_schedule(rate, count, send)`: the driver the benches share (`bench_slack --rate`,
  `bench_discord --rate`): it calls `send(k)` at each due time and returns the due times.
- `python -m bench.open_loop --bench slack|discord`: the sweep. It measures the closed-loop
  capacity (the bench as it is, its throughput), then runs the bench open-loop at 30 %, 60 % and
  90 % of it and prints reply − model p50/p99, answered-once counts and the bot's CPU per mention
  with the machine-speed reference (`bench.speed`) of each run, against the issue's targets.
  `--bot-command "bot slack --workers 2"` hands the Slack bench the command that starts each bot
  process (how worker processes plug in); `--capacity R` skips the closed-loop run.

    python -m bench.open_loop --bench slack --duration 20
    python -m bench.open_loop --bench discord --capacity 80 --json /tmp/open.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Figure, below, info, print_figures, write_json  # noqa: E402

SHARES = (0.3, 0.6, 0.9)  # of the closed-loop capacity
# Issue 26: at 60 % of capacity, open-loop reply − model p50 < 50 ms and p99 < 250 ms.
TARGET_SHARE = 0.6
P50_MS = 50.0
P99_MS = 250.0


async def send_on_schedule(
    rate: float, count: int, send: Callable[[int], Awaitable[Any]]
) -> list[float]:
    """Start `send(k)` at `start + k / rate` (time.monotonic) for k < count, each as its own
    task so a slow send delays no later one; wait for all; return the due times."""
    if rate <= 0 or count < 0:
        raise ValueError("the rate must be positive and the count not negative")
    start = time.monotonic() + 0.05
    due = [start + k / rate for k in range(count)]
    tasks: list[asyncio.Task[Any]] = []
    for k, at in enumerate(due):
        delay = at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(k)))
    await asyncio.gather(*tasks)
    return due


def count_for(rate: float, duration: float) -> int:
    """Mentions an open-loop run sends: the rate for the duration (at least one)."""
    return max(1, round(rate * duration))


# -- the sweep ---------------------------------------------------------------------------------


def _run_bench(bench: str, extra: list[str], timeout: float) -> dict[str, Any]:
    """Run `python -m bench.bench_<bench> ... --json tmp`; its JSON (figures by name)."""
    with tempfile.TemporaryDirectory(prefix="open-loop-") as tmp:
        out = Path(tmp) / "figures.json"
        command = [sys.executable, "-m", f"bench.bench_{bench}", *extra, "--json", str(out)]
        print("$", " ".join(command[1:]), flush=True)
        done = subprocess.run(command, cwd=ROOT, timeout=timeout, check=False)
        if not out.exists():
            raise SystemExit(f"bench_{bench} wrote no figures (exit {done.returncode})")
        doc: dict[str, Any] = json.loads(out.read_text())
        return doc


def _find(doc: dict[str, Any], prefix: str) -> float:
    for figure in doc.get("figures", []):
        if str(figure.get("figure", "")).startswith(prefix):
            value = figure.get("measured")
            return float(value) if isinstance(value, int | float) else math.nan
    return math.nan


# Figure names as each bench writes them (prefixes).
NAMES = {
    "slack": {
        "throughput": "throughput",
        "p50": "event to reply minus model p50",
        "p99": "event to reply minus model p99",
        "once": "answered exactly once",
        "cpu": "bot CPU per answered mention, until the last reply",
        "speed": "machine speed",
    },
    "discord": {
        "throughput": "throughput",
        "p50": "dispatch → reply − model p50",
        "p99": "dispatch → reply − model p99",
        "once": "mentions answered exactly once",
        "cpu": "bot CPU per mention",
        "speed": "machine speed",
    },
}


def _figure(doc: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The bench's own figure row (its target and whether met), or an empty row."""
    for figure in doc.get("figures", []):
        if str(figure.get("figure", "")).startswith(prefix):
            return dict(figure)
    return {"measured": "not reported", "target": "all", "met": False}


def sweep(args: argparse.Namespace) -> list[Figure]:
    names = NAMES[args.bench]
    extra: list[str] = []
    if args.bot_command:
        if args.bench != "slack":
            raise SystemExit("--bot-command is for --bench slack (bench_discord runs its own bot)")
        extra += ["--bot-command", args.bot_command]
    figures: list[Figure] = []
    capacity = args.capacity
    if capacity is None:
        closed = _run_bench(args.bench, [*extra, "-n", str(args.closed_n)], args.timeout)
        capacity = _find(closed, names["throughput"])
        if not math.isfinite(capacity) or capacity <= 0:
            raise SystemExit("the closed-loop run measured no throughput")
        figures += [
            info(
                f"closed-loop capacity ({args.closed_n:,} mentions, 50 conversations)",
                capacity,
                "mentions/s",
            ),
            info("closed loop: bot CPU per mention", _find(closed, names["cpu"]), "ms"),
            info("closed loop: machine speed reference", _find(closed, names["speed"]), "ms"),
        ]
    else:
        figures.append(info("closed-loop capacity (given with --capacity)", capacity, "mentions/s"))
    for share in SHARES:
        rate = round(capacity * share, 1)
        runs = [*extra, "--rate", str(rate), "--duration", str(args.duration)]
        doc = _run_bench(args.bench, runs, args.timeout)
        label = f"open loop {share:.0%} ({rate:g}/s)"
        p50, p99 = _find(doc, names["p50"]), _find(doc, names["p99"])
        if share == TARGET_SHARE:
            figures += [
                below(f"{label}: reply − model p50", p50, P50_MS, "ms"),
                below(f"{label}: reply − model p99", p99, P99_MS, "ms"),
            ]
        else:
            figures += [
                info(f"{label}: reply − model p50", p50, "ms"),
                info(f"{label}: reply − model p99", p99, "ms"),
            ]
        once = _figure(doc, names["once"])
        figures += [
            Figure(
                f"{label}: answered exactly once",
                str(once.get("target", "all")),
                once.get("measured", ""),
                "",
                once.get("met"),
            ),
            info(f"{label}: bot CPU per mention", _find(doc, names["cpu"]), "ms"),
            info(f"{label}: machine speed reference", _find(doc, names["speed"]), "ms"),
        ]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--bench", choices=tuple(NAMES), default="slack")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per open-loop run")
    parser.add_argument(
        "--capacity", type=float, default=None, help="mentions/s; skips the closed-loop run"
    )
    parser.add_argument(
        "--bot-command",
        default=None,
        help='how each bot process starts (Slack), e.g. "bot slack --workers 2"',
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="per bench run, seconds")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    parser.add_argument(
        "--closed-n", type=int, default=1000, help="mentions of the closed-loop capacity run"
    )
    args = parser.parse_args()
    bad_capacity = args.capacity is not None and args.capacity <= 0
    if args.duration <= 0 or args.closed_n < 1 or bad_capacity:
        parser.error("--duration, --closed-n and --capacity must be positive")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    figures = sweep(args)
    title = (
        f"open-loop latency, {args.bench}, {args.duration:g} s per rate, "
        + (args.bot_command or "1 process")
        + " (rates: share of the closed-loop capacity)"
    )
    print_figures(title, figures)
    write_json(args.json, f"open-loop-{args.bench}", figures)


if __name__ == "__main__":
    main()
