"""Per-thread order across replicas: follow-ups that arrive at other replicas while the earlier
answer is still being written are answered in the order they arrived, each seeing the answer to
the message before it.

Oracle: the order of the replies in each thread at the fake Slack, and the chat requests the
fake model received (the context each turn was answered from).
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.scale.cluster import Cluster, Sent
from tests.scale.conftest import MakeCluster
from tests.scale.model import ScaleBrain, answer_for, assistant_texts, last_user_marker

pytestmark = [pytest.mark.mongo, pytest.mark.redis]

THREADS = 8
FOLLOW_UPS = 3
ANSWER_SECONDS = 0.8


def _requests_for(cluster: Cluster, sent: Sent) -> list[dict[str, object]]:
    return [r for r in cluster.model.requests if last_user_marker(r) == sent.marker]


async def test_follow_ups_are_answered_in_arrival_order_across_replicas(
    make_cluster: MakeCluster,
) -> None:
    cluster = await make_cluster("shared", brain=ScaleBrain(answer_delay=ANSWER_SECONDS))
    bots = await cluster.start("r0", "r1", "r2")

    async def thread(i: int) -> list[Sent]:
        first = await cluster.mention(bots[i % 3], channel="CORDER")
        # The first answer is being written (the model has the request) ...
        await cluster.wait_until(
            lambda: bool(_requests_for(cluster, first)), 30, f"the model asked about {first.marker}"
        )
        sents = [first]
        for k in range(1, FOLLOW_UPS + 1):  # ... when the follow-ups arrive, one after another
            sents.append(
                await cluster.thread_message(
                    bots[(i + k) % 3],
                    f"and follow-up {k}?",
                    channel=first.channel,
                    thread_ts=first.ts,
                )
            )
        return sents

    threads = await asyncio.gather(*(thread(i) for i in range(THREADS)))
    everything = [s for t in threads for s in t]
    await cluster.wait_answered(everything, timeout=60)
    await cluster.wait_handled({s.event_id: 1 for s in everything}, timeout=30)
    await cluster.wait_idle(bots, turns=len(everything), timeout=30)

    out_of_order: dict[str, list[str]] = {}
    blind: list[str] = []
    for sents in threads:
        replies = [m.text for m in cluster.messages_in(sents[0].channel, sents[0].ts)]
        expected = [answer_for(s.marker) for s in sents]
        if replies != expected:  # shown as the messages' places: m0, m2, m1, m3
            names = {answer_for(s.marker): f"m{k}" for k, s in enumerate(sents)}
            out_of_order[sents[0].marker] = [names.get(r, r) for r in replies]
        for before, sent in itertools.pairwise(sents):
            seen = [assistant_texts(r) for r in _requests_for(cluster, sent)]
            if not seen or any(answer_for(before.marker) not in texts for texts in seen):
                blind.append(f"{sent.marker} ran without the answer to {before.marker}")
    assert not out_of_order, (
        f"{len(out_of_order)} of {THREADS} threads out of order: {out_of_order}"
    )
    assert not blind, blind
