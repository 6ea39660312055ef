"""Discord adapter benchmark: N mentions over the local gateway, C conversations at a time.

Two processes, so the bot's figures are its own:
- bot (child): `bot discord`'s `run_discord` on the real core (SQLite, in-process cache) or,
  with `--core sleep`, on a stub core that only sleeps for the model latency; it logs in to
  FakeDiscord through the real discord.py client like any test;
- driver (this process): FakeDiscord (REST + gateway) on its loop, FakeOpenAI (answering after
  the model latency) in a thread. C conversations (channels spread over several guilds) each
  mention the bot, wait for the answer, and mention it again, until N mentions were sent.

Prints throughput, the bot's overhead from the MESSAGE_CREATE dispatch to its first REST call
(the typing indicator) and to the reply minus the model latency (p50/p99), the bot's peak
memory, and checks every mention was answered exactly once. `--json PATH` writes the figures
(`bench.report`) and the whole result as JSON.

    python bench/bench_discord.py                   # N=1000, 50 at once, model 200 ms
    python bench/bench_discord.py -n 200 --core sleep
    python bench/bench_discord.py --rate 40 --duration 20   # open loop (bench/open_loop.py)

`--rate R --duration S`: open loop instead: R mentions a second for S seconds, each in a channel
of its own and due at its time whatever the bot does (`bench.open_loop`); the overheads count
from when a mention was due.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.speed import reference_ms  # noqa: E402

# -- the bot (child process) --------------------------------------------------------------------


class SleepCore:
    """Stands in for the core: the model 'answers' after a fixed delay."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.seen: set[str] = set()

    async def handle_message(self, message: Any, sink: Any) -> None:
        await sink.working()
        await asyncio.sleep(self.latency)
        await sink.finish(f"ok: {message.text[:60]}")

    async def handle_command(self, request: Any) -> Any:
        from bot.core import CommandReply

        return CommandReply("ok")

    async def in_conversation(self, session: Any) -> bool:
        return False

    async def place_policy(self, team: Any, channel: str) -> Any:
        from bot.policy import DEFAULT_POLICY

        return DEFAULT_POLICY

    async def admit_bot(self, team: Any, channel: str, other_bot: str) -> bool:
        return False

    async def first_delivery(self, event_id: str) -> bool:
        if event_id in self.seen:
            return False
        self.seen.add(event_id)
        return True

    async def health(self) -> dict[str, bool]:
        return {"store": True, "cache": True}

    async def close(self) -> None:
        return None


async def run_bot(args: argparse.Namespace) -> None:
    from adapters.discord.config import DiscordConfig
    from adapters.discord.main import run_discord
    from bot.app import build_app
    from bot.config import Settings

    config = DiscordConfig(
        token=args.token,
        api_url=args.api,
        gateway_url=args.gateway,
        http_host="127.0.0.1",
        http_port=0,
        max_concurrent_turns=args.max_turns,
    )
    core: Any
    if args.core == "sleep":
        core = SleepCore(args.model_latency)
    else:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            openai_api_key="sk-bench",
            openai_base_url=args.openai,
            bot_data_dir=Path(args.data),
            bot_log_level="WARNING",
            # The bench measures the core's own cost: 1,000 mentions in seconds would exceed the
            # per-person/per-team turn rates (bot.ratelimit), which is what the limits are for.
            bot_rate_user="off",
            bot_rate_team="off",
            bot_team_queue=0,
        )
        core = await build_app(settings)
    try:
        await run_discord(core, config)
    finally:
        await core.close()


# -- the driver ---------------------------------------------------------------------------------


def _peak_rss_mb(pid: int) -> tuple[float, float]:
    fields: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("VmHWM:", "VmRSS:")):
                name, value = line.split(":")
                fields[name] = int(value.split()[0]) / 1024
    return fields.get("VmHWM", 0.0), fields.get("VmRSS", 0.0)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (load-independent cost)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def drive(args: argparse.Namespace) -> dict[str, Any]:
    from bench.open_loop import send_on_schedule
    from testkit.fakes.discord_api import FakeDiscord
    from testkit.fakes.openai_server import FakeOpenAI

    fake = await FakeDiscord().start()
    openai = FakeOpenAI(latency=args.model_latency).start_in_thread()
    # Closed loop: C channels, one conversation each; open loop: a channel per mention (so none
    # waits behind another in its channel), 50 to a guild.
    places = args.n if args.rate else args.concurrency
    per_guild = 50 if args.rate else 10
    guilds = [fake.add_guild(f"bench-{g}", channels=0) for g in range(max(1, places // per_guild))]
    channels = [fake.add_channel(guilds[i % len(guilds)], f"c{i}") for i in range(places)]
    people = [fake.add_user(f"user{i}") for i in range(min(places, args.concurrency))]
    data = tempfile.mkdtemp(prefix="bench-discord-")
    env = {**os.environ, "BOT_LOG_LEVEL": "WARNING"}
    log_path = Path(data) / "bot.log"  # its warnings, counted below (inbox_entry_lost)
    log_file = log_path.open("wb")
    child = await asyncio.create_subprocess_exec(
        *[
            sys.executable,
            __file__,
            "--role=bot",
            f"--core={args.core}",
            f"--api={fake.api_url}",
            f"--gateway={fake.gateway_url}",
            f"--openai={openai.base_url}",
            f"--token={fake.token}",
            f"--data={data}",
            f"--model-latency={args.model_latency}",
            f"--max-turns={args.max_turns}",
        ],
        env=env,
        cwd=data,
        stderr=log_file,
    )
    try:
        await fake.wait_for(lambda: fake.connected == 1 and fake.commands != {}, timeout=60)
        await asyncio.sleep(0.5)  # GUILD_CREATEs processed, client ready
        sent: dict[str, float] = {}  # question id -> dispatch time
        per_worker = [args.n // args.concurrency] * args.concurrency
        for i in range(args.n % args.concurrency):
            per_worker[i] += 1
        speed_before = reference_ms()
        cpu0 = time.process_time()
        bot_cpu0 = _cpu_seconds(child.pid)
        started = time.monotonic()

        async def conversation(i: int) -> None:
            channel, person = channels[i], people[i]
            for k in range(per_worker[i]):
                before = len(fake.bot_messages(channel))
                sent_at = time.monotonic()
                asked = await fake.user_says(
                    channel,
                    person,
                    f"<@{fake.app_id}> question {k} from {i}",
                    mentions=[fake.app_id],
                )
                sent[asked["id"]] = sent_at
                await fake.wait_for(
                    lambda before=before: len(fake.bot_messages(channel)) > before,  # type: ignore[misc]
                    timeout=args.timeout,
                )

        asked_ids: dict[int, str] = {}

        async def due(k: int) -> None:
            asked = await fake.user_says(
                channels[k],
                people[k % len(people)],
                f"<@{fake.app_id}> question {k}",
                mentions=[fake.app_id],
            )
            asked_ids[k] = asked["id"]

        if args.rate:
            due_at = await send_on_schedule(args.rate, args.n, due)
            sent.update((asked_ids[k], at) for k, at in enumerate(due_at))
            await fake.wait_for(
                lambda: all(fake.bot_messages(c) for c in channels), timeout=args.timeout
            )
        else:
            await asyncio.gather(*(conversation(i) for i in range(args.concurrency)))
        elapsed = time.monotonic() - started
        driver_cpu = time.process_time() - cpu0
        bot_cpu = _cpu_seconds(child.pid) - bot_cpu0
        await asyncio.sleep(0.5)  # late duplicates would show up now
        peak, rss = _peak_rss_mb(child.pid)
        speed_after = reference_ms()
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(child.wait(), timeout=60)
        except TimeoutError:
            child.kill()
        await fake.close()
        openai.stop()
        log_file.close()
    log_text = log_path.read_text(errors="replace")
    print(f"  bot log: {log_path}", file=sys.stderr)

    replies: dict[str, list[dict[str, Any]]] = {}
    for message in fake.messages.values():
        if message["author"]["id"] != fake.app_id or message.get("injected"):
            continue
        ref = str((message.get("message_reference") or {}).get("message_id"))
        replies.setdefault(ref, []).append(message)
    counts = [len(replies.get(q, [])) for q in sent]
    first_rest: list[float] = []
    overhead: list[float] = []
    typing = {c: [x.at for x in fake.calls_to("POST", rf"/channels/{c}/typing$")] for c in channels}
    posts = {
        c: [x.at for x in fake.calls_to("POST", rf"/channels/{c}/messages$")] for c in channels
    }
    by_channel: dict[str, list[float]] = {}
    for qid, at in sorted(sent.items(), key=lambda kv: kv[1]):
        by_channel.setdefault(fake.messages[qid]["channel_id"], []).append(at)
    for channel, times in by_channel.items():
        for n, at in enumerate(times):  # questions in a channel are answered one at a time
            if n < len(typing[channel]):
                first_rest.append(typing[channel][n] - at)
            if n < len(posts[channel]):
                overhead.append(posts[channel][n] - at - args.model_latency)
    result = {
        "rate": args.rate,
        "n": args.n,
        "concurrency": args.concurrency,
        "core": args.core,
        "model_latency_ms": args.model_latency * 1000,
        "seconds": round(elapsed, 2),
        "throughput_per_s": round(args.n / elapsed, 1),
        "first_rest_p50_ms": round(_pct(first_rest, 0.5) * 1000, 1),
        "first_rest_p99_ms": round(_pct(first_rest, 0.99) * 1000, 1),
        "reply_minus_model_p50_ms": round(_pct(overhead, 0.5) * 1000, 1),
        "reply_minus_model_p99_ms": round(_pct(overhead, 0.99) * 1000, 1),
        "bot_peak_rss_mb": round(peak, 1),
        "bot_rss_mb_end": round(rss, 1),
        "driver_cpu_s": round(driver_cpu, 2),
        "bot_cpu_ms_per_mention": round(bot_cpu / args.n * 1000, 2),
        "answered_exactly_once": sum(1 for c in counts if c == 1),
        "unanswered": sum(1 for c in counts if c == 0),
        "duplicates": sum(1 for c in counts if c > 1),
        "mean_reply_count": round(statistics.fmean(counts), 3) if counts else 0,
        "model_requests_per_mention": round(len(openai.requests) / args.n, 2),
        "speed_reference_ms": [round(speed_before, 1), round(speed_after, 1)],
        "inbox_entries_lost": log_text.count('"event": "inbox_entry_lost"'),
    }
    return result


def figures(result: dict[str, Any]) -> list[Any]:
    from bench.report import Figure, info

    once, n = result["answered_exactly_once"], result["n"]
    return [
        Figure("mentions answered exactly once", f"all {n:,}", f"{once:,}/{n:,}", "", once == n),
        info("throughput", result["throughput_per_s"], "mentions/s"),
        info("dispatch → first REST call p50", result["first_rest_p50_ms"], "ms"),
        info("dispatch → first REST call p99", result["first_rest_p99_ms"], "ms"),
        info("dispatch → reply − model p50", result["reply_minus_model_p50_ms"], "ms"),
        info("dispatch → reply − model p99", result["reply_minus_model_p99_ms"], "ms"),
        info("bot CPU per mention", result["bot_cpu_ms_per_mention"], "ms"),
        info("bot peak memory", result["bot_peak_rss_mb"], "MB"),
        info(
            "machine speed: bench.speed reference workload, after the run",
            result["speed_reference_ms"][1],
            "ms CPU",
        ),
        Figure(
            "inbox entries lost (taken over while still running)",
            "0",
            str(result["inbox_entries_lost"]),
            "",
            result["inbox_entries_lost"] == 0,
        ),
    ]


def _report(result: dict[str, Any]) -> None:
    how = (
        f"open loop at {result['rate']:g}/s"
        if result["rate"]
        else f"{result['concurrency']} conversations at once"
    )
    print(
        f"Discord adapter, {result['core']} core: {result['n']} mentions, "
        f"{how}, model {result['model_latency_ms']:.0f} ms"
    )
    print(f"  throughput          {result['throughput_per_s']} mentions/s ({result['seconds']} s)")
    print(
        f"  dispatch → 1st REST p50 {result['first_rest_p50_ms']} ms, "
        f"p99 {result['first_rest_p99_ms']} ms (typing indicator)"
    )
    print(
        f"  dispatch → reply − model p50 {result['reply_minus_model_p50_ms']} ms, "
        f"p99 {result['reply_minus_model_p99_ms']} ms"
    )
    peak, end = result["bot_peak_rss_mb"], result["bot_rss_mb_end"]
    print(f"  bot peak memory     {peak} MB (RSS at end {end} MB)")
    print(
        f"  bot CPU             {result['bot_cpu_ms_per_mention']} ms per mention, "
        f"{result['model_requests_per_mention']} model requests per mention"
    )
    before, after = result["speed_reference_ms"]
    print(
        f"  machine speed       reference workload {before} ms before the run, {after} ms after "
        "(bench/speed.py; CPU figures scale with it)"
    )
    print(
        f"  answered once       {result['answered_exactly_once']}/{result['n']} "
        f"(unanswered {result['unanswered']}, duplicated {result['duplicates']}, "
        f"inbox entries lost {result['inbox_entries_lost']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("-n", type=int, default=1000, help="mentions to send")
    parser.add_argument("-c", "--concurrency", type=int, default=50)
    parser.add_argument("--model-latency", type=float, default=0.2)
    parser.add_argument("--core", choices=("real", "sleep"), default="real")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--max-turns", type=int, default=256)
    parser.add_argument(
        "--rate", type=float, default=None, help="open loop: mentions per second (bench.open_loop)"
    )
    parser.add_argument(
        "--duration", type=float, default=20.0, help="open loop: seconds of arrivals at --rate"
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write JSON here")
    parser.add_argument(
        "--role", choices=("driver", "bot"), default="driver", help=argparse.SUPPRESS
    )
    for hidden in ("--api", "--gateway", "--openai", "--token", "--data"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "bot":
        asyncio.run(run_bot(args))
        return
    if args.rate is not None:
        if args.rate <= 0 or args.duration <= 0:
            parser.error("--rate and --duration must be positive")
        from bench.open_loop import count_for

        args.n = count_for(args.rate, args.duration)
    from bench.report import print_figures, write_json

    result = asyncio.run(drive(args))
    _report(result)
    found = figures(result)
    print_figures(f"discord ({args.core} core)", found)
    write_json(args.json, "discord", found, result)
    if result["answered_exactly_once"] != args.n:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
