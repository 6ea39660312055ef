"""What memory costs per turn as a conversation grows, model time excluded.

One timed turn is `bot.turn.TurnRunner.run()`, wired as `bot.app.BotApp` wires it (token counter,
context builder, session memory, the toolbox from `bot.toolbox.ToolboxFactory`), with an
in-process model that returns a canned `ModelResponse` at once. So a timed turn is exactly the
bot's own work: load the hot session, list the speaker's facts, store the user message, build the
context inside the token budget (tiktoken counts included), store the reply.

Backends: (a) SQLite store + in-process cache; (b) MongoDB (mongoeco started here, or
BENCH_MONGODB_URI) + Redis (BENCH_REDIS_URL, default redis://127.0.0.1:6379/0, under a
throw-away key prefix); (b') SQLite + Redis, which shows Redis's share without mongoeco's engine
cost. mongoeco is a Python MongoDB-protocol server whose inserts scan the collection, so it only
gets histories up to BENCH_MONGOECO_MAX (1,000) messages; a real MongoDB gets every size.
Compared with the OpenAI Agents SDK's `SQLiteSession` loading the same histories the way its
runner does each turn: `get_items()` (the whole history, the default), then `add_items()` of the
user input and of the reply. That is a lower bound of the SDK's cost (its runner also
deep-copies and re-formats every item) and it counts no tokens at all.

Histories of 10, 1,000 and 10,000 stored messages: alternating user/assistant messages of 30-60
words from three people, all stored before any cell is timed. A 10-message history gets a fresh
session per timed turn (its hot copy loaded first, untimed) so it stays 10 messages; the longer
ones are continued turn after turn (+2 messages a turn). "steady" = the state the background
summariser leaves (a summary and pinned facts covering all but the newest ~40 messages,
re-advanced between timed turns, untimed); "stale" = no summary yet (summary_upto_seq=0), the
worst case for what a turn loads (the hot tail is capped at 160 messages).

Prints p50/p90 per cell (ms), ratios against the targets (flat within 1.5x from 10 to 10,000
messages; at least 5x below the Agents SDK at 10,000) and peak RSS. Figures, not assertions.
The SDK column needs the `bench` extra (openai-agents): without it the bench says so in one line
and exits 2; `--no-sdk` runs without the comparison.

Run: python bench/bench_memory.py [--turns 50] [--warmup 5] [--sizes 10,1000,10000] [--no-sdk]
     [--json PATH]
     (BENCH_TURNS / BENCH_WARMUP set the defaults of --turns / --warmup)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

try:
    from agents import SQLiteSession, TResponseInputItem

    AGENTS_MISSING = ""
except ImportError:  # the `bench` extra: checked when the bench starts (bench.needs)
    AGENTS_MISSING = "openai-agents is not installed"
from openai.types.responses import (  # noqa: E402
    EasyInputMessageParam,
    ResponseOutputMessageParam,
    ResponseOutputTextParam,
)

from bench.needs import exit_needing  # noqa: E402
from bench.report import (  # noqa: E402
    Figure,
    add_json_option,
    at_least,
    at_most,
    info,
    print_figures,
    skipped,
    write_json,
)
from bot.app import BotApp  # noqa: E402
from bot.config import Settings  # noqa: E402
from bot.keys import PersonKey, SessionKey  # noqa: E402
from bot.memory.session import hot_key  # noqa: E402
from bot.messages import IncomingMessage  # noqa: E402
from bot.model import ModelResponse  # noqa: E402
from bot.stores.factory import open_store  # noqa: E402
from bot.stores.memory_cache import MemoryCache  # noqa: E402
from bot.stores.mongo import MongoStore  # noqa: E402
from bot.stores.protocols import Cache, Store  # noqa: E402
from bot.stores.records import NewMessage, PinnedFact, SessionState  # noqa: E402
from bot.stores.redis_cache import RedisCache  # noqa: E402
from bot.stores.resilient_cache import ResilientCache  # noqa: E402
from bot.toolbox import Toolbox  # noqa: E402
from testkit.sinks import CollectingSink  # noqa: E402

SIZES = (10, 1_000, 10_000)
TURNS = int(os.environ.get("BENCH_TURNS", "50"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "5"))
RAW_TAIL = 40  # unsummarised messages the summariser leaves behind (its max_messages)
FILL_BATCH = 100  # mongoeco handles insert batches of at most 100
# mongoeco scans on insert: 1,000 messages fill in ~20 s, 10,000 would take ~25 min.
MONGOECO_MAX = int(os.environ.get("BENCH_MONGOECO_MAX", "1000"))
MODEL = "gpt-4o-mini"
PLATFORM, TEAM = "slack", "T0BENCH"
USERS = ("U01ALICE", "U02BOB", "U03CAROL")
NAMES = {"U01ALICE": "alice", "U02BOB": "bob", "U03CAROL": "carol"}
SPEAKER = USERS[0]  # the person every timed turn answers

WORDS = (
    "the order shipment warehouse customer refund invoice delivery tracking number status "
    "yesterday tomorrow morning afternoon please could you check whether we already sent "
    "update team meeting notes project deadline release branch deploy staging production "
    "weather forecast Berlin Paris London rain sunny cold warm jacket umbrella travel plan "
    "budget report quarter numbers revenue cost estimate approve review document draft final "
    "question answer thanks great sounds good I think we should maybe also remember that "
    "account password reset access permission channel thread message reply summary list "
    "item price discount coupon address street city postal code phone email contact support "
    "ticket priority urgent later week month Monday Friday schedule call agenda follow up"
).split()
SUMMARY = (
    "Alice, Bob and Carol have been using this thread to coordinate the spring release and a "
    "run of customer orders. Alice tracks order #W2611340 (delayed at the Leipzig warehouse, "
    "refund requested if it misses Friday) and asked for weekly status notes. Bob owns the "
    "staging deploys and reported two failed builds caused by an expired access token, since "
    "rotated. Carol is preparing the quarterly budget report; revenue numbers are final, cost "
    "estimates still need review. The team agreed to move the release review to Thursday "
    "afternoon, to keep customer-facing messages short, and to check the weather for the "
    "offsite in Berlin next week. Open questions: whether the discount coupon applies to "
    "renewals, and who approves the final draft of the release notes."
)
PINNED = (
    "Release review moved to Thursday 15:00",
    "Order #W2611340 refund if not delivered by Friday",
    "Bob owns staging deploys",
    "Offsite in Berlin next week",
    "Customer-facing replies stay under 80 words",
)
FACTS = (
    "I prefer answers in bullet points",
    "My timezone is Europe/Berlin",
    "I am allergic to peanuts",
    "Call me Ali",
)
REPLY = (
    "Sure — the order left the Leipzig warehouse this morning and the tracking number shows "
    "delivery on Thursday, so it should arrive before Friday's refund deadline. I'll add it to "
    "the weekly status notes and remind you if the status changes."
)

log = logging.getLogger("bench_memory")


# --- helpers --------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _text(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(30, 60))]
    return " ".join(words).capitalize() + "."


def _history(n: int, seed: int) -> Iterator[tuple[str, str, str, int]]:
    """(role, user id, text, pair index) for n alternating user/assistant messages."""
    rng = random.Random(seed)
    for i in range(n):
        pair = i // 2
        yield ("user" if i % 2 == 0 else "assistant"), USERS[pair % len(USERS)], _text(rng), pair


@dataclass
class Cell:
    """Timings of one (backend, size, summary state) cell."""

    samples: list[float] = field(default_factory=list)  # ms per turn
    context_messages: list[int] = field(default_factory=list)  # messages sent to the model
    request_tokens: list[int] = field(default_factory=list)

    @property
    def p50(self) -> float:
        return _pct(self.samples, 0.5)

    @property
    def p90(self) -> float:
        return _pct(self.samples, 0.9)

    def cell(self) -> str:
        return f"{self.p50:7.2f} / {self.p90:7.2f}" if self.samples else "      n/a       "


class CannedModel:
    """Satisfies `bot.turn.Model`: answers at once, so a timed turn excludes model time."""

    def __init__(self) -> None:
        self.last_messages = 0

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_delta: Any = None,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        tool_choice: str | None = None,
        model: str | None = None,
    ) -> ModelResponse:
        self.last_messages = len(messages)
        return ModelResponse(content=REPLY, finish_reason="stop", model=MODEL)

    async def close(self) -> None:
        return None


# --- our side -------------------------------------------------------------------------------


class Harness:
    """A real `bot.app.BotApp` over one store and cache, with a model that answers at once."""

    def __init__(self, settings: Settings, store: Store, cache: Cache) -> None:
        self.store = store
        self.model = CannedModel()
        self.app = BotApp(settings, store=store, cache=cache, model=self.model)
        self.counter = self.app.counter
        self.memory = self.app.memory
        self.runner = self.app.runner
        self.toolboxes = self.app.toolboxes

    async def close(self) -> None:
        await self.toolboxes.close()

    async def fill(self, session: SessionKey, n: int) -> float:
        """Store n history messages through the store's append, in batches; returns seconds."""
        started = time.perf_counter()
        batch: list[NewMessage] = []
        for role, user, text, pair in _history(n, seed=n):
            person = PersonKey(PLATFORM, TEAM, user)
            batch.append(
                NewMessage(
                    role="user" if role == "user" else "assistant",
                    content=text,
                    speaker=person.id,
                    turn_id=f"t_fill_{pair}",
                    name=NAMES[user] if role == "user" else None,
                    tokens=self.counter.count(text),
                )
            )
            if len(batch) == FILL_BATCH:
                await self.store.append(session, batch)
                batch = []
        if batch:
            await self.store.append(session, batch)
        return time.perf_counter() - started

    async def add_facts(self) -> None:
        person = PersonKey(PLATFORM, TEAM, SPEAKER)
        for text in FACTS:
            await self.store.add_fact(person, text, audience="public")  # used in its channels

    async def set_summary(self, session: SessionKey, upto: int) -> None:
        """Put the state the summariser would leave: summary + pinned facts up to `upto`."""
        for _ in range(5):
            state = await self.store.get_state(session) or SessionState(session=session.id)
            state.summary = SUMMARY if upto else ""
            state.summary_upto_seq = upto
            state.summary_speakers = sorted(PersonKey(PLATFORM, TEAM, u).id for u in USERS)
            state.pinned = (
                [PinnedFact(text=t, speaker="", seq=upto) for t in PINNED] if upto else []
            )
            if await self.store.put_state(session, state):
                return
        raise RuntimeError("put_state kept conflicting")

    async def last_seq(self, session: SessionKey) -> int:
        latest = await self.store.recent(session, limit=1)
        return latest[-1].seq if latest else 0

    async def measure(self, sessions: list[SessionKey], *, steady: bool) -> Cell:
        """One session: every turn continues it (the history grows 2 messages a turn). Several:
        turn i runs on sessions[i], whose hot copy is loaded first (untimed), so each turn sees
        exactly the filled history with a warm cache."""
        toolbox: Toolbox = await self.toolboxes.for_team(sessions[0].team_key)
        cell = Cell()
        rng = random.Random(7)
        for i in range(WARMUP + TURNS):
            session = sessions[0] if len(sessions) == 1 else sessions[i]
            if steady:  # the summariser keeping up, between turns (untimed)
                await self.set_summary(session, max(0, await self.last_seq(session) - RAW_TAIL))
            if len(sessions) > 1:
                await self.memory.load(session)
            msg = IncomingMessage(
                platform=session.platform,
                team=session.team,
                channel=session.channel,
                thread=session.thread,
                user=SPEAKER,
                text=_text(rng),
                message_id=f"m{i}",
                user_name=NAMES[SPEAKER],
            )
            sink = CollectingSink()
            started = time.perf_counter()
            result = await self.runner.run(msg, toolbox, sink)
            elapsed = (time.perf_counter() - started) * 1000
            if result.outcome != "answer" or sink.final != REPLY:
                raise RuntimeError(f"turn did not complete: {result.outcome} {sink.final!r}")
            if i >= WARMUP:
                cell.samples.append(elapsed)
                cell.context_messages.append(self.model.last_messages)
                cell.request_tokens.append(max(result.request_tokens))
        return cell


@dataclass
class BackendResult:
    name: str
    steady: dict[int, Cell] = field(default_factory=dict)
    stale: dict[int, Cell] = field(default_factory=dict)
    fill_seconds: dict[int, float] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)
    probe: str = ""  # raw store call timings after all histories are stored


def _sessions_for(n: int) -> int:
    """Short histories get a session per turn (else 2 messages a turn would change them);
    longer ones are continued turn after turn (at most +11% over a cell)."""
    return WARMUP + TURNS if n <= RAW_TAIL else 1


async def run_ours(
    name: str, settings: Settings, store: Store, cache: Cache, sizes: tuple[int, ...]
) -> BackendResult:
    """Fill every history first (so all cells see the same collection size), then time each."""
    out = BackendResult(name)
    harness = Harness(settings, store, cache)
    try:
        await harness.add_facts()
        sessions: dict[int, list[SessionKey]] = {}
        for n in sizes:
            keys = [
                SessionKey(PLATFORM, TEAM, f"C{n}", f"{uuid.uuid4().hex[:8]}.{k:04d}")
                for k in range(_sessions_for(n))
            ]
            try:
                out.fill_seconds[n] = sum([await harness.fill(key, n) for key in keys])
            except Exception as exc:  # a test server that cannot hold this much history
                out.skipped[n] = f"{type(exc).__name__}: {exc}"[:160]
                print(f"  {name}: filling {n:,} messages failed: {out.skipped[n]}", flush=True)
                continue
            sessions[n] = keys
            what = f"{len(keys)} sessions of {n:,}" if len(keys) > 1 else f"{n:,}"
            print(f"  {name}: filled {what} messages in {out.fill_seconds[n]:.1f} s", flush=True)
        for n, keys in sessions.items():
            out.steady[n] = await harness.measure(keys, steady=True)
            if n <= RAW_TAIL:  # nothing to summarise yet: the stale case is the same turn
                out.stale[n] = out.steady[n]
            else:
                await harness.set_summary(keys[0], 0)
                # A session whose summary is behind has its hot copy rebuilt from the store
                # (the steady cell left only the short unsummarised tail cached).
                await cache.delete(hot_key(keys[0].id))
                out.stale[n] = await harness.measure(keys, steady=False)
            for key in keys:
                await cache.delete(hot_key(key.id))
            print(
                f"  {name}: {n:,} messages timed (p50 steady {out.steady[n].p50:.2f} ms, "
                f"stale {out.stale[n].p50:.2f} ms)",
                flush=True,
            )
        if sessions:
            out.probe = await _probe(store, next(iter(sessions.values()))[0])
    finally:
        await harness.close()
    return out


async def _probe(store: Store, session: SessionKey) -> str:
    """Median raw store calls a turn makes, to tell the engine's cost from the bot's."""
    person = PersonKey(PLATFORM, TEAM, SPEAKER)
    timings: dict[str, list[float]] = {"append(1)": [], "recent(1)": [], "get_state": []}
    for i in range(10):
        t0 = time.perf_counter()
        await store.append(
            session,
            [NewMessage(role="user", content=REPLY, speaker=person.id, turn_id=f"t_probe_{i}")],
        )
        t1 = time.perf_counter()
        await store.recent(session, limit=1)
        t2 = time.perf_counter()
        await store.get_state(session)
        t3 = time.perf_counter()
        timings["append(1)"].append((t1 - t0) * 1000)
        timings["recent(1)"].append((t2 - t1) * 1000)
        timings["get_state"].append((t3 - t2) * 1000)
    return ", ".join(f"{k} {statistics.median(v):.2f} ms" for k, v in timings.items())


# --- the Agents SDK side --------------------------------------------------------------------


def _sdk_user(text: str) -> TResponseInputItem:
    return EasyInputMessageParam(role="user", content=text)


def _sdk_assistant(text: str) -> TResponseInputItem:
    """An assistant message as the SDK stores a model's output item."""
    return ResponseOutputMessageParam(
        id=f"msg_{uuid.uuid4().hex}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputTextParam(type="output_text", text=text, annotations=[])],
    )


async def run_sdk(db_path: Path, sizes: tuple[int, ...]) -> BackendResult:
    out = BackendResult("Agents SDK SQLiteSession")
    if AGENTS_MISSING:
        for n in sizes:
            out.skipped[n] = AGENTS_MISSING
        return out
    sessions = {
        n: [SQLiteSession(f"bench-{n}-{k}", db_path) for k in range(_sessions_for(n))]
        for n in sizes
    }
    try:
        for n, group in sessions.items():
            started = time.perf_counter()
            for session in group:
                batch: list[TResponseInputItem] = []
                for role, _user, text, _pair in _history(n, seed=n):
                    batch.append(_sdk_user(text) if role == "user" else _sdk_assistant(text))
                    if len(batch) == FILL_BATCH:
                        await session.add_items(batch)
                        batch = []
                if batch:
                    await session.add_items(batch)
            out.fill_seconds[n] = time.perf_counter() - started
        for n, group in sessions.items():
            cell = Cell()
            rng = random.Random(7)
            for i in range(WARMUP + TURNS):
                session = group[0] if len(group) == 1 else group[i]
                text = _text(rng)
                t0 = time.perf_counter()
                history = await session.get_items()  # what the runner loads every turn
                await session.add_items([_sdk_user(text)])  # the input, saved first...
                await session.add_items([_sdk_assistant(REPLY)])  # ...then the output
                elapsed = (time.perf_counter() - t0) * 1000
                if i >= WARMUP:
                    cell.samples.append(elapsed)
                    cell.context_messages.append(len(history) + 1)
            out.steady[n] = cell
    finally:
        for group in sessions.values():
            for session in group:
                session.close()
    return out


# --- servers --------------------------------------------------------------------------------


@contextlib.contextmanager
def _mongo_uri() -> Iterator[tuple[str, bool]]:
    """(uri, is mongoeco): BENCH_MONGODB_URI, or a mongoeco server started for this run."""
    uri = os.environ.get("BENCH_MONGODB_URI")
    if uri:
        yield uri, False
        return
    from testkit.mongoeco import mongoeco_server

    with mongoeco_server() as started:
        yield started, True


@contextlib.asynccontextmanager
async def _redis_cache() -> AsyncIterator[Cache]:
    """Redis (as `open_cache` builds it: with the in-process fallback) under a throw-away key
    prefix, removed afterwards."""
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    primary = RedisCache.from_url(redis_url, prefix=f"bench:{uuid.uuid4().hex[:8]}:")
    if not await primary.ping():
        await primary.close()
        raise RuntimeError(f"Redis does not answer at {redis_url}")
    cache = ResilientCache(primary, MemoryCache())
    try:
        yield cache
    finally:
        keys = [k async for k in primary.client.scan_iter(match=primary.prefix + "*")]
        if keys:
            await primary.client.delete(*keys)
        await cache.close()


@contextlib.asynccontextmanager
async def _mongo_store() -> AsyncIterator[tuple[Store, bool]]:
    """(store, is mongoeco) over a throw-away database."""
    db_name = f"bench_{uuid.uuid4().hex[:8]}"
    with _mongo_uri() as (uri, is_mongoeco):
        store = await open_store(mongodb_uri=uri, mongodb_db=db_name, data_dir=Path("."))
        try:
            yield store, is_mongoeco
        finally:
            if not is_mongoeco and isinstance(store, MongoStore):  # leave a real server clean
                with contextlib.suppress(Exception):
                    await store.client.drop_database(db_name)
            await store.close()


# --- report ---------------------------------------------------------------------------------


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def _table(
    title: str, ours: list[BackendResult], sdk: BackendResult, which: str, sizes: tuple[int, ...]
) -> None:
    cols = [*ours, sdk]
    w = 17
    print(f"\n{title}\n")
    header = f"{'messages':>8} | " + " | ".join(f"{r.name[:w]:^{w}}" for r in cols)
    header += " || " + " | ".join(f"{'SDK/' + r.name[:8]:^12}" for r in ours)
    print(header)
    sub = f"{'':>8} | " + " | ".join(f"{'p50 / p90 ms':^{w}}" for _ in cols)
    sub += " || " + " | ".join(f"{'p50':^12}" for _ in ours)
    print(sub)
    print("-" * len(header))

    def pick(r: BackendResult, n: int) -> Cell | None:
        table = r.steady if (r is sdk or which == "steady") else r.stale
        return table.get(n)

    for n in sizes:
        cells = [pick(r, n) for r in cols]
        row = f"{n:>8,} | " + " | ".join(f"{(c.cell() if c else 'n/a'):^{w}}" for c in cells)
        sdk_cell = pick(sdk, n)
        ratios = []
        for r in ours:
            c = pick(r, n)
            ratios.append(f"{_ratio(sdk_cell.p50, c.p50) if c and sdk_cell else 'n/a':^12}")
        print(row + " || " + " | ".join(ratios))
    growth = []
    for r in cols:
        measured = [n for n in sizes if pick(r, n)]
        small, large = (pick(r, measured[0]), pick(r, measured[-1])) if measured else (None, None)
        growth.append(
            f"{measured[-1]:,}/{measured[0]}: {_ratio(large.p50, small.p50)}"
            if small and large and len(measured) > 1
            else "n/a"
        )
    print(f"{'growth':>8} | " + " | ".join(f"{g:^{w}}" for g in growth))
    print("\ncontext sent to the model (median messages / tokens):")
    for r in ours:
        parts = []
        for n in sizes:
            c = pick(r, n)
            if c:
                m = int(statistics.median(c.context_messages))
                t = int(statistics.median(c.request_tokens))
                parts.append(f"{n:,}: {m} / {t}")
        print(f"  {r.name}: " + ", ".join(parts))
    parts = []
    for n in sizes:
        c = sdk.steady.get(n)
        if c:
            parts.append(f"{n:,}: {int(statistics.median(c.context_messages))} items")
    print(f"  {sdk.name}: " + ", ".join(parts) + " (all of it, no budget)")


def _verdict(ours: list[BackendResult], sdk: BackendResult) -> None:
    print("\ntargets (p50): flat = largest/smallest history <= 1.5x; SDK/ours >= 5x at the largest")
    for r in ours:
        for which, table in (("steady", r.steady), ("stale", r.stale)):
            sizes = sorted(table)
            if len(sizes) < 2:
                print(f"  {r.name} [{which}]: n/a (fewer than two sizes ran)")
                continue
            small, mid, large = sizes[0], sizes[-2], sizes[-1]
            a, m, b, s = table[small], table[mid], table[large], sdk.steady.get(large)
            flat = b.p50 / a.p50
            line = (
                f"  {r.name} [{which}]: {large:,}/{small} = {flat:.2f}x "
                f"({'meets' if flat <= 1.5 else 'misses'} <= 1.5x)"
            )
            if mid != small:
                line += f", {large:,}/{mid:,} = {b.p50 / m.p50:.2f}x"
            if s is not None:
                faster = s.p50 / b.p50
                line += (
                    f"; SDK/ours at {large:,} = {faster:.2f}x "
                    f"({'meets' if faster >= 5 else 'misses'} >= 5x)"
                )
            print(line)
    for r in ours:
        if r.probe:
            print(f"  {r.name} raw store calls after filling: {r.probe}")
        for n, why in r.skipped.items():
            print(f"  note: {r.name} has no {n:,}-message cell: {why}")


def figures(ours: list[BackendResult], sdk: BackendResult, missing: dict[str, str]) -> list[Figure]:
    """Per backend: flatness (steady state) against <= 1.5x, the cost at the largest history,
    and the Agents SDK's cost over ours there against >= 5x. mongoeco's cells are not targets:
    it is a Python test server, far slower than a real MongoDB."""
    out: list[Figure] = []
    for r in ours:
        sizes = sorted(r.steady)
        if len(sizes) < 2:
            why = "; ".join(r.skipped.values()) or "fewer than two sizes ran"
            out.append(skipped(f"{r.name}: flat {SIZES[-1]:,}/{SIZES[0]}", "≤ 1.5×", why))
            continue
        small, large = sizes[0], sizes[-1]
        a, b = r.steady[small], r.steady[large]
        name = f"{r.name}: steady {large:,}/{small} messages"
        ratio = round(b.p50 / a.p50, 2)
        mongoeco = r.name.startswith("mongoeco")
        out.append(info(name, ratio, "×") if mongoeco else at_most(name, ratio, 1.5, "×"))
        out.append(
            info(f"{r.name}: ms per turn at {large:,} messages (p50)", round(b.p50, 2), "ms")
        )
        if r.stale.get(large) and r.stale.get(small):
            stale = round(r.stale[large].p50 / r.stale[small].p50, 2)
            out.append(info(f"{r.name}: stale summary {large:,}/{small}", stale, "×"))
        for n, why in sorted(r.skipped.items()):
            out.append(skipped(f"{r.name}: {n:,} messages", "≤ 1.5× flat", why))
        s = sdk.steady.get(large)
        name = f"Agents SDK / {r.name} at {large:,} messages"
        if mongoeco:
            continue
        if s is None:
            out.append(skipped(name, "≥ 5×", sdk.skipped.get(large, "the SDK side did not run")))
        else:
            out.append(at_least(name, round(s.p50 / b.p50, 2), 5, "×"))
    for name, why in missing.items():
        out.append(skipped(f"{name}: flat {SIZES[-1]:,}/{SIZES[0]}", "≤ 1.5×", why))
    out.append(info("peak RSS", round(_peak_rss_mb()), "MiB"))
    return out


async def main(json_path: Path | None) -> None:
    logging.basicConfig(level=logging.WARNING)
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        bot_model=MODEL,
        bot_context_tokens=8000,
        bot_reply_tokens=1024,
        bot_session_ttl=1800.0,
        bot_max_tool_rounds=5,
        bot_turn_timeout=120.0,
        mongodb_uri=None,
        redis_url=None,
        bot_rate_user="off",  # one speaker, many turns a second: not what the limits are for
        bot_rate_team="off",
    )
    started = time.perf_counter()
    print(
        f"bench_memory: {TURNS} timed turns per cell after {WARMUP} warm-up turns; "
        f"context budget {settings.bot_context_tokens} tokens, model {settings.bot_model}; "
        f"python {sys.version.split()[0]}",
        flush=True,
    )
    ours: list[BackendResult] = []
    missing: dict[str, str] = {}  # backends that could not run here, and why
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        print("\n(a) SQLite + in-process cache", flush=True)
        store = await open_store(mongodb_uri=None, mongodb_db="bot", data_dir=Path(tmp) / "a")
        try:
            ours.append(await run_ours("SQLite+in-proc", settings, store, MemoryCache(), SIZES))
        finally:
            await store.close()
        print(f"  peak RSS so far: {_peak_rss_mb():.0f} MiB", flush=True)

        print("\n(b) MongoDB + Redis", flush=True)
        try:
            async with _mongo_store() as (mstore, is_mongoeco), _redis_cache() as rcache:
                sizes: tuple[int, ...] = SIZES
                if is_mongoeco:
                    sizes = tuple(n for n in SIZES if n <= MONGOECO_MAX)
                    print(
                        "  using mongoeco (an in-memory MongoDB-protocol server written in "
                        "Python) + Redis;\n  its insert cost grows with the collection size, so "
                        f"histories above {MONGOECO_MAX:,} messages are\n  not run on it "
                        "(filling 10,000 would take ~25 min). Set BENCH_MONGODB_URI to a real\n"
                        "  MongoDB to run every size.",
                        flush=True,
                    )
                else:
                    print("  using MongoDB at BENCH_MONGODB_URI + Redis", flush=True)
                label = "mongoeco+Redis" if is_mongoeco else "Mongo+Redis"
                res = await run_ours(label, settings, mstore, rcache, sizes)
                for n in SIZES:
                    if n not in sizes:
                        res.skipped[n] = (
                            "needs a real MongoDB (BENCH_MONGODB_URI): mongoeco is capped at "
                            f"BENCH_MONGOECO_MAX={MONGOECO_MAX:,} messages"
                        )
                ours.append(res)
        except Exception as exc:
            print(f"  skipped: {type(exc).__name__}: {exc}", flush=True)
            missing["MongoDB+Redis"] = f"{type(exc).__name__}: {exc}"[:160]

        print("\n(b') SQLite + Redis (Redis's share without mongoeco's engine cost)", flush=True)
        try:
            store = await open_store(mongodb_uri=None, mongodb_db="bot", data_dir=Path(tmp) / "b2")
            try:
                async with _redis_cache() as rcache:
                    ours.append(await run_ours("SQLite+Redis", settings, store, rcache, SIZES))
            finally:
                await store.close()
        except Exception as exc:
            print(f"  skipped: {type(exc).__name__}: {exc}", flush=True)
            missing["SQLite+Redis"] = f"{type(exc).__name__}: {exc}"[:160]
        print(f"  peak RSS so far: {_peak_rss_mb():.0f} MiB", flush=True)

        print("\n(c) OpenAI Agents SDK SQLiteSession (file database)", flush=True)
        sdk = await run_sdk(Path(tmp) / "agents.db", SIZES)
        if AGENTS_MISSING:
            print(f"  skipped: {AGENTS_MISSING}", flush=True)
        for n, seconds in sdk.fill_seconds.items():  # none when skipped (it was a KeyError)
            print(f"  filled {n:,}-item histories in {seconds:.1f} s", flush=True)
        print(f"  peak RSS so far: {_peak_rss_mb():.0f} MiB", flush=True)

    _table(
        "STEADY STATE (summary covers all but the newest ~40 messages): ms per turn, model "
        "excluded",
        ours,
        sdk,
        "steady",
        SIZES,
    )
    _table(
        "STALE SUMMARY (summary_upto_seq=0: nothing summarised yet): ms per turn, model excluded",
        ours,
        sdk,
        "stale",
        SIZES,
    )
    _verdict(ours, sdk)
    print(f"\npeak RSS {_peak_rss_mb():.0f} MiB; total run {time.perf_counter() - started:.0f} s")
    found = figures(ours, sdk, missing)
    print_figures("memory", found)
    detail = {
        "turns": TURNS,
        "warmup": WARMUP,
        "sizes": list(SIZES),
        "cells": [
            {
                "backend": r.name,
                "messages": n,
                "summary": which,
                "p50_ms": round(cell.p50, 3),
                "p90_ms": round(cell.p90, 3),
            }
            for r in [*ours, sdk]
            for which, table in (("steady", r.steady), ("stale", r.stale))
            for n, cell in sorted(table.items())
            if cell.samples
        ],
        "skipped": {r.name: {str(n): why for n, why in r.skipped.items()} for r in [*ours, sdk]},
    }
    write_json(json_path, "memory", found, detail)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=TURNS, help="timed turns per cell")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="untimed turns before them")
    parser.add_argument("--sizes", default=",".join(str(n) for n in SIZES), help="histories")
    parser.add_argument(
        "--no-sdk", action="store_true", help="skip the Agents SDK column (no `bench` extra needed)"
    )
    add_json_option(parser)
    args = parser.parse_args()
    if args.no_sdk:
        AGENTS_MISSING = "not run (--no-sdk)"
    elif AGENTS_MISSING:
        exit_needing("bench_memory", "bench", f"{AGENTS_MISSING}; --no-sdk runs without it")
    TURNS, WARMUP = args.turns, args.warmup
    SIZES = tuple(sorted({int(n) for n in args.sizes.split(",") if n.strip()}))
    asyncio.run(main(args.json))
