"""What `/memory forget all` costs in a team of a given size: the scan for copies included.

A team of 200 channels with `--messages` messages in all (20 people and the bot taking turns;
one bot reply in ten quotes an earlier message of its channel, anyone's), on the embedded SQLite
store. One person is forgotten; printed: wall and CPU seconds, the records cut, and the
machine's speed reference (`bench/speed.py`) beside them.

Run: python bench/bench_forget.py [--messages 10000,100000] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import add_json_option, info, print_figures, write_json
from bench.speed import reference_ms
from bot.keys import PersonKey, SessionKey
from bot.memory.erasure import Eraser
from bot.stores.records import NewMessage
from bot.stores.sqlite import SqliteStore

PEOPLE = 20
SESSIONS = 200


async def seed(store: SqliteStore, messages: int) -> None:
    """Messages of 12 words drawn from a 2,000-word vocabulary; one bot reply in ten quotes an
    earlier message of the session (anyone's), as models repeat what they were given."""
    rng = random.Random(19)
    vocab = [f"w{n}{chr(97 + n % 26)}" for n in range(2000)]
    per_session = max(messages // SESSIONS // 2, 1)
    for s in range(SESSIONS):
        session = SessionKey("slack", "T1", f"C{s}")
        batch: list[NewMessage] = []
        said: list[str] = []
        for i in range(per_session):
            who = f"slack:T1:U{rng.randrange(PEOPLE)}"
            words = " ".join(rng.choice(vocab) for _ in range(12)) + "."
            said.append(words)
            quoted = rng.random() < 0.1
            reply = f"You said earlier: {rng.choice(said)}" if quoted else "Noted, thanks."
            turn = f"t{s}-{i}"
            batch.append(NewMessage(role="user", content=words, speaker=who, turn_id=turn))
            batch.append(NewMessage(role="assistant", content=reply, speaker=who, turn_id=turn))
        await store.append(session, batch)


async def one(messages: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = await SqliteStore.open(Path(tmp) / "bot.db")
        try:
            await seed(store, messages)
            eraser = Eraser(store)
            wall, cpu = time.perf_counter(), time.process_time()
            receipt = await eraser.forget_all(PersonKey("slack", "T1", "U3"))
            return {
                "messages": messages,
                "wall_s": round(time.perf_counter() - wall, 2),
                "cpu_s": round(time.process_time() - cpu, 2),
                "messages_erased": int(receipt.counts.get("messages", 0)),
                "copies": int(receipt.counts.get("copies", 0)),
            }
        finally:
            await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", default="10000,100000")
    add_json_option(parser)
    args = parser.parse_args()
    speed = reference_ms()
    results = [asyncio.run(one(int(n))) for n in args.messages.split(",")]
    figures = [info("machine speed reference (bench/speed.py; lower is faster)", speed, "ms")]
    for r in results:
        where = f"{r['messages']:,} messages in the team"
        figures += [
            info(f"forget all, wall ({where})", r["wall_s"], "s"),
            info(f"forget all, CPU ({where})", r["cpu_s"], "s"),
            info(f"their messages erased ({where})", r["messages_erased"]),
            info(f"other records with their words cut ({where})", r["copies"]),
        ]
    print_figures("forget", figures)
    write_json(args.json, "forget", figures, {"runs": results})


if __name__ == "__main__":
    main()
