"""Three `bot slack` replicas on MongoDB + Redis: every event answered exactly once, although each
one is delivered twice, the re-delivery (same event_id, X-Slack-Retry-Num) to another replica.

Oracle: the replies at the fake Slack, counted per source message (each reply names the marker
of the message it answers), after the replicas' own counters say every turn finished and every
re-delivery was dropped as a duplicate.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.scale.cluster import Cluster, Sent
from tests.scale.conftest import MakeCluster
from tests.scale.model import ScaleBrain, answer_for

pytestmark = [pytest.mark.mongo, pytest.mark.redis]

MENTIONS = 60
DMS = 40  # in 20 DM channels, two messages each


async def test_every_event_is_answered_once_across_replicas(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster("shared", brain=ScaleBrain(answer_delay=0.05))
    bots = await cluster.start("r0", "r1", "r2")
    gate = asyncio.Semaphore(16)
    late: list[tuple[int, Sent]] = []

    async def one(i: int) -> Sent:
        first, again = bots[i % 3], bots[(i + 1) % 3]
        async with gate:
            if i < MENTIONS:
                sent = await cluster.mention(first, channel=f"CA{i % 10}")
            else:
                k = i - MENTIONS
                sent = await cluster.dm(
                    first, "a direct question", channel=f"DA{k % 20}", user=f"UA{k % 20}"
                )
            if i % 2 == 0:  # Slack retries while the turn runs ...
                await cluster.redeliver(again, sent)
            else:  # ... or after it was answered
                late.append((i, sent))
        return sent

    sents = await asyncio.gather(*(one(i) for i in range(MENTIONS + DMS)))
    await cluster.wait_answered(list(sents), timeout=90)
    await asyncio.gather(*(cluster.redeliver(bots[(i + 1) % 3], s, 2) for i, s in late))

    # Handling is over: every turn finished and all 100 re-deliveries were dropped.
    await cluster.wait_idle(bots, turns=len(sents), timeout=30)

    # (A message answered twice is as positive a signal: the assertions below then say so.)
    async def all_dropped() -> bool:
        if any(len(cluster.answers(s)) > 1 for s in sents):
            return True
        dropped = await cluster.metric_total(bots, "bot_deduplicated_events_total")
        return dropped >= len(sents)

    await cluster.wait_metrics(all_dropped, 30, f"{len(sents)} re-deliveries dropped")

    counts = {s.marker: len(cluster.answers(s)) for s in sents}
    assert [m for m, n in counts.items() if n != 1] == [], counts
    for sent in sents:
        [reply] = cluster.answers(sent)
        assert reply.text == answer_for(sent.marker) and not reply.stream_open
    # Nothing else was posted anywhere (no apology, no stray second message).
    assert len(cluster.slack.bot_messages()) == len(sents)
    # Work was spread: each replica answered some.
    per_bot = [await cluster.metric_total([b], "bot_turns_total") for b in bots]
    assert all(n > 0 for n in per_bot), per_bot
    assert sum(per_bot) == len(sents), per_bot
