"""A BENCH_PROFILE wrapper for bench_slack: the bot's CPU over its whole life, background work
included.

bench_slack's "bot CPU per mention" reads the bot's CPU from the first mention to the last
reply. Work a turn leaves for the background (the episodic indexer embedding the turn's entry)
that is still queued at the last reply is done after that window, while the bot drains at
shutdown, and is not counted. This wrapper runs the bot and, when it exits, appends one JSON
line to $BENCH_LIFETIME_OUT: its user + system CPU seconds since start and the memory index's
entries per embedder (to check every entry was indexed). Subtract a run with `-n 1` (start-up,
model load, shutdown) and divide by the mentions. Both paths absolute (the bot runs in a
temporary directory):

    BENCH_PROFILE=$PWD/bench/lifetime_cpu.py BENCH_LIFETIME_OUT=/tmp/life.jsonl \\
        python bench/bench_slack.py --bot-env BOT_EMBEDDING_MODEL=local-fp32
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import runpy
import sqlite3
import sys
from pathlib import Path


def _entries() -> dict[str, int] | str:
    path = Path(os.environ.get("BOT_DATA_DIR", ".bot-data")) / "memory.db"
    try:
        with sqlite3.connect(path) as db:
            rows = db.execute(
                "SELECT coalesce(embedder, '-'), count(*) FROM memory_entries GROUP BY 1"
            ).fetchall()
    except sqlite3.Error as exc:
        return f"unreadable: {exc}"
    return {str(name): int(count) for name, count in rows}


def _report() -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    line = {
        "embedding_model": os.environ.get("BOT_EMBEDDING_MODEL"),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
        "entries": _entries(),
    }
    with open(os.environ.get("BENCH_LIFETIME_OUT", "bench-lifetime.jsonl"), "a") as out:
        out.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    atexit.register(_report)
    sys.argv = sys.argv[1:]  # the bot's console script, then its arguments
    runpy.run_path(sys.argv[0], run_name="__main__")
