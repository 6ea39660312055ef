"""kill -9 of the replica holding 20 in-flight turns (MongoDB + Redis): the other replicas answer
every one of them exactly once within the claim timeout plus a turn, and the write tool each turn
called is not called again.

The victim starts alone and takes the 20 messages; each turn has called the write tool (counted
at the MCP server) and is waiting for the slow model's answer when the two other replicas come
up and the victim is killed. Six of them (DMs, answered by post-then-update) already show the
first words of their answer: their re-run must complete that message, not post another. Two
more turns are killed while their write is still running at the server (its outcome unknown to
the bot): it must not be run again.
Oracles: the replies at the fake Slack (one per message, naming it, its final text complete) and
the MCP server's own count of created tickets.
"""

from __future__ import annotations

import pytest

from testkit.fakes.mcp_server import FakeMcp
from tests.scale.conftest import MakeCluster
from tests.scale.model import (
    ScaleBrain,
    answer_for,
    is_final_round,
    markers_in,
    requests_from,
    ticket_title,
)
from tests.scale.tickets import WORDS, WRITE_TOOL, created_for, install_tickets

pytestmark = [pytest.mark.mongo, pytest.mark.redis]

TURNS = 20
PARTIAL = 6  # of which this many had begun to show their answer
MID_WRITE = 2  # and these besides, killed while their write runs
CLAIM_SECONDS = 3.0
ANSWER_SECONDS = 6.0  # the slow model, after the kill
SLACK = 15.0  # process scheduling on a small shared machine, Slack/Mongo round trips


async def test_kill_9_of_a_replica_loses_no_turn_and_doubles_no_write(
    make_cluster: MakeCluster,
) -> None:
    brain = ScaleBrain(answer_delay=ANSWER_SECONDS, write_tool=WRITE_TOOL)
    env = {"BOT_INBOX_CLAIM_SECONDS": str(CLAIM_SECONDS)}
    cluster = await make_cluster("shared", brain=brain, env=env)
    async with FakeMcp() as tickets:
        [victim] = await cluster.start("victim")
        await install_tickets(cluster, victim, tickets)
        brain.park()  # answers wait: the turns stay in flight as long as the test needs
        sents = [
            await cluster.mention(victim, WORDS, channel=f"CK{i}") for i in range(TURNS - PARTIAL)
        ]
        # DMs whose answer has begun to show (posted, then to be updated) when the victim dies.
        for i in range(PARTIAL):
            brain.partial.add(cluster.next_marker())
            sents.append(await cluster.dm(victim, WORDS, channel=f"DK{i}", user=f"UK{i}"))
        assert {s.marker for s in sents[-PARTIAL:]} == brain.partial
        mid_write = []
        for i in range(MID_WRITE):
            tickets.held_titles.add(ticket_title(cluster.next_marker()))
            mid_write.append(await cluster.mention(victim, WORDS, channel=f"CW{i}"))

        def in_flight() -> bool:
            waiting = [r for r in requests_from(cluster.model, victim.api_key) if is_final_round(r)]
            shown = all(cluster.messages_in(s.channel, None) for s in sents[-PARTIAL:])
            begun = {str(t["title"]) for t in tickets.started} >= tickets.held_titles
            return len(tickets.created) >= TURNS and len(waiting) >= TURNS and shown and begun

        await cluster.wait_until(in_flight, 60, f"{TURNS} turns in flight at the victim")
        assert all(created_for(tickets, s.marker) == 1 for s in sents), tickets.created
        survivors = await cluster.start("r1", "r2")

        victim.kill()
        tickets.writes_released.set()  # the server finishes the writes the dead victim began
        brain.release()
        everything = [*sents, *mid_write]
        took = await cluster.wait_answered(
            everything, timeout=CLAIM_SECONDS + ANSWER_SECONDS + SLACK
        )
        print(f"all {len(everything)} answered {took:.1f} s after the kill")
        await cluster.wait_handled({s.event_id: 1 for s in everything}, timeout=30)
        await cluster.wait_idle(survivors, turns=len(everything), timeout=30)

        for sent in everything:
            replies = cluster.messages_in(sent.channel, sent.reply_thread)
            assert [m.text for m in replies] == [answer_for(sent.marker)], sent.marker
            assert not replies[0].stream_open
        per_message = {s.marker: created_for(tickets, s.marker) for s in sents}
        assert all(n == 1 for n in per_message.values()), per_message
        # Begun once before the kill, never again (done once, or lost with the connection).
        begun = [markers_in(str(t["title"])) for t in tickets.started]
        mid = {
            s.marker: (begun.count([s.marker]), created_for(tickets, s.marker)) for s in mid_write
        }
        assert all(n == 1 for n, _ in mid.values()), f"(begun, done) per mid-write turn: {mid}"
        assert all(done <= 1 for _, done in mid.values()), f"(begun, done): {mid}"
        assert len(tickets.created) <= TURNS + MID_WRITE
