"""Slash commands through POST /slack/events: ack in time, ephemeral answers, admin checks."""

from __future__ import annotations

from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore
from tests.slack.harness import SlackHarness


async def test_memory_show_is_answered_ephemerally_in_the_ack(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    resp = await slack.command("/memory", "show", user="U1", channel="C5")
    body = await resp.json()
    assert resp.status == 200
    assert body == {"text": "*/memory* show", "response_type": "ephemeral"}
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
    await slack.command("/memory", "  forget all ")
    assert echo_core.commands[0].text == "forget all"


async def test_tools_install_by_non_admin_is_refused(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    resp = await slack.command("/tools", "install weather", user="U1")
    body = await resp.json()
    assert "only workspace admins" in body["text"] and body["response_type"] == "ephemeral"
    assert echo_core.commands[0].is_platform_admin is False
    assert slack.fake.calls_to("users.info", user="U1")


async def test_tools_install_by_admin_or_owner(slack: SlackHarness, echo_core: EchoCore) -> None:
    for user in ("UADMIN", "UOWNER"):
        resp = await slack.command("/tools", "install orders url=http://x token=s3cret", user=user)
        assert (await resp.json())["text"] == "*installed* `orders`"
    assert [c.is_platform_admin for c in echo_core.commands] == [True, True]
    assert echo_core.commands[0].text == "install orders url=http://x token=s3cret"


async def test_slow_command_acks_at_once_and_answers_via_response_url(
    start_harness: StartHarness,
) -> None:
    core = EchoCore(command_delay=0.5)
    slack = await start_harness(core, command_inline_seconds=0.1)
    resp = await slack.command("/memory", "forget all")
    # Acked empty while the command was still running: its answer was not posted yet.
    assert resp.status == 200 and not slack.fake.responses
    assert (await resp.read()) == b""
    await slack.fake.wait_for(lambda: bool(slack.fake.responses))
    [answer] = slack.fake.responses
    assert answer["text"] == "*/memory* forget all" and answer["response_type"] == "ephemeral"


async def test_failing_command_gets_a_polite_ephemeral_error(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    async def broken(request: object) -> object:
        raise RuntimeError("db down")

    echo_core.handle_command = broken  # type: ignore[assignment,method-assign]
    resp = await slack.command("/tools", "list")
    body = await resp.json()
    assert body["text"].startswith("Sorry") and body["response_type"] == "ephemeral"


async def test_command_with_bad_signature_is_rejected(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    resp = await slack.post_raw(
        "command=%2Fmemory&text=show&user_id=U1&team_id=T0TEST",
        content_type="application/x-www-form-urlencoded",
        secret="nope",
    )
    assert resp.status == 401 and echo_core.commands == []
