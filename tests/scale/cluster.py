"""Several real `bot slack` processes against the local fakes, driven like Slack drives them.

Why: the durable inbox (issue 12) is only proven by real processes that share real stores and
die for real (SIGKILL, SIGTERM). This harness knows nothing of how the inbox works: it sends
signed Events API requests to the process it is told to, reads the replies the bot wrote at the
fake Slack Web API, the requests it sent to the fake model and the figures on its /metrics.

- `Cluster(backend="shared")`: each process on MongoDB (mongoeco) + the Redis on 127.0.0.1:6379
  under one BOT_REDIS_PREFIX; `backend="embedded"`: SQLite under one BOT_DATA_DIR, no Redis (a
  process can be killed and started again on the same data dir).
- `FakeSlack`, `FakeOpenAI` (with `ScaleBrain`) and any other service run in the test's own
  event loop; each bot process has its own OPENAI_API_KEY, so the model's requests tell which
  process sent them.
- Waits are on positive signals (a reply arrived, a counter on /metrics reached a value); a wait
  that times out raises AssertionError saying what was awaited.
- Each process's stderr goes to a file; `logs()` gives the tails (the conftest attaches them to a
  failed test's report); `close()` kills every process still running.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp

from testkit.fakes.openai_server import FakeOpenAI
from testkit.fakes.slack_api import FakeSlack, Message
from testkit.slack_harness import SECRET, event_body, signed_headers
from tests.scale.model import markers_in

BOT = Path(sys.executable).with_name("bot")  # the venv's console script
START_TIMEOUT = 60.0
_RUN = itertools.count(1)
_TS = itertools.count(1)
# The bot's own variables never leak in from the developer's environment.
_OWN = ("OPENAI_", "BOT_", "MONGODB", "REDIS", "SLACK_", "DISCORD_", "OTEL_")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def new_ts() -> str:
    """A Slack message ts, unique within the test run and increasing."""
    return f"{int(time.time())}.{next(_TS):06d}"


Metrics = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> Metrics:
    """Prometheus text format -> {(name, labels): value} (enough for counters and gauges)."""
    found: Metrics = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels: set[tuple[str, str]] = set()
        for part in rest.rstrip("}").split('",') if rest else []:
            key, _, raw = part.partition("=")
            labels.add((key.strip(), raw.strip().strip('"')))
        try:
            found[(name.strip(), frozenset(labels))] = float(value)
        except ValueError:
            continue
    return found


def metric_value(metrics: Metrics, name: str, **labels: str) -> float | None:
    """Sum of the series of `name` whose labels include `labels`; None when there is none."""
    values = [
        v
        for (n, ls), v in metrics.items()
        if n == name and all((k, val) in ls for k, val in labels.items())
    ]
    return sum(values) if values else None


@dataclass(frozen=True)
class Sent:
    """One message delivered to the bot; `marker` is in its text (the model echoes it)."""

    channel: str
    ts: str
    reply_thread: str | None  # where its answer goes (None: top level of a DM)
    marker: str
    body: dict[str, Any]  # the event_callback, re-delivered as is

    @property
    def event_id(self) -> str:
        return str(self.body["event_id"])


@dataclass
class BotProcess:
    """One `bot slack` process (HTTP mode). Started again after a kill under the same name."""

    name: str
    env: dict[str, str]
    workdir: Path
    port: int = 0
    args: tuple[str, ...] = ()  # after `bot slack`, e.g. ("--workers", "2")
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    log_paths: list[Path] = field(default_factory=list)
    _read: dict[Path, int] = field(default_factory=dict)
    _lines: list[dict[str, Any]] = field(default_factory=list)

    @property
    def api_key(self) -> str:
        return self.env["OPENAI_API_KEY"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self) -> None:
        self.port = free_port()
        self.starts += 1
        log = self.workdir / f"{self.name}.{self.starts}.log"
        self.log_paths.append(log)
        env = {**self.env, "BOT_HTTP_PORT": str(self.port)}
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(BOT), "slack", *self.args],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    async def wait_ready(self, http: aiohttp.ClientSession) -> None:
        """Until /healthz answers 200 (the process serves events from then on)."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if not self.alive:
                raise AssertionError(f"{self.name} exited at start:\n{self.log_tail()}")
            try:
                async with http.get(f"{self.url}/healthz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not healthy in time:\n{self.log_tail()}")
            await asyncio.sleep(0.1)

    def kill(self) -> None:
        """kill -9, and reap it."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    async def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} still running after {timeout} s")
            await asyncio.sleep(0.05)
        return int(self.proc.returncode)

    def log_tail(self, lines: int = 60) -> str:
        parts: list[str] = []
        for path in self.log_paths:
            try:
                text = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            parts.append(f"--- {path.name} (last {lines} lines)")
            parts.extend(text[-lines:])
        return "\n".join(parts)

    def log_lines(self) -> list[dict[str, Any]]:
        """The process's JSON log lines (all its starts), parsed; read on from where the last
        call stopped."""
        for path in self.log_paths:
            done = self._read.get(path, 0)
            try:
                with path.open("rb") as f:
                    f.seek(done)
                    chunk = f.read()
            except OSError:
                continue
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits
            self._read[path] = done + len(complete)
            for raw in complete.decode(errors="replace").splitlines():
                if raw.startswith("{"):
                    try:
                        self._lines.append(json.loads(raw))
                    except ValueError:
                        pass
        return self._lines

    def handled(self) -> list[tuple[str, str]]:
        """(event_id, outcome) of every `slack_event_handled` line: the adapter's own word that
        it is done with a delivery (README, Tests)."""
        return [
            (str(line.get("event_id")), str(line.get("outcome")))
            for line in self.log_lines()
            if line.get("event") == "slack_event_handled"
        ]

    def logged_turns(self) -> int:
        """Turns this process finished, from its `turn` log lines (a process that has exited
        has no /metrics to read)."""
        return sum(1 for line in self.log_lines() if line.get("event") == "turn")

    def stop_now(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.kill()
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


@dataclass
class Cluster:
    """The processes of one test and the fakes they talk to (see the module docstring)."""

    workdir: Path
    slack: FakeSlack
    model: FakeOpenAI
    backend: str = "shared"  # "shared": MongoDB + Redis; "embedded": SQLite, no Redis
    mongo_uri: str | None = None
    redis_url: str | None = None
    redis_prefix: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    bots: dict[str, BotProcess] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.run = f"{next(_RUN)}{uuid.uuid4().hex[:4]}"
        self._sent = 0
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self.data_dir = self.workdir / "data"
        self.mongo_db = f"scale_{uuid.uuid4().hex[:10]}"

    # -- processes ---------------------------------------------------------------------------

    def _env(self, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN)}
        env.update(
            {
                "PYTHONUNBUFFERED": "1",
                "OPENAI_API_KEY": f"sk-{name}",
                "OPENAI_BASE_URL": self.model.base_url,
                "BOT_MODEL": "gpt-4o-mini",
                "BOT_MODEL_RETRIES": "0",
                "BOT_EMBEDDING_MODEL": "none",
                "BOT_RATE_USER": "off",
                "BOT_RATE_TEAM": "off",
                "BOT_TEAM_QUEUE": "0",
                "BOT_LOG_LEVEL": "INFO",
                "BOT_DATA_DIR": str(self.data_dir),
                "BOT_HTTP_HOST": "127.0.0.1",
                "SLACK_BOT_TOKEN": self.slack.bot_token,
                "SLACK_SIGNING_SECRET": SECRET,
                "SLACK_API_URL": self.slack.api_url,
            }
        )
        if self.backend == "shared":
            assert self.mongo_uri and self.redis_url and self.redis_prefix
            env.update(
                {
                    "MONGODB_URI": self.mongo_uri,
                    "MONGODB_DB": self.mongo_db,
                    "REDIS_URL": self.redis_url,
                    "BOT_REDIS_PREFIX": self.redis_prefix,
                }
            )
        env.update(self.extra_env)
        return env

    async def start(self, *names: str, args: tuple[str, ...] = ()) -> list[BotProcess]:
        """Start processes (in parallel) and wait until each answers /healthz."""
        started = []
        for name in names:
            bot = self.bots.get(name)
            if bot is None:
                bot = self.bots[name] = BotProcess(name, self._env(name), self.workdir, args=args)
            assert not bot.alive, f"{name} is running"
            bot.spawn()
            started.append(bot)
        await asyncio.gather(*(b.wait_ready(self.http) for b in started))
        return started

    async def restart(self, name: str) -> BotProcess:
        [bot] = await self.start(name)
        return bot

    async def close(self) -> None:
        for bot in self.bots.values():
            bot.stop_now()
        await self.http.close()

    def logs(self) -> str:
        return "\n".join(b.log_tail() for b in self.bots.values())

    # -- sending -----------------------------------------------------------------------------

    def marker(self) -> str:
        """A fresh marker `q-<run>-<n>` to put in a message's text."""
        self._sent += 1
        return f"q-{self.run}-{self._sent}"

    def next_marker(self) -> str:
        """The marker the next message sent will carry (to script the model for it first)."""
        return f"q-{self.run}-{self._sent + 1}"

    async def post(
        self, bot: BotProcess, body: dict[str, Any], *, retry_num: int | None = None
    ) -> int:
        raw = json.dumps(body)
        headers = {"Content-Type": "application/json", **signed_headers(raw)}
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = "http_timeout"
        async with self.http.post(
            f"{bot.url}/slack/events", data=raw.encode(), headers=headers
        ) as resp:
            await resp.read()
            return resp.status

    async def _deliver(self, bot: BotProcess, body: dict[str, Any]) -> None:
        user = str(body["event"].get("user") or "")
        if user and user not in self.slack.users:  # people exist at Slack (users.info)
            self.slack.add_user(user, f"Person {user}")
        status = await self.post(bot, body)
        assert status == 200, f"{bot.name} answered {status} to {body['event']['type']}"

    async def mention(
        self,
        bot: BotProcess,
        words: str = "what do you think?",
        *,
        channel: str = "C1",
        thread_ts: str | None = None,
        user: str = "U1",
    ) -> Sent:
        """A channel message mentioning the bot: `app_mention` and `message` both, as Slack."""
        marker, ts = self.marker(), new_ts()
        base: dict[str, Any] = {
            "user": user,
            "text": f"<@{self.slack.bot_user_id}> {marker} {words}",
            "ts": ts,
            "channel": channel,
        }
        if thread_ts:
            base["thread_ts"] = thread_ts
        body = event_body({"type": "app_mention", **base}, team=self.slack.team_id)
        await self._deliver(bot, body)
        copy = event_body(
            {"type": "message", "channel_type": "channel", **base}, team=body["team_id"]
        )
        await self._deliver(bot, copy)
        return Sent(channel, ts, thread_ts or ts, marker, body)

    async def thread_message(
        self,
        bot: BotProcess,
        words: str,
        *,
        channel: str,
        thread_ts: str,
        user: str = "U1",
    ) -> Sent:
        """A follow-up in a channel thread, without a mention."""
        marker, ts = self.marker(), new_ts()
        event = {
            "type": "message",
            "channel_type": "channel",
            "user": user,
            "text": f"{marker} {words}",
            "ts": ts,
            "channel": channel,
            "thread_ts": thread_ts,
        }
        body = event_body(event, team=self.slack.team_id)
        await self._deliver(bot, body)
        return Sent(channel, ts, thread_ts, marker, body)

    async def dm(self, bot: BotProcess, words: str, *, channel: str, user: str = "U1") -> Sent:
        """A top-level direct message (answered at the top level of the DM)."""
        marker, ts = self.marker(), new_ts()
        event = {
            "type": "message",
            "channel_type": "im",
            "user": user,
            "text": f"{marker} {words}",
            "ts": ts,
            "channel": channel,
        }
        body = event_body(event, team=self.slack.team_id)
        await self._deliver(bot, body)
        return Sent(channel, ts, None, marker, body)

    async def redeliver(self, bot: BotProcess, sent: Sent, retry_num: int = 1) -> None:
        """Slack's retry of an event: the same body and event_id, X-Slack-Retry-Num set."""
        status = await self.post(bot, sent.body, retry_num=retry_num)
        assert status == 200, f"{bot.name} answered {status} to a re-delivery"

    async def command(self, bot: BotProcess, command: str, text: str, *, user: str) -> str:
        """A slash command; returns the ephemeral answer (inline ack or via response_url)."""
        form = {
            "token": "legacy",
            "team_id": self.slack.team_id,
            "team_domain": "test",
            "channel_id": "C1",
            "channel_name": "general",
            "user_id": user,
            "user_name": "someone",
            "command": command,
            "text": text,
            "api_app_id": "A0TEST",
            "response_url": self.slack.response_url(),
            "trigger_id": "1.2.3",
        }
        raw = urlencode(form)
        headers = {"Content-Type": "application/x-www-form-urlencoded", **signed_headers(raw)}
        async with self.http.post(
            f"{bot.url}/slack/events", data=raw.encode(), headers=headers
        ) as resp:
            assert resp.status == 200, await resp.text()
            inline = await resp.text()
        if inline.strip():
            return str(json.loads(inline).get("text") or "")
        url = form["response_url"]
        await self.wait_until(
            lambda: any(r.get("_url") == url for r in self.slack.responses), 30, "command answer"
        )
        return next(str(r.get("text")) for r in self.slack.responses if r.get("_url") == url)

    # -- reading -----------------------------------------------------------------------------

    def messages_in(self, channel: str, thread: str | None) -> list[Message]:
        """The bot's messages in a thread (or, thread None, the top level of a channel)."""
        return [m for m in self.slack.bot_messages(channel) if (m.thread_ts or None) == thread]

    def answers(self, sent: Sent) -> list[Message]:
        """The bot's messages where `sent` is answered that name its marker."""
        return [
            m
            for m in self.messages_in(sent.channel, sent.reply_thread)
            if sent.marker in markers_in(m.text)
        ]

    def answered(self, sent: Sent) -> bool:
        return any(not m.stream_open for m in self.answers(sent))

    def unanswered(self, sents: Iterable[Sent]) -> list[Sent]:
        return [s for s in sents if not self.answered(s)]

    async def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str) -> float:
        """Until `predicate()` holds (checked whenever the fake Slack saw a call, at least every
        50 ms); returns the seconds it took. AssertionError naming `what` on timeout."""
        started = time.monotonic()
        try:
            await self.slack.wait_for(predicate, timeout)
        except TimeoutError:
            raise AssertionError(f"timed out after {timeout} s waiting for: {what}") from None
        return time.monotonic() - started

    async def wait_answered(self, sents: list[Sent], timeout: float) -> float:
        def done() -> bool:
            return not self.unanswered(sents)

        try:
            return await self.wait_until(done, timeout, "answers")
        except AssertionError:
            missing = self.unanswered(sents)
            raise AssertionError(
                f"{len(missing)} of {len(sents)} messages unanswered after {timeout} s, e.g. "
                f"{[s.marker for s in missing[:5]]}"
            ) from None

    async def metrics(self, bot: BotProcess) -> Metrics:
        async with self.http.get(f"{bot.url}/metrics") as resp:
            assert resp.status == 200
            return parse_metrics(await resp.text())

    async def metric_total(self, bots: Iterable[BotProcess], name: str, **labels: str) -> float:
        """Sum of a metric over processes (missing series count 0)."""
        total = 0.0
        for bot in bots:
            total += metric_value(await self.metrics(bot), name, **labels) or 0.0
        return total

    async def wait_metrics(
        self,
        check: Callable[[], Awaitable[bool]],
        timeout: float,
        what: str,
    ) -> None:
        """Until an async check of /metrics holds (scraped every 100 ms)."""
        deadline = time.monotonic() + timeout
        while not await check():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for: {what}")
            await asyncio.sleep(0.1)

    def handled(self) -> dict[str, list[str]]:
        """Outcomes of `slack_event_handled` lines by event id, over every process and start."""
        found: dict[str, list[str]] = {}
        for bot in self.bots.values():
            for event_id, outcome in bot.handled():
                found.setdefault(event_id, []).append(outcome)
        return found

    async def wait_handled(self, deliveries: dict[str, int], timeout: float) -> None:
        """Until each event id has been handled (by any process) at least as many times as it
        was delivered: after that, nothing more comes of those deliveries."""

        def short() -> list[str]:
            seen = self.handled()
            return [e for e, n in deliveries.items() if len(seen.get(e, [])) < n]

        deadline = time.monotonic() + timeout
        while missing := short():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(missing)} of {len(deliveries)} events without a slack_event_handled "
                    f"line for each delivery after {timeout} s, e.g. {missing[:5]}"
                )
            await asyncio.sleep(0.1)

    async def wait_idle(self, bots: list[BotProcess], *, turns: int, timeout: float) -> None:
        """Positive signal that handling is over: the processes' finished turns add up to at
        least `turns`, nothing waits to start, and any inbox they report is empty."""

        async def idle() -> bool:
            done = waiting = depth = 0.0
            for bot in bots:
                m = await self.metrics(bot)
                done += metric_value(m, "bot_turns_total") or 0.0
                waiting += metric_value(m, "bot_turns_waiting") or 0.0
                depth += metric_value(m, "bot_inbox_depth") or 0.0
            return done >= turns and waiting == 0 and depth == 0

        await self.wait_metrics(idle, timeout, f"{turns} turns finished and nothing queued")
