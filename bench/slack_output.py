"""Figures from `bench/bench_slack.py`'s printed report, for a bench_slack without `--json`.

bench_slack is getting `--json PATH` (and `--replicas N`) from its own owner; until a checkout
has them, `python -m bench` reads the lines bench_slack prints today instead. Once bench_slack
writes its own JSON, the runner uses that and this module is not consulted. A line this parser
does not find becomes a figure saying so, never a guess.
"""

from __future__ import annotations

import re

from bench.report import Figure, at_most, below, info, skipped

ACK_P99_MS = 50.0  # issue 4 (and issue 12: "well under 50 ms")
CPU_MS = 6.0  # issue 12: bot CPU per answered mention, inbox included
REPLY_P50_MS = 50.0  # issue 12: event-to-reply minus model, p50

_FLOAT = r"([0-9][0-9,]*\.?[0-9]*|nan)"
_N = re.compile(r"N=(\d+) mentions")
_THROUGHPUT = re.compile(rf"throughput\s+{_FLOAT} events/s")
_ACK = re.compile(rf"ack \(driver-observed\) p50\s+{_FLOAT} ms\s+p99\s+{_FLOAT} ms")
_REPLY = re.compile(rf"event->reply - model\s+p50\s+{_FLOAT} ms\s+p99\s+{_FLOAT} ms")
_ONCE = re.compile(r"answered once\s+(\d+)/(\d+)\s+lost (\d+)\s+answered twice (\d+)")
_CPU = re.compile(rf"CPU during the run\s+bot {_FLOAT} s")
_PEAK = re.compile(rf"peak {_FLOAT} MiB")


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def figures(stdout: str) -> list[Figure]:
    """The Slack figures the issues set targets for, read from bench_slack's report."""
    out: list[Figure] = []
    n_match = _N.search(stdout)
    missing = "not in bench_slack's output"
    if m := _ONCE.search(stdout):
        once, total = int(m.group(1)), int(m.group(2))
        out.append(
            Figure(
                "events answered exactly once",
                f"all {total:,}",
                f"{once:,}/{total:,}",
                "",
                once == total and m.group(3) == "0" and m.group(4) == "0",
            )
        )
    else:
        out.append(skipped("events answered exactly once", "all", missing))
    if m := _ACK.search(stdout):
        out.append(below("ack p99 (driver-observed)", _num(m.group(2)), ACK_P99_MS, "ms"))
        out.append(info("ack p50 (driver-observed)", _num(m.group(1)), "ms"))
    else:
        out.append(skipped("ack p99 (driver-observed)", f"< {ACK_P99_MS:g} ms", missing))
    cpu = _CPU.search(stdout)
    if cpu and n_match:
        per = round(_num(cpu.group(1)) * 1000 / int(n_match.group(1)), 2)
        out.append(at_most("bot CPU per answered mention", per, CPU_MS, "ms"))
    else:
        out.append(skipped("bot CPU per answered mention", f"≤ {CPU_MS:g} ms", missing))
    if m := _REPLY.search(stdout):
        out.append(below("event → reply − model p50", _num(m.group(1)), REPLY_P50_MS, "ms"))
        out.append(info("event → reply − model p99", _num(m.group(2)), "ms"))
    else:
        out.append(skipped("event → reply − model p50", f"< {REPLY_P50_MS:g} ms", missing))
    if m := _THROUGHPUT.search(stdout):
        out.append(info("throughput", _num(m.group(1)), "events/s"))
    if m := _PEAK.search(stdout):
        out.append(info("bot peak memory", _num(m.group(1)), "MiB"))
    return out
