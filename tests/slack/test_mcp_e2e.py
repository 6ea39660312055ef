"""Through Slack (signed requests to the HTTP endpoint, the local Web API server, the
OpenAI-compatible test server, the real core): an admin installs an MCP server's pack; its tools
are offered in that workspace only; a call reaches the server with the token and its result
reaches the model; a non-admin's install is refused."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from testkit.fakes.mcp_server import FakeMcp
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from testkit.slack_harness import SlackHarness

TOKEN = "slack-mcp-token-5e8d0a"


@pytest.fixture
async def mcp() -> AsyncIterator[FakeMcp]:
    async with FakeMcp(token=TOKEN) as server:
        yield server


def _offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


async def test_admin_installs_mcp_pack_and_the_model_calls_it(
    slack_real: SlackHarness, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    install = f"install mcp name=tix url={mcp.url} token={TOKEN}"
    refused = await slack_real.ask("/tools", install, user="U1")
    assert refused["response_type"] == "ephemeral"
    assert refused["text"].startswith("Sorry, only workspace admins")
    assert mcp.headers == []  # a refused install never reaches the server
    done = await slack_real.ask("/tools", install, user="UADMIN")
    assert done["response_type"] == "ephemeral" and "as `tix`" in done["text"], done
    assert TOKEN not in done["text"]

    fake_openai.push(
        tool_calls([("tix_create_ticket", {"title": "VPN down in Lyon", "priority": "2"})]),
        text("I opened T-101 for the VPN outage."),
    )
    ts = await slack_real.mention("open a ticket: VPN down in Lyon, priority 2")
    await slack_real.wait_done(ts, timeout=20)
    # A write: it waits for the requester's Approve (tests/slack/test_approvals_e2e.py).
    (request,) = slack_real.fake.ephemerals_for("U1")
    await slack_real.interact(slack_real.fake.button_click(request, "bot_approval_approve"))
    assert await slack_real.wait_approval_clicks(1, timeout=20) == ["decided"]
    assert slack_real.replies("C1", thread_ts=ts)[-1] == "I opened T-101 for the VPN outage."
    assert "tix_create_ticket" in _offered(fake_openai.requests[0])
    assert mcp.created == [{"title": "VPN down in Lyon", "priority": 2}]
    assert all(h.get("authorization") == f"Bearer {TOKEN}" for h in mcp.headers)
    tool_msg = [m for m in fake_openai.requests[1]["messages"] if m["role"] == "tool"][-1]
    assert "Created ticket T-101" in tool_msg["content"]

    # Another workspace talking to the same bot: the pack is not offered there.
    fake_openai.push(text("hi"))
    other = await slack_real.mention("hello", team="T0OTHER", channel="C9")
    await slack_real.wait_done(other, timeout=20)
    assert not any(n.startswith("tix_") for n in _offered(fake_openai.requests[-1]))
    listed = await slack_real.ask("/tools", "", user="U1", team="T0OTHER")
    assert "tix" not in listed["text"]
    assert TOKEN not in json.dumps(fake_openai.requests)
    assert TOKEN not in repr(slack_real.fake.calls)  # nor in anything posted to Slack
