"""The nightly consolidation over a seeded month of conversations, model answering instantly.

The month is `testkit/memory_seed.py` (four people over DMs, two channels and threads: durable
statements, some changing during the month, repeats, greetings, moods, guesses, questions; bot
replies restating preferences; recalled-memory text quoted back). The model is the test server
(`testkit/fakes/openai_server.py`) whose memory brain is a deliberately sloppy extractor: it
proposes moods, guesses, recalled text and the bot's own restatements as facts, so the per-outcome
counts show what the bot's checks and reconciliation did with them. Everything else is real: the
SQLite store (or MongoDB: BENCH_MONGODB_URI), the memory index, the openai client over HTTP.

Prints: candidates per outcome (ADD, UPDATE, DELETE, NOOP, REJECT), sessions/s, model tokens per
session, model requests, peak RSS; a second run (must ask nothing); and whether the live facts
match the seed's oracle. `--json PATH` writes the same as JSON.

Run: python bench/bench_consolidate.py [--days 30] [--scale 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import Figure, add_json_option, info, print_figures, write_json
from bot.memory.consolidation import Consolidator
from bot.memory.index_tiers import IndexMemories
from bot.memory.reconcile import OUTCOMES, Reconciler
from bot.memory.structured import JsonAsker
from bot.model import ModelClient
from bot.stores.factory import open_store
from bot.stores.index_factory import open_memory_index
from bot.stores.protocols import Store
from testkit import memory_seed as month
from testkit.fakes.openai_server import FakeOpenAI


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def seeded(store: Store, days: int, scale: int) -> int:
    written = 0
    for i in range(scale):
        written += await month.seed(store, days=days, seed_value=7 + i)
    return written


async def oracle_ok(store: Store) -> bool:
    for person in month.PEOPLE:
        live = await store.list_facts(person.key)
        want = month.expected_live(person)
        if sorted(f.key or "" for f in live) != sorted(want):
            return False
        if any(want[f.key or ""].lower() not in f.text.lower() for f in live):
            return False
    return True


async def run(days: int, scale: int, concurrency: int) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="bench-consolidate-"))
    mongo = os.environ.get("BENCH_MONGODB_URI")
    store = await open_store(
        mongodb_uri=mongo, mongodb_db=f"bench{uuid.uuid4().hex[:8]}", data_dir=data
    )
    index = await open_memory_index(store, data_dir=data)
    messages = await seeded(store, days, scale)
    fake = FakeOpenAI().start_in_thread()
    model = ModelClient(api_key="x", base_url=fake.base_url, model="fake", max_retries=0)
    try:
        asker = JsonAsker(model, max_tokens=2000)
        consolidator = Consolidator(
            store,
            Reconciler(store, JsonAsker(model)),
            asker,
            holder="bench:1:x",
            memories=IndexMemories(index),
            concurrency=concurrency,
        )
        started = time.perf_counter()
        report = await consolidator.run()
        seconds = time.perf_counter() - started
        requests = len(fake.requests)
        second = await consolidator.run()
        out: dict[str, Any] = {
            "store": "mongodb" if mongo else "sqlite",
            "days": days,
            "scale": scale,
            "messages": messages,
            "sessions": report.sessions,
            "outcomes": {o: report.outcomes.get(o, 0) for o in OUTCOMES},
            "memories": report.memories,
            "seconds": round(seconds, 3),
            "sessions_per_s": round(report.sessions / seconds, 2) if seconds else 0.0,
            "tokens": report.tokens,
            "tokens_per_session": round(report.tokens / max(report.sessions, 1), 1),
            "model_requests": requests,
            "second_run": {
                "sessions": second.sessions,
                "model_requests": len(fake.requests) - requests,
            },
            "facts_match_oracle": await oracle_ok(store),
            "peak_rss_mb": round(peak_rss_mb(), 1),
        }
    finally:
        await model.close()
        fake.stop()
        await index.close()
        await store.close()
    return out


def figures(result: dict[str, Any]) -> list[Figure]:
    second = result["second_run"]["model_requests"]
    match = bool(result["facts_match_oracle"])
    return [
        Figure("live facts = the seed's oracle", "= oracle", "yes" if match else "no", "", match),
        Figure("second run: model requests", "0 (nothing new)", second, "", second == 0),
        info(
            "candidates by outcome",
            ", ".join(f"{k} {v}" for k, v in result["outcomes"].items()),
        ),
        info("sessions per second", result["sessions_per_s"], "sessions/s"),
        info("model tokens per session", result["tokens_per_session"], "tokens"),
        info("peak RSS", result["peak_rss_mb"], "MB"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument(
        "--scale", type=int, default=1, help="copies of the month (more people-days)"
    )
    parser.add_argument("--concurrency", type=int, default=4)
    add_json_option(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    result = asyncio.run(run(args.days, args.scale, args.concurrency))
    print(f"store: {result['store']}, {result['messages']} messages, {result['sessions']} sessions")
    print("candidates by outcome: " + ", ".join(f"{k} {v}" for k, v in result["outcomes"].items()))
    print(f"episodic memories written: {result['memories']}")
    print(
        f"{result['sessions_per_s']} sessions/s ({result['seconds']} s), "
        f"{result['tokens_per_session']} model tokens/session, "
        f"{result['model_requests']} model requests"
    )
    print(
        f"second run: {result['second_run']['sessions']} sessions, "
        f"{result['second_run']['model_requests']} model requests"
    )
    print(f"live facts match the seed's oracle: {result['facts_match_oracle']}")
    print(f"peak RSS: {result['peak_rss_mb']} MB")
    found = figures(result)
    print_figures("consolidate", found)
    write_json(args.json, "consolidate", found, result)


if __name__ == "__main__":
    main()
