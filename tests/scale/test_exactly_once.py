"""Three `bot slack` replicas on MongoDB + Redis: every event answered exactly once, although each
one is delivered twice, the re-delivery (same event_id, X-Slack-Retry-Num) to another replica.

Oracle: the replies at the fake Slack, counted per source message (each reply names the marker
of the message it answers), after the replicas said they were done with every delivery (their
`slack_event_handled` lines) and their counters say every turn finished.
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
    await asyncio.gather(*(cluster.redeliver(bots[(i + 1) % 3], s) for i, s in late))

    # Handling is over: each delivery was handled (answered or dropped) and every turn finished.
    await cluster.wait_handled({s.event_id: 2 for s in sents}, timeout=30)
    await cluster.wait_idle(bots, turns=len(sents), timeout=30)

    counts = {s.marker: len(cluster.answers(s)) for s in sents}
    assert [m for m, n in counts.items() if n != 1] == [], counts
    for sent in sents:
        [reply] = cluster.answers(sent)
        assert reply.text == answer_for(sent.marker) and not reply.stream_open
    # Nothing else was posted anywhere (no apology, no stray second message).
    assert len(cluster.slack.bot_messages()) == len(sents)
    # And no turn ran twice, visible or not.
    assert await cluster.metric_total(bots, "bot_turns_total") == len(sents)
