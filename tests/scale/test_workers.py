"""`bot slack --workers 2`: two worker processes share the port and the inbox (the embedded
store's under one BOT_DATA_DIR; and the Redis Streams one with MongoDB). Every mention is
answered exactly once with each thread's replies in the order of its messages; a worker killed
with -9 while it holds turns loses none (the other worker, or its restarted self, takes its
entries over); SIGTERM drains both and exits 0.

Oracles: the replies at the fake Slack (one per message, naming it, in order per thread) and the
supervisor's own log lines (which worker pids it started).
"""

from __future__ import annotations

import os
import signal
from typing import Any

import aiohttp
import pytest

from tests.scale.cluster import BotProcess, Cluster, Sent
from tests.scale.conftest import MakeCluster
from tests.scale.model import ScaleBrain, answer_for

THREADS = 6
FOLLOW_UPS = 3
CLAIM_SECONDS = 3.0


def _fresh_connections(cluster: Cluster) -> None:
    """One TCP connection per request, as many Slack senders are: the kernel spreads them over
    the workers sharing the port (a kept-alive connection would stay with one worker)."""
    connector = aiohttp.TCPConnector(force_close=True)
    cluster.http = aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=30), connector=connector
    )


def _workers(bot: BotProcess) -> dict[str, int]:
    """Worker slot -> pid of its latest start, from the supervisor's log lines."""
    found: dict[str, int] = {}
    for line in bot.log_lines():
        if line.get("event") == "worker_started":
            found[str(line["worker"])] = int(line["pid"])
    return found


def _events(bot: BotProcess, name: str) -> list[dict[str, Any]]:
    return [line for line in bot.log_lines() if line.get("event") == name]


def _serving(bot: BotProcess) -> set[str]:
    return {str(line.get("worker")) for line in _events(bot, "slack_serving")}


async def _threads(cluster: Cluster, bot: BotProcess) -> list[list[Sent]]:
    threads: list[list[Sent]] = []
    for t in range(THREADS):
        first = await cluster.mention(bot, "hello", channel=f"CW{t}")
        threads.append([first])
    for _ in range(FOLLOW_UPS):
        for t, sents in enumerate(threads):
            assert sents[0].reply_thread is not None
            sents.append(
                await cluster.thread_message(
                    bot, "and then?", channel=f"CW{t}", thread_ts=sents[0].reply_thread
                )
            )
    return threads


def _assert_once_in_order(cluster: Cluster, threads: list[list[Sent]]) -> None:
    for sents in threads:
        first = sents[0]
        replies = cluster.messages_in(first.channel, first.reply_thread)
        assert [m.text for m in replies] == [answer_for(s.marker) for s in sents], first.channel
        assert not any(m.stream_open for m in replies)


@pytest.mark.parametrize("backend", ["embedded", "shared"])
async def test_two_workers_answer_every_message_once_in_thread_order(
    make_cluster: MakeCluster, backend: str
) -> None:
    """`embedded`: SQLite under one data dir; `shared`: MongoDB + the Redis Streams inbox."""
    brain = ScaleBrain(answer_delay=0.05)
    cluster = await make_cluster(backend, brain=brain)
    await cluster.http.close()
    _fresh_connections(cluster)
    [bot] = await cluster.start("pair", args=("--workers", "2"))
    await cluster.wait_until(lambda: _serving(bot) == {"1", "2"}, 60, "two workers serving")
    threads = await _threads(cluster, bot)
    every = [s for sents in threads for s in sents]
    await cluster.wait_answered(every, timeout=90)
    await cluster.wait_handled({s.event_id: 1 for s in every}, timeout=30)
    _assert_once_in_order(cluster, threads)

    bot.terminate()
    assert await bot.wait_exit(60) == 0
    assert [line["exit_code"] for line in _events(bot, "workers_stopped")] == [0]


async def test_a_worker_killed_with_9_loses_nothing(make_cluster: MakeCluster) -> None:
    brain = ScaleBrain()
    env = {"BOT_INBOX_CLAIM_SECONDS": str(CLAIM_SECONDS)}
    cluster = await make_cluster("embedded", brain=brain, env=env)
    await cluster.http.close()
    _fresh_connections(cluster)
    [bot] = await cluster.start("pair", args=("--workers", "2"))
    await cluster.wait_until(lambda: _serving(bot) == {"1", "2"}, 60, "two workers serving")
    brain.park()
    threads = await _threads(cluster, bot)
    every = [s for sents in threads for s in sents]
    # Every thread's first turn is at the model (parked) when a worker dies.
    await cluster.wait_until(
        lambda: len(cluster.model.requests) >= THREADS, 60, "the first turns in flight"
    )
    victim = _workers(bot)["1"]
    os.kill(victim, signal.SIGKILL)
    await cluster.wait_until(
        lambda: _workers(bot)["1"] != victim, 30, "the supervisor restarted worker 1"
    )
    brain.release()
    await cluster.wait_answered(every, timeout=CLAIM_SECONDS + 90)
    await cluster.wait_handled({s.event_id: 1 for s in every}, timeout=30)
    _assert_once_in_order(cluster, threads)
    exits = [line for line in _events(bot, "worker_exited") if line.get("pid") == victim]
    assert [line["code"] for line in exits] == [-signal.SIGKILL]
    # The dead worker held turns: they were taken over (tries > 1), not lost.
    assert _events(bot, "inbox_claimed"), "no entry of the killed worker was taken over"

    bot.terminate()
    assert await bot.wait_exit(60) == 0
