"""`python -m bench`: every benchmark that needs nothing outside this machine, one table, one JSON.

Each bench runs as its own subprocess (`python -m bench.<module> ... --json <tmp>`), cheapest
first, under a per-bench timeout: a crash or a timeout is a row saying so, not the end of the
run. A bench that needs what this machine lacks (an extra: its one line from `bench.needs`; the
LoCoMo data file; a bench_slack without `--replicas`) is a row saying "skipped" and why. Figures
the issues set a target for say whether it was met; the exit code is 0 either way (this is a
measurement), and non-zero only when the runner itself fails (bad options, the JSON cannot be
written).

The machine's load average is taken at the start and the end: on a shared 2-core machine
latencies and throughput swing with what else runs (CPU per mention much less), and the table
says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.needs import EXIT_NEEDS, embeddings_missing, said_needs
from bench.needs import line as needs_line
from bench.report import NO_TARGET, fmt_measured, fmt_met, table
from bench.speed import reference_ms
from testkit.shared_data import find_shared_data

ROOT = Path(__file__).resolve().parents[1]
# Where the tests find it (BOT_SHARED_DATA, else ../shared/data, else a further parent's).
_LOCOMO = find_shared_data("locomo/locomo_dev.json")
LOCOMO = _LOCOMO.path or ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
KILL_GRACE = 10.0  # seconds between SIGTERM and SIGKILL of a bench that timed out


def _embeddings_missing() -> str | None:
    why = embeddings_missing()
    return None if why is None else needs_line("locomo", "embeddings", why)


def _locomo_missing() -> str | None:
    return None if _LOCOMO.path else f"needs the LoCoMo data: {_LOCOMO.missing_message()}"


@dataclass(frozen=True)
class Bench:
    """One benchmark as the runner calls it."""

    name: str
    module: str  # run as `python -m <module>` from the repository root
    args: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()  # extra arguments under --quick (smaller sizes)
    timeout: float = 300.0
    needs: Callable[[], str | None] = lambda: None  # why it cannot run here, or None
    # Options a bench owned elsewhere must offer (checked with --help; missing: skipped).
    requires_flags: tuple[str, ...] = ()
    about: str = ""


def _locomo(name: str, embedder: str, timeout: float, needs: Callable[[], str | None]) -> Bench:
    return Bench(
        name,
        "bench.locomo",
        ("--data", str(LOCOMO), "--embedder", embedder),
        ("--conversations", "1"),
        timeout,
        needs,
        about=f"LoCoMo episodic retrieval, {embedder} embedder",
    )


def _slack(replicas: int) -> Bench:
    """One replica on the embedded store; several on one SQLite data dir + Redis (the inbox on
    Redis Streams), so the figures are the bots' own: on mongoeco (a Python MongoDB server) its
    CPU swamps theirs (`python bench/bench_slack.py --replicas 3` runs that variant)."""
    flags = ("--json", "--replicas", "--store") if replicas > 1 else ("--json",)
    args = ("--replicas", str(replicas), "--store", "sqlite+redis") if replicas > 1 else ()
    where = "SQLite + Redis" if replicas > 1 else "embedded"
    return Bench(
        "slack" if replicas == 1 else f"slack-{replicas}-replicas",
        "bench.bench_slack",
        args,
        ("-n", "200"),
        900.0,
        requires_flags=flags,
        about=f"Slack: 1,000 signed mentions, 50 concurrent, model 200 ms, {replicas} replica(s)"
        f" ({where})",
    )


def _both_locomo_needs() -> str | None:
    return _locomo_missing() or _embeddings_missing()


# Cheapest first.
BENCHES: tuple[Bench, ...] = (
    Bench(
        "mrkdwn",
        "bench.bench_mrkdwn",
        quick=("--sizes", "30000,300000"),
        about="Markdown → mrkdwn on hostile output",
    ),
    Bench(
        "heard",
        "bench.bench_heard",
        quick=("-n", "5000"),
        about="CPU per message heard where the bot is",
    ),
    Bench(
        "executor",
        "bench.bench_executor",
        quick=("--samples", "500"),
        about="tool executor overhead per call",
    ),
    Bench("consolidate", "bench.bench_consolidate", about="nightly consolidation, seeded month"),
    Bench("files", "bench.bench_files", quick=("--runs", "1"), about="cost of one shared file"),
    Bench(
        "prompt_cache",
        "bench.bench_prompt_cache",
        ("--data", str(LOCOMO)),
        ("--turns", "100"),
        needs=_locomo_missing,
        about="prompt prefix share with and without recall",
    ),
    Bench(
        "person_oauth",
        "bench.bench_person_oauth",
        about="per-person OAuth: a sign-in, a connected person's turn",
    ),
    Bench(
        "tools",
        "bench.bench_tools",
        quick=("--calls", "100"),
        about="MCP call overhead, tool selection recall",
    ),
    _locomo("locomo-lexical", "none", 600.0, _locomo_missing),
    _locomo("locomo-local", "local", 900.0, _both_locomo_needs),
    Bench(
        "memory",
        "bench.bench_memory",
        quick=("--turns", "10", "--warmup", "2", "--sizes", "10,1000"),
        timeout=1800.0,
        about="memory per turn at 10 / 1,000 / 10,000 messages",
    ),
    Bench(
        "discord",
        "bench.bench_discord",
        quick=("-n", "200"),
        timeout=900.0,
        about="Discord: 1,000 mentions over the local gateway",
    ),
    _slack(1),
    _slack(3),
    Bench(
        "open-loop-slack",
        "bench.open_loop",
        ("--bench", "slack"),
        ("--closed-n", "200", "--duration", "5"),
        timeout=1800.0,
        about="Slack: closed-loop capacity, then reply − model p50/p99 open-loop at 30/60/90 %",
    ),
    Bench(
        "open-loop-discord",
        "bench.open_loop",
        ("--bench", "discord"),
        ("--closed-n", "200", "--duration", "5"),
        timeout=1800.0,
        about="Discord: closed-loop capacity, then reply − model p50/p99 open-loop at 30/60/90 %",
    ),
)


@dataclass
class Outcome:
    """What one bench gave: its figures, or why it has none."""

    bench: str
    status: str  # ok | skipped | failed | timeout
    reason: str = ""
    seconds: float = 0.0
    exit_code: int | None = None
    figures: list[dict[str, Any]] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    log: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "bench": self.bench,
            "status": self.status,
            "reason": self.reason,
            "seconds": round(self.seconds, 1),
            "exit_code": self.exit_code,
            "command": self.command,
            "log": self.log,
            "figures": self.figures,
        }


def _help_text(bench: Bench) -> str:
    done = subprocess.run(
        [sys.executable, "-m", bench.module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout


def _valid_figures(obj: object) -> list[dict[str, Any]]:
    """The figures of a bench's JSON record; ValueError says what is wrong with it."""
    if not isinstance(obj, dict) or not isinstance(obj.get("figures"), list):
        raise ValueError('no "figures" list')
    out = []
    for f in obj["figures"]:
        if not isinstance(f, dict) or not isinstance(f.get("figure"), str):
            raise ValueError(f"not a figure: {f!r}"[:200])
        if not isinstance(f.get("measured"), int | float | str) or f.get("met") not in (
            True,
            False,
            None,
        ):
            raise ValueError(f"bad measured/met in {f['figure']!r}")
        out.append(
            {
                "figure": f["figure"],
                "target": str(f.get("target", NO_TARGET)),
                "measured": f["measured"],
                "unit": str(f.get("unit", "")),
                "met": f.get("met"),
            }
        )
    return out


def _tail(path: Path, lines: int = 3) -> str:
    """The last words of a bench's output: a traceback's exception line, else its last lines."""
    try:
        text = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    text = [line for line in text if line]
    if any(line.startswith("Traceback (most recent call last)") for line in text):
        return text[-1][:300]
    return " | ".join(text[-lines:])[:300]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the bench and the processes it started (its own process group)."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_bench(bench: Bench, *, quick: bool, logs: Path, timeout: float | None = None) -> Outcome:
    """Run one bench in its own process group; never raises for anything the bench does."""
    why = bench.needs()
    if why:
        return Outcome(bench.name, "skipped", why)
    if bench.requires_flags:
        try:
            helptext = _help_text(bench)
        except subprocess.TimeoutExpired:
            return Outcome(bench.name, "failed", "--help did not answer within 120 s")
        absent = [f for f in bench.requires_flags if f not in helptext]
        if absent:
            return Outcome(bench.name, "skipped", f"{bench.module} has no {', '.join(absent)} yet")
    json_path = logs / f"{bench.name}.json"
    json_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", bench.module, *bench.args, *(bench.quick if quick else ())]
    command += ["--json", str(json_path)]
    log = logs / f"{bench.name}.log"
    limit = timeout if timeout is not None else bench.timeout
    out = Outcome(bench.name, "ok", command=command, log=str(log))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own group: a timeout ends its children too
        )
        try:
            out.exit_code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            _stop(proc)
            out.seconds = time.monotonic() - started
            out.status, out.reason = "timeout", f"timed out after {limit:g} s (killed)"
            return out
        except BaseException:  # Ctrl-C: do not leave the bench running
            _stop(proc)
            raise
    out.seconds = time.monotonic() - started
    if out.exit_code == EXIT_NEEDS and not json_path.exists():
        said = said_needs(log.read_text(errors="replace"))
        if said:  # an optional dependency is missing (bench.needs): skipped, not failed
            out.status, out.reason = "skipped", said
            return out
    try:
        out.figures = _valid_figures(json.loads(json_path.read_text()))
    except FileNotFoundError:
        out.status = "failed"
        out.reason = f"exit code {out.exit_code}, no JSON written: {_tail(log)}"
        return out
    except ValueError as exc:  # JSONDecodeError included
        out.status, out.reason = "failed", f"exit code {out.exit_code}, bad JSON: {exc}"
        return out
    if out.exit_code != 0:
        out.status = "failed"
        out.reason = f"exit code {out.exit_code} (figures kept): {_tail(log)}"
    return out


def _rows(outcomes: list[Outcome]) -> list[list[str]]:
    rows: list[list[str]] = []
    for o in outcomes:
        first = [o.bench]
        if o.status != "ok":
            note = f"{o.status}: {o.reason}"
            rows.append([*first, "(the run)", NO_TARGET, note, NO_TARGET])
            first = [""]
        elif o.reason:
            rows.append([*first, "(note)", NO_TARGET, o.reason, NO_TARGET])
            first = [""]
        for f in o.figures:
            measured = fmt_measured(f["measured"], f["unit"])
            rows.append([*first, f["figure"], f["target"], measured, fmt_met(f["met"])])
            first = [""]
    return rows


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    names = [b.name for b in BENCHES]
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="benches, cheapest first: " + ", ".join(names),
    )
    parser.add_argument("--only", default="", help="comma-separated bench names (default: all)")
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes where a bench has them (minutes)"
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=Path("bench-results.json"),
        metavar="PATH",
        help="where the whole run goes as JSON (default: ./bench-results.json)",
    )
    parser.add_argument(
        "--logs",
        type=Path,
        default=None,
        help="keep each bench's output here (default: a temp dir)",
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds per bench (default: each bench's own)"
    )
    parser.add_argument("--list", action="store_true", help="list the benches and exit")
    args = parser.parse_args(argv)
    chosen = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in names]
    if unknown:
        parser.error(f"unknown bench {', '.join(unknown)}; known: {', '.join(names)}")
    args.chosen = chosen or names
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for b in BENCHES:
            print(f"{b.name:<22} {b.about} (timeout {b.timeout:g} s)")
        return 0
    logs = args.logs or Path(tempfile.mkdtemp(prefix="bench-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    chosen = [b for b in BENCHES if b.name in args.chosen]
    load_start, started_at, started = _load(), datetime.now(UTC), time.monotonic()
    speed_start = reference_ms()
    print(
        f"python -m bench: {len(chosen)} bench(es){' (quick)' if args.quick else ''}, "
        f"load average {load_start[0]} on {os.cpu_count()} CPUs; logs in {logs}",
        flush=True,
    )
    outcomes: list[Outcome] = []
    for i, bench in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {bench.name} ...", end=" ", flush=True)
        outcome = run_bench(bench, quick=args.quick, logs=logs, timeout=args.timeout)
        outcomes.append(outcome)
        detail = f": {outcome.reason}" if outcome.reason else ""
        print(f"{outcome.status} ({outcome.seconds:.1f} s){detail}", flush=True)
    load_end = _load()
    speed_end = reference_ms()
    result = {
        "started": started_at.isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - started, 1),
        "quick": args.quick,
        "commit": _commit(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_start": load_start,
            "load_average_end": load_end,
            # bench.speed: CPU ms of a fixed workload (lower: faster); CPU figures scale with it
            "reference_ms_start": round(speed_start, 1),
            "reference_ms_end": round(speed_end, 1),
        },
        "benches": [o.as_dict() for o in outcomes],
    }
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print(table(_rows(outcomes), ["bench", "figure", "target", "measured", "met"], 70))
    print(
        f"\nload average (1/5/15 min): start {'/'.join(map(str, load_start))}, end "
        f"{'/'.join(map(str, load_end))} on {os.cpu_count()} CPUs; machine speed (bench/speed.py, "
        f"lower is faster) {speed_start:.1f} ms at the start, {speed_end:.1f} ms at the end: "
        "CPU figures scale with it. Latency and throughput figures "
        "taken on a loaded, shared machine mean little (CPU per mention much less); compare runs "
        "on a quiet one."
    )
    if args.quick:
        print("--quick: smaller sizes; figures are not comparable with the targets' sizes.")
    print(f"JSON: {args.json.resolve()}  logs: {logs}")
    return 0
