"""The write tool whose effect the crash tests count: the test MCP server's `create_ticket`.

It has no readOnlyHint, so the bot treats it as a write (idempotent per turn, never retried
after an unknown outcome). `FakeMcp.created` records every call that really ran, at the server:
that count is the oracle, independent of anything the bot reports.
"""

from __future__ import annotations

from testkit.fakes.mcp_server import FakeMcp
from tests.scale.cluster import BotProcess, Cluster
from tests.scale.model import markers_in

PACK = "tickets"
WRITE_TOOL = "_create_ticket"  # offered to the model as `tickets_create_ticket`
WORDS = "please create a ticket for this"  # the person asks for the write themselves


async def install_tickets(cluster: Cluster, bot: BotProcess, server: FakeMcp) -> None:
    """`/tools install mcp` as a workspace admin, through `bot`; stored for every process."""
    answer = await cluster.command(
        bot,
        "/tools",
        f"install mcp name={PACK} url={server.url} allow=create_ticket",
        user="UADMIN",
    )
    assert "install" in answer.lower() and PACK in answer, answer
    # These tests are about the inbox and a write's exactly-once across kills, not approvals
    # (tests/approvals, tests/slack/test_approvals_*): the team's writes run without waiting.
    answer = await cluster.command(bot, "/config", "set team approve=none", user="UADMIN")
    assert answer.startswith("Set `approve`"), answer


def created_for(server: FakeMcp, marker: str) -> int:
    """How many tickets the server really created for the message carrying `marker`."""
    return sum(1 for t in server.created if marker in markers_in(str(t.get("title"))))
