"""Slack adapter benchmark: N signed mentions at POST /slack/events, C at a time, over R replicas.

Separate processes, so the bot's figures are not distorted by the load generator:
- fakes: FakeSlack (the Web API) and FakeOpenAI answering after a fixed model latency;
- bots: `--replicas R` real `bot slack` processes (the venv's console script, HTTP mode, each on
  its own port). One replica runs on the embedded store (SQLite, in-process cache); more share
  MongoDB (mongoeco, started here) and the Redis on 127.0.0.1 (REDIS_URL) under a prefix of
  their own (`--store` picks either for any R). `--core sleep` instead runs one process with the
  adapter on a stub core that only sleeps for the model latency;
- driver (this process): signs and sends the events (event i to replica i mod R, its Slack retry
  to the next replica), measures the acks, then reads the calls FakeSlack recorded.
  CLOCK_MONOTONIC is system-wide on Linux, so times compare across processes.

Prints throughput, ack p50/p99, the bot's own overhead (event -> first Web API call, and event ->
first reply call minus the model latency, p50/p99), bot CPU per answered mention (the bot
processes' own user+system time from /proc, summed, over the measured run), peak memory, and
checks that every event was answered exactly once (a share is re-sent as Slack retries).
`--json PATH` writes the figures as {"bench": "slack", "figures": [{figure, target, measured,
unit, met}]} (`met` null where the issue sets no target).

    python bench/bench_slack.py                     # N=1000, 50 concurrent, model 200 ms, 1 bot
    python bench/bench_slack.py --replicas 3 --json /tmp/slack3.json
    python bench/bench_slack.py -n 200 --core sleep
    python bench/bench_slack.py --rate 40 --duration 20   # open loop (bench/open_loop.py)

`--rate R --duration S`: open loop instead: R mentions a second for S seconds, each due at its
time whatever the bot does (`bench.open_loop`), latencies counted from when it was due, no
retries. `--bot-command "bot slack ..."` starts each bot process with that command.

BENCH_PROFILE=<script>: each bot process runs as `python <script> <bot console script> slack`
(a profiler wrapper that runs the script it is given).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adapters.slack.config import SlackConfig as SlackConfigDefaults  # noqa: E402
from bench.open_loop import count_for, send_on_schedule  # noqa: E402
from bench.speed import reference_ms  # noqa: E402
from bot.inbox import InboxWorker, ServesInbox  # noqa: E402

SECRET = "bench-signing-secret"
TEAM = "TBENCH"
BOT = Path(sys.executable).with_name("bot")  # the venv's console script
# The bot's own variables never leak in from the environment the bench runs in.
_OWN = ("OPENAI_", "BOT_", "MONGODB", "REDIS", "SLACK_", "DISCORD_", "OTEL_")
# A turn has ended at the fake Slack: the answer was posted (or its stream closed), and the
# working reaction, if one was added, was taken off again.
_REPLY_CALLS = ("chat.postMessage", "chat.startStream")
_DONE_CALLS = ("chat.postMessage", "chat.stopStream")
# Targets from issue 12 (bot CPU, overhead) and the adapter's ack budget.
ACK_P99_MS = 50.0
OVERHEAD_P50_MS = 50.0
CPU_PER_MENTION_MS = 6.0
NO_TARGET = "—"  # a figure the issues ask for without setting a target (`met` is null)


# -- roles that run in child processes ---------------------------------------------------------


async def run_fakes(model_latency: float) -> None:
    from testkit.fakes.openai_server import FakeOpenAI
    from testkit.fakes.slack_api import FakeSlack

    slack = await FakeSlack(team_id=TEAM).start()
    openai = await FakeOpenAI(latency=model_latency).start()
    print(f"READY {slack.api_url} {openai.base_url} {slack.bot_token}", flush=True)
    await _until_terminated()
    await openai.close()
    await slack.close()


class SleepCore(ServesInbox):
    """Stands in for the core: the model 'answers' after a fixed delay, streamed in two parts."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.seen: set[str] = set()
        self.worker = InboxWorker(None, first_delivery=self.first_delivery)  # no durable inbox

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
        return {"core": True}

    async def close(self) -> None:
        return None


async def run_bot(args: argparse.Namespace) -> None:
    """`--core sleep`: the adapter's HTTP app on `SleepCore` (the real core runs as `bot slack`)."""
    import logging

    from aiohttp import web

    from adapters.slack import SlackConfig, create_http_app

    logging.basicConfig(level=logging.WARNING)
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


class Replica:
    """One `bot slack` process of the bench (its output goes to a file, shown if it dies)."""

    def __init__(
        self,
        index: int,
        env: dict[str, str],
        workdir: Path,
        command: list[str] | None = None,
        workers: int = 1,
    ) -> None:
        self.port = _free_port()
        self.workers = workers
        self.log = workdir / f"bot{index}.log"
        extra = ["--workers", str(workers)] if workers > 1 else []
        prefix = (
            [sys.executable, os.environ["BENCH_PROFILE"]] if os.environ.get("BENCH_PROFILE") else []
        )
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*prefix, *(command or [str(BOT), "slack"]), *extra],
                cwd=workdir,
                env={**env, "BOT_HTTP_PORT": str(self.port)},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pids(self) -> list[int]:
        """The process, and with --workers its workers (their CPU is the bot's too)."""
        return [self.pid, *_children_of(self.pid)]

    def entries_lost(self) -> int:
        """`inbox_entry_lost` lines in its log (every worker's; a warning, so logged here)."""
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace").count('"event": "inbox_entry_lost"')
        return 0

    async def wait_ready(self, http: aiohttp.ClientSession, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise SystemExit(f"bot replica on port {self.port} did not start:\n{tail}")
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"{self.url}/healthz") as resp:
                    if resp.status == 200 and _listening(self.port) >= self.workers:
                        return
            await asyncio.sleep(0.2)


def _children_of(pid: int) -> list[int]:
    """Pids whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def _listening(port: int) -> int:
    """Sockets listening on `port` (each worker sharing it with SO_REUSEPORT has its own)."""
    count = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


def _bot_env(api_url: str, openai_url: str, token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN)}
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "OPENAI_API_KEY": "sk-bench",
            "OPENAI_BASE_URL": openai_url,
            "SLACK_BOT_TOKEN": token,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": api_url,
            "BOT_HTTP_HOST": "127.0.0.1",
            "BOT_LOG_LEVEL": "WARNING",
            # The bench measures the bot's own cost: 1,000 mentions in seconds would exceed a
            # team's turn rate (bot.ratelimit), which is what the limits are for.
            "BOT_RATE_USER": "off",
            "BOT_RATE_TEAM": "off",
            "BOT_TEAM_QUEUE": "0",
        }
    )
    return env


def _children(name: str) -> list[int]:
    """Pids of this process's children whose command line names `name` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == os.getpid() and name in (entry / "cmdline").read_bytes().decode():
                found.append(int(entry.name))
    return found


@contextlib.contextmanager
def _shared_stores(env: dict[str, str], store: str, mongodb_uri: str | None) -> Iterator[list[int]]:
    """A Redis prefix of this run (removed afterwards) and, for `shared`, MongoDB: `mongodb_uri`,
    else a fresh mongoeco server, whose pid is yielded so its CPU can be shown."""
    import uuid

    import redis

    from testkit.mongoeco import mongoeco_server

    redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    prefix = f"bench:{uuid.uuid4().hex[:10]}:"
    client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise SystemExit(f"the shared store needs Redis at {redis_url}: {exc}") from None
    with contextlib.ExitStack() as stack:
        pids: list[int] = []
        env.update({"REDIS_URL": redis_url, "BOT_REDIS_PREFIX": prefix})
        if store == "shared":
            if mongodb_uri is None:
                mongodb_uri = stack.enter_context(mongoeco_server())
                pids = _children("mongoeco_server")
            env.update({"MONGODB_URI": mongodb_uri, "MONGODB_DB": f"bench_{uuid.uuid4().hex[:8]}"})
        try:
            yield pids
        finally:
            keys = list(client.scan_iter(match=prefix + "*", count=1000))
            for i in range(0, len(keys), 500):
                client.delete(*keys[i : i + 500])
            client.close()


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


async def _ack_buckets(http: aiohttp.ClientSession, urls: list[str]) -> dict[float, float]:
    """The bots' own ack-latency histograms (cumulative counts by upper bound) from /metrics,
    summed over the replicas."""
    buckets: dict[float, float] = {}
    for url in urls:
        async with http.get(url) as resp:
            text = await resp.text()
        for line in text.splitlines():
            if line.startswith("bot_ack_latency_seconds_bucket{"):
                labels, value = line.rsplit(" ", 1)
                bound = float(labels.split('le="', 1)[1].split('"', 1)[0])
                buckets[bound] = buckets.get(bound, 0.0) + float(value)
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


def _channel(prefix: str, i: int) -> str:
    """Mention i of a run ("W" warm-up, "B" measured) is the only one in its channel."""
    return f"C{prefix}{i:05d}"


def _question(prefix: str, i: int) -> str:
    """The mention's words: the model request carrying them is matched to its channel."""
    return f"question number {prefix}{i}"


QUESTION = re.compile(r"question number ([A-Z])(\d+)")


def _event(i: int, prefix: str) -> tuple[str, str, dict[str, Any]]:
    channel, ts = _channel(prefix, i), f"{int(time.time())}.{i:06d}"
    event = {
        "type": "app_mention",
        "user": "U1",
        "text": f"<@UBOT> {_question(prefix, i)}",
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
    """One signed post. A pooled connection the bot closed while idle (its idle timeout) is
    retried once on a new one, as Slack's sender would; the ack time counts from the first try."""
    sent = time.monotonic()
    for attempt in (1, 2):
        try:
            async with http.post(url, data=signed[0], headers=signed[1]) as resp:
                await resp.read()
                return sent, time.monotonic() - sent, resp.status
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _settings(pairs: list[str]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"--bot-env wants NAME=VALUE, not {pair!r}")
        found[name] = value
    return found


def _bot_command(args: argparse.Namespace) -> list[str]:
    """`--bot-command` split like a shell would; its `bot` is the venv's console script."""
    import shlex

    words = shlex.split(args.bot_command or "bot slack")
    return [str(BOT) if words[0] == "bot" else words[0], *words[1:]]


def _store(args: argparse.Namespace) -> str:
    if args.store != "auto":
        return str(args.store)
    return "shared" if args.replicas > 1 else "embedded"


async def drive(args: argparse.Namespace) -> dict[str, Any]:
    if args.core == "sleep" and (args.replicas != 1 or args.workers != 1):
        raise SystemExit("--core sleep runs one process: use --replicas 1 --workers 1")
    if args.core == "real" and not BOT.exists():
        raise SystemExit(f"no `bot` console script beside {sys.executable}: run the venv's python")
    fakes, (api_url, openai_url, bot_token) = _spawn(
        "--role", "fakes", "--model-latency", str(args.model_latency)
    )
    workdir = Path(tempfile.mkdtemp(prefix="bench-slack-"))
    stack = contextlib.ExitStack()
    bots: list[subprocess.Popen[Any]] = []
    replicas: list[Replica] = []
    store_pids: list[int] = []
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            if args.core == "sleep":
                port = _free_port()
                proc, _ = _spawn(
                    "--role", "bot", "--api-url", api_url, "--bot-token", bot_token,
                    "--port", str(port), "--model-latency", str(args.model_latency),
                    "--max-turns", str(args.max_turns),
                )  # fmt: skip
                bots.append(proc)
                urls = [f"http://127.0.0.1:{port}"]
            else:
                env = _bot_env(api_url, openai_url, bot_token)
                env["BOT_DATA_DIR"] = str(workdir / "data")
                env.update(_settings(args.bot_env))
                if _store(args) != "embedded":
                    store_pids = stack.enter_context(
                        _shared_stores(env, _store(args), args.mongodb_uri)
                    )
                command = _bot_command(args)
                replicas = [
                    Replica(i, env, workdir, command, args.workers) for i in range(args.replicas)
                ]
                bots.extend(r.proc for r in replicas)
                await asyncio.gather(*(r.wait_ready(http) for r in replicas))
                urls = [r.url for r in replicas]
            pids = [p for r in replicas for p in r.pids] if replicas else [b.pid for b in bots]
            result = await _measure(
                args, http, urls, pids, (api_url, openai_url), fakes.pid, store_pids
            )
            result["entries_lost"] = sum(r.entries_lost() for r in replicas)
            return result
    finally:
        for proc in (*bots, fakes):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        for proc in (*bots, fakes):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        stack.close()
        shutil.rmtree(workdir, ignore_errors=True)


async def _measure(
    args: argparse.Namespace,
    http: aiohttp.ClientSession,
    urls: list[str],
    bot_pids: list[int],
    fake_urls: tuple[str, str],
    fakes_pid: int,
    store_pids: list[int],
) -> dict[str, Any]:
    api_url, openai_url = fake_urls
    events_urls = [f"{u}/slack/events" for u in urls]
    fake_calls_url = api_url.removesuffix("api/") + "_fake/calls"
    wait_url = api_url.removesuffix("api/") + "_fake/wait"
    gate = asyncio.Semaphore(args.concurrency)

    async def send(target: int, signed: Signed) -> tuple[float, float, int]:
        async with gate:
            return await _send(http, events_urls[target % len(events_urls)], signed)

    # warm-up (not measured): first auth, connection pools, stores, on every replica
    seen: list[dict[str, Any]] = []
    warm = [_event(i, "W") for i in range(20 * len(urls))]
    await asyncio.gather(*(send(i, _sign(b, None)) for i, (_, _, b) in enumerate(warm)))
    await _wait_done(http, fake_calls_url, {c for c, _, _ in warm}, 60, seen)
    rss_before = max(_peak_rss_mb(pid)[0] for pid in bot_pids)

    events = [_event(i, "B") for i in range(args.n)]
    rng = random.Random(7)
    share = 0.0 if args.rate else args.retries  # the open loop sends each mention once
    retried = set(rng.sample(range(args.n), int(args.n * share)))
    # event i goes to replica i mod R; its Slack retry to the next one (another process)
    signed = [
        (c, i, _sign(b, None), _sign(b, 1) if i in retried else None)
        for i, (c, _, b) in enumerate(events)
    ]
    sent_at: dict[str, float] = {}
    acks: list[float] = []
    statuses: list[int] = []
    retries_in_flight: list[asyncio.Task[None]] = []

    async def post(channel: str, target: int, request: Signed) -> None:
        sent, ack, status = await send(target, request)
        sent_at[channel] = min(sent, sent_at.get(channel, sent))
        acks.append(ack)
        statuses.append(status)

    async def conversation(queue: list[tuple[str, int, Signed, Signed | None]]) -> None:
        """One person at a time: mention, wait for the answer, mention again."""
        while queue:
            channel, i, request, retry = queue.pop()
            await post(channel, i, request)
            if retry is not None:  # Slack re-delivers while the turn runs
                retries_in_flight.append(asyncio.create_task(post(channel, i + 1, retry)))
            params = {"method": ",".join(_DONE_CALLS), "channel": channel, "timeout": "60"}
            async with http.get(wait_url, params=params) as resp:
                await resp.read()

    async def burst() -> None:
        """Requests only: a new mention as soon as an ack comes back (stress test)."""
        jobs = [(c, i, r) for c, i, r, _ in signed] + [(c, i + 1, r) for c, i, _, r in signed if r]
        rng.shuffle(jobs)
        await asyncio.gather(*(post(c, i, r) for c, i, r in jobs))

    metrics_urls = [f"{u}/metrics" for u in urls]
    speed_before = reference_ms()
    buckets_before = await _ack_buckets(http, metrics_urls)
    cpu_before = (
        [_cpu_seconds(p) for p in bot_pids],
        _cpu_seconds(fakes_pid),
        time.process_time(),
        sum(_cpu_seconds(p) for p in store_pids),
    )
    started = time.monotonic()
    trace: list[tuple[float, float]] = []  # (time, the bots' CPU seconds) every CPU_SAMPLE s
    sampler = asyncio.create_task(_trace_cpu(bot_pids, trace))
    if args.rate:

        async def due(k: int) -> None:
            _, i, request, _ = signed[k]
            _, ack, status = await _send(http, events_urls[i % len(events_urls)], request)
            acks.append(ack)
            statuses.append(status)

        due_at = await send_on_schedule(args.rate, len(signed), due)
        sent_at.update((c, at) for (c, _, _, _), at in zip(signed, due_at, strict=True))
    elif args.mode == "burst":
        await burst()
    else:
        queue = list(reversed(signed))
        await asyncio.gather(*(conversation(queue) for _ in range(args.concurrency)))
        await asyncio.gather(*retries_in_flight)
    channels = {c for c, _, _ in events}
    calls = await _wait_done(http, fake_calls_url, channels, args.timeout, seen)
    sampler.cancel()
    last_call = max((c["at"] for c in calls if c["channel"] in channels), default=time.monotonic())
    # The CPU at the last reply, not when the driver saw it: the indexing the turns queued
    # starts the moment the last turn ends (bot.memory.episodic.indexer) and belongs to the
    # next figure.
    bot_cpu = _cpu_at(trace, last_call) - sum(cpu_before[0])
    settled_cpu = await _settled_cpu(bot_pids, cpu_before[0])
    fakes_cpu = _cpu_seconds(fakes_pid) - cpu_before[1]
    driver_cpu = time.process_time() - cpu_before[2]
    store_cpu = sum(_cpu_seconds(p) for p in store_pids) - cpu_before[3]
    buckets_after = await _ack_buckets(http, metrics_urls)
    speed_after = reference_ms()
    peak = max(_peak_rss_mb(pid)[1] for pid in bot_pids)

    async with http.get(openai_url.removesuffix("/v1") + "/_fake/chats") as resp:
        chats = await resp.json()
    result = _tally(args, events, sent_at, calls, _asked_at(chats), started)
    result.update(
        retried=len(retried),
        speed=(speed_before, speed_after),
        processes=len(bot_pids),
        acks=acks,
        non_200=sum(s != 200 for s in statuses),
        rss_before=rss_before,
        peak=peak,
        bot_cpu=bot_cpu,
        settled_cpu=settled_cpu,
        fakes_cpu=fakes_cpu,
        driver_cpu=driver_cpu,
        store_cpu=store_cpu if store_pids else None,
        web_api_calls=len(calls),
        server_p50=_bucket_quantile(buckets_before, buckets_after, 0.5) * 1000,
        server_p99=_bucket_quantile(buckets_before, buckets_after, 0.99) * 1000,
    )
    return result


CPU_SAMPLE = 0.02  # seconds between samples of the bots' CPU during a run


async def _trace_cpu(pids: list[int], trace: list[tuple[float, float]]) -> None:
    while True:
        trace.append((time.monotonic(), sum(_cpu_seconds(p) for p in pids)))
        await asyncio.sleep(CPU_SAMPLE)


def _cpu_at(trace: list[tuple[float, float]], at: float) -> float:
    """The bots' CPU seconds at the first sample taken at `at` or later (the last one if none)."""
    return next((cpu for t, cpu in trace if t >= at), trace[-1][1] if trace else float("nan"))


async def _settled_cpu(pids: list[int], before: list[float], *, limit: float = 180.0) -> float:
    """The bots' CPU since `before` once they are idle again: the work the turns left for the
    background (the episodic indexer embedding each turn's entry, summaries) counted too. Idle:
    under 10 ms of CPU over a second, twice in a row."""
    deadline = time.monotonic() + limit
    last, quiet = sum(_cpu_seconds(p) for p in pids), 0
    while quiet < 2 and time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = sum(_cpu_seconds(p) for p in pids)
        quiet = quiet + 1 if now - last < 0.010 * len(pids) else 0
        last = now
    return last - sum(before)


def _finished(calls: list[dict[str, Any]]) -> set[str]:
    """Channels whose turn has ended: the answer is out and any working reaction removed."""
    reacted = {c["channel"] for c in calls if c["method"] == "reactions.add"}
    removed = {c["channel"] for c in calls if c["method"] == "reactions.remove"}
    answered = {c["channel"] for c in calls if c["method"] in _DONE_CALLS}
    return {c for c in answered if c not in reacted or c in removed}


async def _wait_done(
    http: aiohttp.ClientSession,
    url: str,
    channels: set[str],
    timeout: float,
    seen: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Poll FakeSlack (new calls only) until every channel's turn has ended."""

    async def fetch() -> None:
        async with http.get(url, params={"since": str(len(seen))}) as resp:
            seen.extend(await resp.json())

    deadline = time.monotonic() + timeout
    while True:
        await asyncio.sleep(0.5)
        await fetch()
        if channels <= _finished(seen) or time.monotonic() > deadline:
            await asyncio.sleep(0.5)  # let any (wrong) duplicate answers arrive too
            await fetch()
            return seen


def _asked_at(chats: list[dict[str, Any]]) -> dict[str, float]:
    """Channel -> when its mention's first model request reached FakeOpenAI."""
    asked: dict[str, float] = {}
    for chat in chats:
        found = QUESTION.search(str(chat.get("user") or ""))
        if found:
            channel = _channel(found.group(1), int(found.group(2)))
            asked.setdefault(channel, float(chat["at"]))
    return asked


def _tally(
    args: argparse.Namespace,
    events: list[tuple[str, str, dict[str, Any]]],
    sent_at: dict[str, float],
    calls: list[dict[str, Any]],
    asked_at: dict[str, float],
    started: float,
) -> dict[str, Any]:
    """Per answered mention: event -> first Web API call, event -> reply minus the model, and
    that wait split at the model request (as FakeOpenAI saw it arrive): before it (ack, inbox,
    store reads and the user message's write) and after the model's answer (the reply's write
    and post)."""
    by_channel: dict[str, list[dict[str, Any]]] = {}
    for call in calls:
        if call["channel"] in sent_at:
            by_channel.setdefault(call["channel"], []).append(call)
    first_call: list[float] = []
    first_reply: list[float] = []
    before_model: list[float] = []
    after_model: list[float] = []
    finished: list[float] = []
    lost = duplicated = 0
    for channel, sent in sent_at.items():
        mine = sorted(by_channel.get(channel, []), key=lambda c: c["at"])
        replies = [c for c in mine if c["method"] in _REPLY_CALLS]
        if not replies:
            lost += 1
            continue
        if len(replies) > 1:
            duplicated += 1
        first_call.append(mine[0]["at"] - sent)
        first_reply.append(replies[0]["at"] - sent - args.model_latency)
        if channel in asked_at:
            before_model.append(asked_at[channel] - sent)
            after_model.append(replies[0]["at"] - asked_at[channel] - args.model_latency)
        finished.append(mine[-1]["at"])
    elapsed = (max(finished) if finished else time.monotonic()) - started
    return {
        "events": len(events),
        "elapsed": elapsed,
        "first_call": first_call,
        "first_reply": first_reply,
        "before_model": before_model,
        "after_model": after_model,
        "lost": lost,
        "duplicated": duplicated,
    }


def _figures(args: argparse.Namespace, r: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures of one run, in the shape every bench writes (`python -m bench` reads it)."""
    ms = 1000.0
    where = (
        (
            "sleep core"
            if args.core == "sleep"
            else f"{args.replicas} replica{'s' if args.replicas != 1 else ''}"
            + (f" of {args.workers} workers" if args.workers > 1 else "")
            + f", {_store(args)} store"
        )
        + "".join(f", {pair}" for pair in args.bot_env)
        + (f", open loop {args.rate:g}/s" if args.rate else "")
    )
    answered = r["events"] - r["lost"] - r["duplicated"]
    cpu_per = r["bot_cpu"] / answered * ms if answered else float("nan")
    settled_per = r["settled_cpu"] / answered * ms if answered else float("nan")
    ack_p99 = _pct(r["acks"], 0.99) * ms
    overhead_p50 = _pct(r["first_reply"], 0.5) * ms

    def figure(
        name: str, target: str, measured: float, unit: str, met: bool | None
    ) -> dict[str, Any]:
        if measured != measured:  # NaN (nothing measured) is not JSON; a target is then unmet
            measured_value, met = None, (None if met is None else False)
        else:
            measured_value = round(measured, 3)
        return {
            "figure": f"{name} ({where})",
            "target": target,
            "measured": measured_value,
            "unit": unit,
            "met": met,
        }

    figures = [
        figure("throughput", NO_TARGET, r["events"] / r["elapsed"], "events/s", None),
        figure("ack p50, driver-observed", NO_TARGET, _pct(r["acks"], 0.5) * ms, "ms", None),
        figure(
            "ack p99, driver-observed", f"< {ACK_P99_MS:g} ms", ack_p99, "ms", ack_p99 < ACK_P99_MS
        ),
        figure(
            "event to first Web API call p50",
            NO_TARGET,
            _pct(r["first_call"], 0.5) * ms,
            "ms",
            None,
        ),
        figure(
            "event to reply minus model p50",
            f"< {OVERHEAD_P50_MS:g} ms",
            overhead_p50,
            "ms",
            overhead_p50 < OVERHEAD_P50_MS,
        ),
        figure(
            "event to reply minus model p99",
            NO_TARGET,
            _pct(r["first_reply"], 0.99) * ms,
            "ms",
            None,
        ),
        figure(
            "of which event to model request p50",
            NO_TARGET,
            _pct(r["before_model"], 0.5) * ms,
            "ms",
            None,
        ),
        figure(
            "of which model answer to reply p50",
            NO_TARGET,
            _pct(r["after_model"], 0.5) * ms,
            "ms",
            None,
        ),
        figure(
            "bot CPU per answered mention, until the last reply",
            NO_TARGET,
            cpu_per,
            "ms",
            None,
        ),
        figure(
            "bot CPU per answered mention, its background work included",
            f"≤ {CPU_PER_MENTION_MS:g} ms",
            settled_per,
            "ms",
            settled_per <= CPU_PER_MENTION_MS,
        ),
        figure(
            "answered exactly once",
            f"all {r['events']:,}",
            answered,
            "mentions",
            r["lost"] == 0 and r["duplicated"] == 0,
        ),
        figure(
            "inbox entries lost (taken over while still running)",
            "0",
            r.get("entries_lost", 0),
            "entries",
            r.get("entries_lost", 0) == 0,
        ),
        figure("bot peak RSS, largest process", NO_TARGET, r["peak"], "MiB", None),
        figure(
            "machine speed: bench.speed reference workload, after the run",
            NO_TARGET,
            r["speed"][1],
            "ms CPU",
            None,
        ),
    ]
    if r["store_cpu"] is not None and answered:
        # Not the bot's: shown so a slow shared figure can be read for what it is.
        per = r["store_cpu"] / answered * ms
        figures.append(figure("mongoeco CPU per answered mention", NO_TARGET, per, "ms", None))
    return figures


def _report(args: argparse.Namespace, r: dict[str, Any]) -> None:
    ms = 1000.0
    where = (
        "core=sleep"
        if args.core == "sleep"
        else f"core=real, replicas={args.replicas}, workers={args.workers} ({_store(args)} store)"
    ) + "".join(f", {pair}" for pair in args.bot_env)
    answered = r["events"] - r["lost"] - r["duplicated"]
    print(
        f"Slack adapter bench: mode={f'open loop {args.rate:g}/s' if args.rate else args.mode}, "
        f"{where}, "
        f"N={r['events']} mentions (+{r['retried']} retries"
        f"{', each to another replica' if args.replicas > 1 else ''}), "
        f"{args.concurrency} concurrent, model {args.model_latency * ms:.0f} ms"
    )
    print(
        f"  throughput            {r['events'] / r['elapsed']:8.1f} events/s ({r['elapsed']:.2f} s)"
    )
    acks = r["acks"]
    print(
        f"  ack (driver-observed) p50 {_pct(acks, 0.5) * ms:6.1f} ms"
        f"   p99 {_pct(acks, 0.99) * ms:6.1f} ms"
        f"   max {max(acks) * ms:6.1f} ms   non-200: {r['non_200']}"
    )
    print(
        f"  ack inside the bot    p50 <= {r['server_p50']:g} ms   p99 <= {r['server_p99']:g} ms "
        "(bot_ack_latency_seconds histogram buckets)"
    )
    print(
        f"  event->first API call p50 {_pct(r['first_call'], 0.5) * ms:6.1f} ms   "
        f"p99 {_pct(r['first_call'], 0.99) * ms:6.1f} ms"
    )
    mean = statistics.fmean(r["first_reply"]) * ms if r["first_reply"] else float("nan")
    print(
        f"  event->reply - model  p50 {_pct(r['first_reply'], 0.5) * ms:6.1f} ms   "
        f"p99 {_pct(r['first_reply'], 0.99) * ms:6.1f} ms   (mean {mean:.1f} ms; target p50 "
        f"< {OVERHEAD_P50_MS:g} ms)"
    )
    if r["before_model"]:
        print(
            "    of which            event->model request p50 "
            f"{_pct(r['before_model'], 0.5) * ms:.1f} ms, model answer->reply p50 "
            f"{_pct(r['after_model'], 0.5) * ms:.1f} ms "
            "(FakeOpenAI's arrival times)"
        )
    per = r["bot_cpu"] / answered * ms if answered else float("nan")
    settled = r["settled_cpu"] / answered * ms if answered else float("nan")
    print(
        f"  bot CPU               {per:6.2f} ms per answered mention until the last reply "
        f"({r['bot_cpu']:.2f} s over {r['processes']} process{'es' if r['processes'] != 1 else ''})"
    )
    print(
        f"                        {settled:6.2f} ms with the background work the turns left "
        f"(memory indexing; target ≤ {CPU_PER_MENTION_MS:g} ms; {r['settled_cpu']:.2f} s)"
    )
    print(
        f"  machine speed         reference workload {r['speed'][0]:.1f} ms before the run, "
        f"{r['speed'][1]:.1f} ms after (bench/speed.py; CPU figures scale with it)"
    )
    mongo = "" if r["store_cpu"] is None else f", mongoeco {r['store_cpu']:.2f} s"
    print(
        f"  CPU of the others     fakes {r['fakes_cpu']:.2f} s, driver {r['driver_cpu']:.2f} s"
        f"{mongo} on {os.cpu_count()} CPUs ({r['web_api_calls']} Web API calls recorded)"
    )
    if r["store_cpu"] is not None and r["store_cpu"] > r["bot_cpu"]:
        print(
            "  note                  mongoeco used more CPU than the bots: these figures measure "
            "it (try --store sqlite+redis, or --mongodb-uri for a real MongoDB)"
        )
    print(
        f"  bot memory            RSS after warm-up {r['rss_before']:.1f} MiB, peak "
        f"{r['peak']:.1f} MiB (largest process)"
    )
    print(
        f"  answered once         {answered}/{r['events']}   "
        f"lost {r['lost']}   answered twice {r['duplicated']}   "
        f"inbox entries lost {r.get('entries_lost', 0)} (taken over while still running)"
    )
    ok = r["lost"] == 0 and r["duplicated"] == 0 and _pct(acks, 0.99) * ms < ACK_P99_MS
    print(f"  target (ack p99 < 50 ms, none lost or doubled): {'MET' if ok else 'NOT MET'}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("-n", type=int, default=1000, help="mentions to send")
    parser.add_argument("-c", "--concurrency", type=int, default=50)
    parser.add_argument("--model-latency", type=float, default=0.2)
    parser.add_argument("--core", choices=("real", "sleep"), default="real")
    parser.add_argument("--replicas", type=int, default=1, help="bot slack processes")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="each replica is `bot slack --workers N` (N processes sharing its port)",
    )
    parser.add_argument(
        "--store",
        choices=("auto", "embedded", "shared", "sqlite+redis"),
        default="auto",
        help="auto: embedded (SQLite, in-process cache) for one replica, else shared\n"
        "(MongoDB: mongoeco unless --mongodb-uri, + Redis); sqlite+redis: the replicas\n"
        "share one SQLite data dir and Redis (no mongoeco: mongoeco, a Python server,\n"
        "costs far more CPU per turn than the bot itself and caps the shared figures)",
    )
    parser.add_argument(
        "--mode",
        choices=("turns", "burst"),
        default="turns",
        help="turns: C conversations, each waits for its answer before the next mention;\n"
        "burst: C requests in flight, a new mention as soon as an ack returns",
    )
    parser.add_argument("--retries", type=float, default=0.1, help="share re-sent as retries")
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--max-turns", type=int, default=SlackConfigDefaults.max_concurrent_turns)
    parser.add_argument(
        "--mongodb-uri", default=None, help="shared store: this MongoDB instead of mongoeco"
    )
    parser.add_argument(
        "--bot-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for every bot process (repeatable), e.g. BOT_INBOX=off for an A/B",
    )
    parser.add_argument(
        "--rate", type=float, default=None, help="open loop: mentions per second (bench.open_loop)"
    )
    parser.add_argument(
        "--duration", type=float, default=20.0, help="open loop: seconds of arrivals at --rate"
    )
    parser.add_argument(
        "--bot-command", default=None, help='how each bot process starts (default "bot slack")'
    )
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
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
        if args.replicas < 1 or args.workers < 1:
            parser.error("--replicas and --workers must be at least 1")
        if args.rate is not None:
            if args.rate <= 0 or args.duration <= 0:
                parser.error("--rate and --duration must be positive")
            args.n = count_for(args.rate, args.duration)
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        result = asyncio.run(drive(args))
        _report(args, result)
        if args.json is not None:
            doc = {"bench": "slack", "figures": _figures(args, result)}
            args.json.write_text(json.dumps(doc, indent=2) + "\n")
            print(f"  figures written to {args.json}")


if __name__ == "__main__":
    main()
