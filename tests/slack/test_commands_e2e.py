"""Slash commands through POST /slack/events: every command is acked at once and empty, then
answered, ephemerally, through its response_url (which, as at Slack, takes at most 5 posts
within 30 minutes); admin checks; failures answered too."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_sdk.webhook.async_client import AsyncWebhookClient

from adapters.slack.commands import COMMAND_STOPPED, COMMANDS, CUT_NOTE
from testkit.fakes.mcp_server import FakeMcp
from testkit.fakes.slack_api import FakeSlack
from testkit.slack_harness import SlackHarness
from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore
from tests.slack.test_hostile import no_tracebacks


async def test_memory_show_is_acked_empty_and_answered_ephemerally(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    answer = await slack.ask("/memory", "show", user="U1", channel="C5")
    assert answer["text"] == "*/memory* show" and answer["response_type"] == "ephemeral"
    [request] = echo_core.commands
    assert (request.platform, request.team, request.channel, request.user) == (
        "slack",
        "T0TEST",
        "C5",
        "U1",
    )
    assert (request.command, request.text, request.is_platform_admin) == ("memory", "show", False)
    assert not slack.fake.calls_to("users.info")  # /memory needs no admin check


async def test_memory_forget_passes_the_text_through(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    await slack.ask("/memory", "  forget all ")
    assert echo_core.commands[0].text == "forget all"


async def test_tools_install_by_non_admin_is_refused(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    answer = await slack.ask("/tools", "install weather", user="U1")
    assert "only workspace admins" in answer["text"] and answer["response_type"] == "ephemeral"
    assert echo_core.commands[0].is_platform_admin is False
    assert slack.fake.calls_to("users.info", user="U1")


async def test_tools_install_by_admin_or_owner(slack: SlackHarness, echo_core: EchoCore) -> None:
    for user in ("UADMIN", "UOWNER"):
        answer = await slack.ask("/tools", "install orders url=http://x token=s3cret", user=user)
        assert answer["text"] == "*installed* `orders`"
    assert [c.is_platform_admin for c in echo_core.commands] == [True, True]
    assert echo_core.commands[0].text == "install orders url=http://x token=s3cret"


@pytest.mark.parametrize("name", COMMANDS)
async def test_every_command_is_acked_before_its_work_ends(
    start_harness: StartHarness, name: str
) -> None:
    """The core holds the command until the test has the ack: an ack that waited for the work
    would never come (the test would time out on it)."""
    core = EchoCore(command_gate=asyncio.Event())
    slack = await start_harness(core)
    ack = await asyncio.wait_for(slack.command(f"/{name}", "list"), timeout=30)
    assert ack.status == 200 and await ack.read() == b""
    url = slack.response_urls[-1]
    await asyncio.wait_for(core.commands_started.wait(), timeout=10)
    assert slack.fake.answers_at(url) == []  # the work is still held: nothing answered yet
    assert core.command_gate is not None
    core.command_gate.set()
    await slack.fake.wait_for(lambda: bool(slack.fake.answers_at(url)))
    [answer] = slack.fake.answers_at(url)
    assert answer["text"] == f"*/{name}* list" and answer["response_type"] == "ephemeral"


class SlowProbeMcp(FakeMcp):
    """An MCP server that answers nothing (its install probe included) until `released`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.asked = asyncio.Event()
        self.released = asyncio.Event()

    def _asgi(self, mcp: Any) -> Any:
        inner = super()._asgi(mcp)

        async def slow(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                self.asked.set()
                await self.released.wait()
            await inner(scope, receive, send)

        return slow


@pytest.fixture
async def slow_mcp() -> AsyncIterator[SlowProbeMcp]:
    server = SlowProbeMcp()
    async with server:
        yield server
        server.released.set()


async def test_tools_install_mcp_is_acked_before_the_probe_answers(
    slack_real: SlackHarness, slow_mcp: SlowProbeMcp
) -> None:
    """The CI flake of issue 20: `/tools install mcp` probes the server before answering. The
    ack comes while the server still holds the probe; the answer follows via response_url."""
    install = f"install mcp name=slowtix url={slow_mcp.url}"
    ack = await asyncio.wait_for(slack_real.command("/tools", install, user="UADMIN"), 30)
    assert ack.status == 200 and await ack.read() == b""  # not Bolt's 404 "unhandled request"
    url = slack_real.response_urls[-1]
    await asyncio.wait_for(slow_mcp.asked.wait(), timeout=30)  # the probe reached the server
    assert slack_real.fake.answers_at(url) == []  # and is held there: nothing answered yet
    slow_mcp.released.set()
    await slack_real.fake.wait_for(lambda: bool(slack_real.fake.answers_at(url)), timeout=30)
    [answer] = slack_real.fake.answers_at(url)
    assert answer["response_type"] == "ephemeral" and "as `slowtix`" in answer["text"], answer


async def test_failing_command_gets_a_polite_ephemeral_error(
    slack: SlackHarness, echo_core: EchoCore, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(request: object) -> object:
        raise RuntimeError("db down")

    echo_core.handle_command = broken  # type: ignore[assignment,method-assign]
    answer = await slack.ask("/tools", "list")
    assert answer["text"] == "Sorry, that command failed. Please try again."
    assert answer["response_type"] == "ephemeral"
    assert any(r.msg == "slack_command_failed" for r in caplog.records)
    no_tracebacks(caplog)


async def test_a_long_answer_takes_at_most_five_posts(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    lines = [f"fact {n}: " + "word " * 60 for n in range(400)]  # ~125k characters

    async def long_answer(request: object) -> object:
        from bot.core import CommandReply

        return CommandReply("\n".join(lines))

    echo_core.handle_command = long_answer  # type: ignore[assignment,method-assign]
    await slack.ask("/memory", "show")
    url = slack.response_urls[-1]
    await slack.fake.wait_for(lambda: len(slack.fake.answers_at(url)) == 5)
    # A later post would be refused by Slack (as by the fake): none was even tried.
    await slack.wait_commands_answered()
    parts = [a["text"] for a in slack.fake.answers_at(url)]
    assert slack.fake.refused_responses == []
    assert all(len(p) <= slack.config.message_limit for p in parts)
    assert parts[-1].endswith(CUT_NOTE) and parts[0].startswith("fact 0:")
    assert all(a["response_type"] == "ephemeral" for a in slack.fake.answers_at(url))


async def test_an_expired_response_url_is_logged_not_retried(
    start_harness: StartHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    core = EchoCore(command_gate=asyncio.Event())
    slack = await start_harness(core)
    ack = await slack.command("/memory", "show")
    assert ack.status == 200
    url = slack.response_urls[-1]
    await asyncio.wait_for(core.commands_started.wait(), timeout=10)
    slack.fake.age_response_url(url, 31 * 60)  # the work took longer than Slack waits
    assert core.command_gate is not None
    core.command_gate.set()
    await slack.wait_commands_answered()
    assert slack.fake.refused_responses == [{"_url": url, "error": "expired_url"}]
    assert slack.fake.answers_at(url) == []
    assert any(r.msg == "slack_command_answer_refused" for r in caplog.records)
    no_tracebacks(caplog)


async def test_fake_response_url_takes_five_posts_within_30_minutes(
    fake_slack: FakeSlack,
) -> None:
    """The fake as Slack documents it, through slack_sdk's own webhook client."""
    url = fake_slack.response_url()
    client = AsyncWebhookClient(url)
    statuses = [(await client.send(text=f"part {n}")).status_code for n in range(6)]
    assert statuses == [200] * 5 + [404]
    assert [a["text"] for a in fake_slack.answers_at(url)] == [f"part {n}" for n in range(5)]
    old = fake_slack.response_url()
    fake_slack.age_response_url(old, 30 * 60 + 1)
    refused = await AsyncWebhookClient(old).send(text="late")
    assert (refused.status_code, refused.body) == (404, "expired_url")
    assert (await AsyncWebhookClient(url + "x").send(text="?")).status_code == 404


async def test_command_with_bad_signature_is_rejected(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    resp = await slack.post_raw(
        "command=%2Fmemory&text=show&user_id=U1&team_id=T0TEST",
        content_type="application/x-www-form-urlencoded",
        secret="nope",
    )
    assert resp.status == 401 and echo_core.commands == []


async def test_a_command_stopped_by_shutdown_says_so(start_harness: StartHarness) -> None:
    core = EchoCore(command_gate=asyncio.Event())  # never set: the work outlives the grace
    slack = await start_harness(core, shutdown_grace_seconds=0.2)
    ack = await slack.command("/memory", "forget all")
    assert ack.status == 200 and await ack.read() == b""
    url = slack.response_urls[-1]
    await asyncio.wait_for(core.commands_started.wait(), timeout=10)
    await slack.close()  # SIGTERM's path: stop intake, let work finish within the grace
    [answer] = slack.fake.answers_at(url)
    assert answer["text"] == COMMAND_STOPPED and answer["response_type"] == "ephemeral"
