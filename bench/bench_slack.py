"""Slack adapter benchmark: N signed mentions at POST /slack/events, C at a time.

Three processes, so the bot's figures are not distorted by the load generator:
- fakes: FakeSlack (the Web API) and FakeOpenAI answering after a fixed model latency;
- bot: the Slack adapter's HTTP app on the real core (SQLite, in-process cache) or, with
  `--core sleep`, on a stub core that only sleeps for the model latency;
- driver (this process): signs and sends the events, measures the acks, then reads the calls
  FakeSlack recorded. CLOCK_MONOTONIC is system-wide on Linux, so times compare across processes.

Prints throughput, ack p50/p99, the bot's own overhead (event -> first Web API call, and
event -> first reply call minus the model latency), peak memory of the bot process, and checks
that every event was answered exactly once (a share of the events is re-sent as Slack retries).

    python bench/bench_slack.py                     # N=1000, 50 concurrent, model 200 ms
    python bench/bench_slack.py -n 200 --core sleep
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adapters.slack.config import SlackConfig as SlackConfigDefaults  # noqa: E402

SECRET = "bench-signing-secret"
TEAM = "TBENCH"


# -- roles that run in child processes ---------------------------------------------------------


async def run_fakes(model_latency: float) -> None:
    from tests.fakes.openai_server import FakeOpenAI
    from tests.fakes.slack_api import FakeSlack

    slack = await FakeSlack(team_id=TEAM).start()
    openai = await FakeOpenAI(latency=model_latency).start()
    print(f"READY {slack.api_url} {openai.base_url} {slack.bot_token}", flush=True)
    await _until_terminated()
    await openai.close()
    await slack.close()


class SleepCore:
    """Stands in for the core: the model 'answers' after a fixed delay, streamed in two parts."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.seen: set[str] = set()

    async def handle_message(self, message: Any, sink: Any) -> None:
        await sink.working()
        await asyncio.sleep(self.latency)
        answer = f"ok: {message.text[:60]}"
        await sink.delta(answer[:5])
        await sink.delta(answer[5:])
        await sink.finish(answer)

    async def handle_command(self, request: Any) -> Any:
        from bot.core import CommandReply

        return CommandReply("ok")

    async def first_delivery(self, event_id: str) -> bool:
        if event_id in self.seen:
            return False
        self.seen.add(event_id)
        return True

    async def health(self) -> dict[str, bool]:
        return {"core": True}

    async def close(self) -> None:
        return None


async def run_bot(args: argparse.Namespace) -> None:
    import logging

    from aiohttp import web

    from adapters.slack import SlackConfig, create_http_app

    logging.basicConfig(level=logging.WARNING)
    core: Any
    if args.core == "real":
        from pydantic import SecretStr

        from bot.app import build_app
        from bot.config import Settings

        data_dir = tempfile.mkdtemp(prefix="bench-slack-")
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            openai_api_key=SecretStr("sk-bench"),
            openai_base_url=args.openai_url,
            bot_data_dir=Path(data_dir),
            bot_log_level="WARNING",
            # The bench measures the core's own cost: 1,000 mentions in seconds would exceed a
            # team's turn rate (bot.ratelimit), which is what the limits are for.
            bot_rate_user="off",
            bot_rate_team="off",
            bot_team_queue=0,
        )
        core = await build_app(settings)
    else:
        core = SleepCore(args.model_latency)
    config = SlackConfig(
        signing_secret=SECRET,
        bot_token=args.bot_token,
        api_url=args.api_url,
        http_host="127.0.0.1",
        http_port=args.port,
        max_concurrent_turns=args.max_turns,
    )
    runner = web.AppRunner(create_http_app(core, config), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port).start()
    print("READY", flush=True)
    await _until_terminated()
    await runner.cleanup()
    await core.close()


async def _until_terminated() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


# -- the driver ------------------------------------------------------------------------------


def _spawn(*role_args: str) -> tuple[subprocess.Popen[str], list[str]]:
    prefix = (
        [os.environ["BENCH_PROFILE"]]
        if os.environ.get("BENCH_PROFILE") and "bot" in role_args
        else []
    )
    proc = subprocess.Popen(
        [sys.executable, *prefix, __file__, *role_args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if not line or line[0] != "READY":
        proc.kill()
        raise SystemExit(f"child {role_args[:2]} failed to start")
    return proc, line[1:]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _peak_rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) of a process in MiB, from /proc (Linux)."""
    values: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", float("nan")), values.get("VmHWM", float("nan"))


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _ack_buckets(http: aiohttp.ClientSession, url: str) -> dict[float, float]:
    """The bot's own ack-latency histogram (cumulative counts by upper bound) from /metrics."""
    async with http.get(url) as resp:
        text = await resp.text()
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("bot_ack_latency_seconds_bucket{"):
            labels, value = line.rsplit(" ", 1)
            bound = labels.split('le="', 1)[1].split('"', 1)[0]
            buckets[float(bound)] = float(value)
    return buckets


def _bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """Upper bound of the bucket holding quantile q of the observations between two scrapes."""
    diff = {b: after.get(b, 0.0) - before.get(b, 0.0) for b in after}
    total = diff.get(float("inf"), 0.0)
    for bound in sorted(diff):
        if total and diff[bound] >= q * total:
            return bound
    return float("nan")


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _event(i: int, prefix: str) -> tuple[str, str, dict[str, Any]]:
    channel, ts = f"C{prefix}{i:05d}", f"{int(time.time())}.{i:06d}"
    event = {
        "type": "app_mention",
        "user": "U1",
        "text": f"<@UBOT> question number {i}",
        "ts": ts,
        "channel": channel,
    }
    body = {
        "token": "x",
        "team_id": TEAM,
        "api_app_id": "ABENCH",
        "event": event,
        "type": "event_callback",
        "event_id": f"Ev{prefix}{i:07d}",
        "event_time": int(time.time()),
    }
    return channel, ts, body


Signed = tuple[bytes, dict[str, str]]


def _sign(body: dict[str, Any], retry: int | None) -> Signed:
    """Sign ahead of time so the driver's own CPU stays out of the measured window."""
    from slack_sdk.signature import SignatureVerifier

    raw = json.dumps(body)
    stamp = str(int(time.time()))
    signature = SignatureVerifier(SECRET).generate_signature(timestamp=stamp, body=raw)
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": str(signature),
    }
    if retry is not None:
        headers["X-Slack-Retry-Num"] = str(retry)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    return raw.encode(), headers


async def _send(http: aiohttp.ClientSession, url: str, signed: Signed) -> tuple[float, float, int]:
    sent = time.monotonic()
    async with http.post(url, data=signed[0], headers=signed[1]) as resp:
        await resp.read()
        return sent, time.monotonic() - sent, resp.status


async def drive(args: argparse.Namespace) -> None:
    fakes, (api_url, openai_url, bot_token) = _spawn(
        "--role", "fakes", "--model-latency", str(args.model_latency)
    )
    port = _free_port()
    bot, _ = _spawn(
        "--role",
        "bot",
        "--core",
        args.core,
        "--api-url",
        api_url,
        "--openai-url",
        openai_url,
        "--bot-token",
        bot_token,
        "--port",
        str(port),
        "--model-latency",
        str(args.model_latency),
        "--max-turns",
        str(args.max_turns),
    )
    events_url = f"http://127.0.0.1:{port}/slack/events"
    fake_calls_url = api_url.removesuffix("api/") + "_fake/calls"
    try:
        conn = aiohttp.TCPConnector(limit=args.concurrency)
        async with aiohttp.ClientSession(connector=conn) as http:
            # warm-up (not measured): first auth, connection pools, SQLite
            seen: list[dict[str, Any]] = []
            warm = [_event(i, "W") for i in range(20)]
            await asyncio.gather(*(_send(http, events_url, _sign(b, None)) for _, _, b in warm))
            await _wait_done(http, fake_calls_url, {c for c, _, _ in warm}, 30, seen)
            rss_before, _ = _peak_rss_mb(bot.pid)

            events = [_event(i, "B") for i in range(args.n)]
            rng = random.Random(7)
            retried = set(rng.sample(range(args.n), int(args.n * args.retries)))
            signed = [
                (c, _sign(b, None), _sign(b, 1) if i in retried else None)
                for i, (c, _, b) in enumerate(events)
            ]
            sent_at: dict[str, float] = {}
            acks: list[float] = []
            statuses: list[int] = []
            wait_url = api_url.removesuffix("api/") + "_fake/wait"
            retries_in_flight: list[asyncio.Task[None]] = []

            async def post(channel: str, request: Signed) -> None:
                sent, ack, status = await _send(http, events_url, request)
                sent_at[channel] = min(sent, sent_at.get(channel, sent))
                acks.append(ack)
                statuses.append(status)

            async def conversation(queue: list[tuple[str, Signed, Signed | None]]) -> None:
                """One person at a time: mention, wait for the whole answer, mention again."""
                while queue:
                    channel, request, retry = queue.pop()
                    await post(channel, request)
                    if retry is not None:  # Slack re-delivers while the turn runs
                        retries_in_flight.append(asyncio.create_task(post(channel, retry)))
                    # A quick answer is one chat.postMessage (no working reaction): its end.
                    params = {"method": "chat.postMessage", "channel": channel, "timeout": "60"}
                    async with http.get(wait_url, params=params) as resp:
                        await resp.read()

            async def burst() -> None:
                """Requests only: a new mention as soon as an ack comes back (stress test)."""
                jobs = [(c, r) for c, r, _ in signed] + [(c, r) for c, _, r in signed if r]
                rng.shuffle(jobs)
                gate = asyncio.Semaphore(args.concurrency)

                async def one(channel: str, request: Signed) -> None:
                    async with gate:
                        await post(channel, request)

                await asyncio.gather(*(one(c, r) for c, r in jobs))

            metrics_url = f"http://127.0.0.1:{port}/metrics"
            buckets_before = await _ack_buckets(http, metrics_url)
            cpu = (_cpu_seconds(bot.pid), _cpu_seconds(fakes.pid), time.process_time())
            started = time.monotonic()
            if args.mode == "burst":
                await burst()
            else:
                queue = list(reversed(signed))
                await asyncio.gather(*(conversation(queue) for _ in range(args.concurrency)))
                await asyncio.gather(*retries_in_flight)
            channels = {c for c, _, _ in events}
            calls = await _wait_done(http, fake_calls_url, channels, args.timeout, seen)
            cpu = (
                _cpu_seconds(bot.pid) - cpu[0],
                _cpu_seconds(fakes.pid) - cpu[1],
                time.process_time() - cpu[2],
            )
            buckets_after = await _ack_buckets(http, metrics_url)
            _, peak = _peak_rss_mb(bot.pid)
        _report(args, events, retried, sent_at, acks, statuses, calls, started, rss_before, peak)
        server_p50 = _bucket_quantile(buckets_before, buckets_after, 0.5) * 1000
        server_p99 = _bucket_quantile(buckets_before, buckets_after, 0.99) * 1000
        print(
            f"  ack inside the bot    p50 <= {server_p50:g} ms   p99 <= {server_p99:g} ms "
            "(bot_ack_latency_seconds histogram buckets)"
        )
        print(
            f"  CPU during the run    bot {cpu[0]:.2f} s, fakes {cpu[1]:.2f} s, "
            f"driver {cpu[2]:.2f} s on {os.cpu_count()} CPUs ({len(calls)} Web API calls recorded)"
        )
    finally:
        for proc in (bot, fakes):
            proc.send_signal(signal.SIGTERM)
        for proc in (bot, fakes):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


# The call that ends a turn: a quick answer's one post (no working reaction under a second),
# or a streamed answer's stop. (A slower answer's reaction removal follows right after it.)
_FINAL_METHODS = ("chat.postMessage", "chat.stopStream")


async def _wait_done(
    http: aiohttp.ClientSession,
    url: str,
    channels: set[str],
    timeout: float,
    seen: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Poll FakeSlack (new calls only) until every channel's turn posted its final reply."""

    async def fetch() -> None:
        async with http.get(url, params={"since": str(len(seen))}) as resp:
            seen.extend(await resp.json())

    deadline = time.monotonic() + timeout
    while True:
        await asyncio.sleep(0.5)
        await fetch()
        done = {c["channel"] for c in seen if c["method"] in _FINAL_METHODS}
        if channels <= done or time.monotonic() > deadline:
            await asyncio.sleep(0.5)  # let any (wrong) duplicate answers arrive too
            await fetch()
            return seen


def _report(
    args: argparse.Namespace,
    events: list[tuple[str, str, dict[str, Any]]],
    retried: set[int],
    sent_at: dict[str, float],
    acks: list[float],
    statuses: list[int],
    calls: list[dict[str, Any]],
    started: float,
    rss_before: float,
    peak: float,
) -> None:
    by_channel: dict[str, list[dict[str, Any]]] = {}
    for call in calls:
        if call["channel"] in sent_at:
            by_channel.setdefault(call["channel"], []).append(call)
    first_call: list[float] = []
    first_reply: list[float] = []
    finished: list[float] = []
    lost = duplicated = 0
    for channel, sent in sent_at.items():
        mine = sorted(by_channel.get(channel, []), key=lambda c: c["at"])
        replies = [c for c in mine if c["method"] in ("chat.postMessage", "chat.startStream")]
        if not replies:
            lost += 1
            continue
        if len(replies) > 1:
            duplicated += 1
        first_call.append(mine[0]["at"] - sent)
        first_reply.append(replies[0]["at"] - sent - args.model_latency)
        finished.extend(c["at"] for c in mine if c["method"] in _FINAL_METHODS)
    elapsed = (max(finished) if finished else time.monotonic()) - started
    ms = 1000.0
    print(
        f"Slack adapter bench: mode={args.mode}, core={args.core}, "
        f"N={args.n} mentions (+{len(retried)} retries), "
        f"{args.concurrency} concurrent, model {args.model_latency * ms:.0f} ms"
    )
    print(f"  throughput            {len(events) / elapsed:8.1f} events/s ({elapsed:.2f} s)")
    print(
        f"  ack (driver-observed) p50 {_pct(acks, 0.5) * ms:6.1f} ms"
        f"   p99 {_pct(acks, 0.99) * ms:6.1f} ms"
        f"   max {max(acks) * ms:6.1f} ms   non-200: {sum(s != 200 for s in statuses)}"
    )
    print(
        f"  event->first API call p50 {_pct(first_call, 0.5) * ms:6.1f} ms   "
        f"p99 {_pct(first_call, 0.99) * ms:6.1f} ms"
    )
    print(
        f"  event->reply - model  p50 {_pct(first_reply, 0.5) * ms:6.1f} ms   "
        f"p99 {_pct(first_reply, 0.99) * ms:6.1f} ms   "
        f"(mean {statistics.fmean(first_reply) * ms if first_reply else float('nan'):.1f} ms)"
    )
    print(f"  bot memory            RSS after warm-up {rss_before:.1f} MiB, peak {peak:.1f} MiB")
    print(
        f"  answered once         {len(events) - lost - duplicated}/{len(events)}   "
        f"lost {lost}   answered twice {duplicated}"
    )
    ok = lost == 0 and duplicated == 0 and _pct(acks, 0.99) < 0.050
    print(f"  target (ack p99 < 50 ms, none lost or doubled): {'MET' if ok else 'NOT MET'}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("-n", type=int, default=1000, help="mentions to send")
    parser.add_argument("-c", "--concurrency", type=int, default=50)
    parser.add_argument("--model-latency", type=float, default=0.2)
    parser.add_argument("--core", choices=("real", "sleep"), default="real")
    parser.add_argument(
        "--mode",
        choices=("turns", "burst"),
        default="turns",
        help="turns: C conversations, each waits for its answer before the next mention;\n"
        "burst: C requests in flight, a new mention as soon as an ack returns",
    )
    parser.add_argument("--retries", type=float, default=0.1, help="share re-sent as retries")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--max-turns", type=int, default=SlackConfigDefaults.max_concurrent_turns)
    parser.add_argument("--role", choices=("driver", "fakes", "bot"), default="driver")
    parser.add_argument("--api-url")
    parser.add_argument("--openai-url")
    parser.add_argument("--bot-token")
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.role == "fakes":
        asyncio.run(run_fakes(args.model_latency))
    elif args.role == "bot":
        asyncio.run(run_bot(args))
    else:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        asyncio.run(drive(args))


if __name__ == "__main__":
    main()
