"""The embedded setup (SQLite under BOT_DATA_DIR, no Redis): one `bot slack` process killed with
-9 while it holds in-flight turns, then started again on the same data dir, answers every one of
them exactly once, without calling their write tool again: turns waiting for the model after the
write, turns whose answer had begun to show, and turns killed while the write itself was running
at the server (its outcome unknown to the bot: it must not be run a second time).

Oracles: the replies at the fake Slack (one per message, naming it, final text complete) and the
MCP server's own records of the writes begun and done.
"""

from __future__ import annotations

import asyncio

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

TURNS = 10  # mentions; and a DM, PARTIAL DMs whose answer had begun to show, MID_WRITE mentions
PARTIAL = 3
MID_WRITE = 2
CLAIM_SECONDS = 3.0
ANSWER_SECONDS = 2.0
SLACK = 15.0
SETTLE_SECONDS = 1.0


async def test_kill_9_and_restart_on_the_same_data_dir_answers_every_turn_once(
    make_cluster: MakeCluster,
) -> None:
    brain = ScaleBrain(answer_delay=ANSWER_SECONDS, write_tool=WRITE_TOOL)
    env = {"BOT_INBOX_CLAIM_SECONDS": str(CLAIM_SECONDS)}
    cluster = await make_cluster("embedded", brain=brain, env=env)
    async with FakeMcp() as tickets:
        [bot] = await cluster.start("solo")
        await install_tickets(cluster, bot, tickets)
        brain.park()
        sents = [await cluster.mention(bot, WORDS, channel=f"CE{i}") for i in range(TURNS)]
        sents.append(await cluster.dm(bot, WORDS, channel="DE0", user="UE0"))
        # DMs whose answer has begun to show (posted, then to be updated) when the bot dies.
        for i in range(1, PARTIAL + 1):
            brain.partial.add(cluster.next_marker())
            sents.append(await cluster.dm(bot, WORDS, channel=f"DE{i}", user=f"UE{i}"))
        partial = sents[-PARTIAL:]
        # Mentions whose write is still running at the server when the bot dies.
        mid_write = []
        for i in range(MID_WRITE):
            tickets.held_titles.add(ticket_title(cluster.next_marker()))
            mid_write.append(await cluster.mention(bot, WORDS, channel=f"CW{i}"))
        after_write = sents
        sents = [*after_write, *mid_write]

        def in_flight() -> bool:
            waiting = [r for r in requests_from(cluster.model, bot.api_key) if is_final_round(r)]
            shown = all(cluster.messages_in(s.channel, None) for s in partial)
            begun = {str(t["title"]) for t in tickets.started}
            return (
                len(tickets.created) >= len(after_write)
                and len(waiting) >= len(after_write)
                and shown
                and tickets.held_titles <= begun
            )

        await cluster.wait_until(in_flight, 60, f"{len(sents)} turns in flight")
        assert all(created_for(tickets, s.marker) == 1 for s in after_write), tickets.created
        assert all(created_for(tickets, s.marker) == 0 for s in mid_write), tickets.created
        # Setup, not an assertion: a moment for the bot to note the replies it has begun (killed
        # between Slack taking a post and the bot hearing back, no process could know of it).
        await asyncio.sleep(SETTLE_SECONDS)

        bot.kill()
        tickets.writes_released.set()  # the server finishes the writes the dead bot began
        brain.release()
        bot = await cluster.restart("solo")
        took = await cluster.wait_answered(sents, timeout=CLAIM_SECONDS + ANSWER_SECONDS + SLACK)
        print(f"all {len(sents)} answered {took:.1f} s after the restart")
        await cluster.wait_handled({s.event_id: 1 for s in sents}, timeout=30)
        await cluster.wait_idle([bot], turns=len(sents), timeout=30)

        for sent in sents:
            replies = cluster.messages_in(sent.channel, sent.reply_thread)
            assert [m.text for m in replies] == [answer_for(sent.marker)], sent.marker
            assert not replies[0].stream_open
        per_message = {s.marker: created_for(tickets, s.marker) for s in sents}
        assert all(per_message[s.marker] == 1 for s in after_write), per_message
        # Begun once before the kill, never again after it (done once, or lost with the
        # connection: either way not doubled).
        begun = [markers_in(str(t["title"])) for t in tickets.started]
        mid = {s.marker: (begun.count([s.marker]), per_message[s.marker]) for s in mid_write}
        assert all(n == 1 for n, _ in mid.values()), f"(begun, done) per mid-write turn: {mid}"
        assert all(done <= 1 for _, done in mid.values()), f"(begun, done): {mid}"
