"""CPU per heard message: what recording every channel message costs (`bot.memory.heard`).

Every message of every channel the bot is in passes here, most of them not for the bot, so the
hot path must stay small. Measured, as CPU time of this process (the SQLite writer thread
included) per message, printed beside `bench.speed`'s reference (the machine's speed right
now; compare runs only at a similar reference):
- `event → record`: a Slack `message` event turned into a record (`adapters.slack.heard`) and
  handed to the record (`Hearing.hear`): what runs before the event is acked;
- `written`: the same plus the batched write to the SQLite file (`heard.db`), per message;
- `read`: one turn's read of a thread's earlier messages from a full store (the turn path).

Run: python bench/bench_heard.py [-n 20000] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.slack.heard import hear_event
from bench.report import Figure, add_json_option, info, print_figures, write_json
from bench.speed import reference_ms
from bot.memory.heard import Hearing
from bot.messages import IncomingMessage
from bot.stores.heard_sqlite import SqliteHeardStore

T0 = 1_800_000_000.0


class _Core:
    """Hands heard messages to the record, as `BotApp.hear` does."""

    def __init__(self, hearing: Hearing) -> None:
        self.hearing = hearing

    def hear(self, message: Any) -> None:
        self.hearing.hear(message)

    def heard_changed(self, ref: Any, text: str | None) -> None:
        self.hearing.change_later(ref, text)

    async def heard_all(self, session: Any) -> bool:
        return False


def event(n: int) -> dict[str, Any]:
    """A typical channel message: a sentence with a mention and a link, every fifth a thread
    reply, every tenth with a file, one channel in ten."""
    ts = f"{T0 + n * 0.01:.6f}"
    out: dict[str, Any] = {
        "type": "message",
        "channel_type": "channel",
        "channel": f"C{n % 10}",
        "user": f"U{n % 37}",
        "text": f"<@U0{n % 7}> the build {n} passed, see <https://ci.example.com/{n}|the log>",
        "ts": ts,
        "team": "T1",
        "blocks": [{"type": "rich_text", "elements": []}],
    }
    if n % 5 == 1:
        out["thread_ts"] = f"{T0 + (n - 1) * 0.01:.6f}"
    if n % 10 == 3:
        out["subtype"] = "file_share"
        out["files"] = [{"id": f"F{n}", "name": f"report-{n}.pdf"}]
    return out


async def run(n: int) -> dict[str, float]:
    events = [event(i) for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        hearing = Hearing(await SqliteHeardStore.open(Path(tmp) / "heard.db"), flush_delay=0.05)
        core = _Core(hearing)
        # event → record (what runs before the ack), no writes in between.
        hearing.flush_delay = 3600.0
        started = time.process_time()
        for e in events:
            hear_event(core, e, team="T1", bot_user_id="UBOT", bot_id="BBOT")
        hot = (time.process_time() - started) / n * 1e6
        hearing._pending.clear()  # measured again below with the writes
        hearing._marks.clear()
        hearing.flush_delay = 0.05
        # event → record → written, in the batches the flush makes.
        started = time.process_time()
        for i, e in enumerate(events):
            hear_event(core, e, team="T1", bot_user_id="UBOT", bot_id="BBOT")
            if i % 200 == 199:
                await asyncio.sleep(0)  # the event loop turns, as between deliveries
        await hearing.flush()
        written = (time.process_time() - started) / n * 1e6
        # One turn's read of a thread partway in (the record covers it: no platform call).
        reads = []
        for i in range(0, min(n, 2000), 10):
            root = events[i]
            mention = IncomingMessage(
                platform="slack",
                team="T1",
                channel=root["channel"],
                thread=root["ts"],
                user="U1",
                text="what happened?",
                message_id=f"{T0 + n:.6f}",
                sent_at=datetime.fromtimestamp(T0 + n, UTC),
            )
            started = time.process_time()
            await hearing.earlier(mention)
            reads.append((time.process_time() - started) * 1e6)
        stored = await hearing.store.count()
        await hearing.close()
    return {
        "hot_us": round(hot, 2),
        "written_us": round(written, 2),
        "read_us": round(statistics.median(reads), 1),
        "stored": stored,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20_000, help="heard messages")
    add_json_option(parser)
    args = parser.parse_args()
    reference = reference_ms()
    result = asyncio.run(run(args.n))
    print(
        f"{args.n:,} heard messages: event → record {result['hot_us']} µs CPU each; "
        f"with the SQLite write {result['written_us']} µs; a turn's read "
        f"{result['read_us']} µs; {int(result['stored']):,} kept (bounded per place); "
        f"reference {reference:.1f} ms"
    )
    found: list[Figure] = [
        info("event → record (before the ack), CPU per message", result["hot_us"], "µs"),
        info("with the batched SQLite write, CPU per message", result["written_us"], "µs"),
        info("a turn's read of a thread's earlier messages, CPU", result["read_us"], "µs"),
        info("machine speed reference (bench.speed)", round(reference, 1), "ms"),
    ]
    print_figures("heard", found)
    write_json(args.json, "heard", found, {"n": args.n, **result, "reference_ms": reference})


if __name__ == "__main__":
    main()
