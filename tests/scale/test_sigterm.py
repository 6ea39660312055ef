"""SIGTERM of a replica (a rolling deploy) while it holds in-flight turns and follow-ups queued
behind them: nothing is lost (every message answered exactly once, by it or another replica, in
thread order) and the process exits 0.

Oracles: the replies at the fake Slack and the process's exit status.
"""

from __future__ import annotations

import pytest

from tests.scale.cluster import Sent
from tests.scale.conftest import MakeCluster
from tests.scale.model import ScaleBrain, answer_for, last_user_marker, requests_from

pytestmark = [pytest.mark.mongo, pytest.mark.redis]

THREADS = 6
ANSWER_SECONDS = 1.5
EXIT_SECONDS = 30.0  # the adapter's shutdown grace (20 s) and a margin


async def test_sigterm_hands_over_or_finishes_every_turn_and_exits_0(
    make_cluster: MakeCluster,
) -> None:
    brain = ScaleBrain(answer_delay=ANSWER_SECONDS)
    cluster = await make_cluster("shared", brain=brain)
    [leaving] = await cluster.start("leaving")
    brain.park()
    firsts = [await cluster.mention(leaving, channel=f"CT{i}") for i in range(THREADS)]

    def asked(sents: list[Sent]) -> bool:
        markers = {last_user_marker(r) for r in requests_from(cluster.model, leaving.api_key)}
        return all(s.marker in markers for s in sents)

    await cluster.wait_until(lambda: asked(firsts), 30, "the first turns in flight")
    follow_ups = [
        await cluster.thread_message(leaving, "and then?", channel=s.channel, thread_ts=s.ts)
        for s in firsts
    ]
    staying = await cluster.start("r1", "r2")

    leaving.terminate()
    brain.release()
    everything = firsts + follow_ups
    took = await cluster.wait_answered(everything, timeout=60)
    assert await leaving.wait_exit(EXIT_SECONDS) == 0, leaving.log_tail()
    print(f"answered {took:.1f} s after SIGTERM; {leaving.logged_turns()} by the leaving replica")
    # Every delivery was handled, and every turn is over: those the leaving one finished (its
    # log) and the others' (/metrics).
    await cluster.wait_handled({s.event_id: 1 for s in everything}, timeout=30)
    await cluster.wait_idle(staying, turns=len(everything) - leaving.logged_turns(), timeout=30)

    for first, follow_up in zip(firsts, follow_ups, strict=True):
        replies = [m.text for m in cluster.messages_in(first.channel, first.ts)]
        assert replies == [answer_for(first.marker), answer_for(follow_up.marker)], replies
