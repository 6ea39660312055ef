"""Approvals before actions on Slack, end to end: signed HTTP into the Bolt app, the real core
(SQLite, FakeOpenAI), FakeSlack checking chat.postEphemeral and the buttons as Slack does and
sending `block_actions` as Slack does for an ephemeral message, and a real MCP server that
records its calls. A read runs at once; a write waits for the requester's buttons (ephemeral,
in the thread); a stranger's click is refused; Approve runs the tool once, also when the click
comes twice; Deny and expiry are told to the model; a process that never saw the turn takes the
click (a restart); `approve=none` and "Approve always"; clicks and the sweep over Socket Mode."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from adapters.slack import SlackConfig, run_slack
from adapters.slack.approvals import request_blocks
from bot.stores.approvals import Approval
from testkit.fakes.mcp_server import FakeMcp
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from testkit.fakes.slack_api import Ephemeral, FakeSlack, invalid_blocks
from testkit.slack_harness import HANDLED, SlackHarness, event_body, new_ts

CREATE = ("tix_create_ticket", {"title": "printer on fire", "priority": 1})
APPROVE, ALWAYS, DENY = "bot_approval_approve", "bot_approval_always", "bot_approval_deny"


@pytest.fixture
async def mcp() -> AsyncIterator[FakeMcp]:
    async with FakeMcp() as server:
        yield server


Start = Callable[..., Awaitable[SlackHarness]]


@pytest.fixture
async def start(start_harness: Any, make_app: Any) -> Start:
    async def go(**settings: Any) -> SlackHarness:
        core = await make_app(**settings)
        return await start_harness(core, approval_sweep_seconds=0.2)

    return go


async def install(slack: SlackHarness, mcp: FakeMcp) -> None:
    done = await slack.ask("/tools", f"install mcp name=tix url={mcp.url}", user="UADMIN")
    assert "as `tix`" in done["text"], done


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


async def asked(slack: SlackHarness, text_: str, user: str = "U1") -> tuple[str, Ephemeral]:
    """Mention the bot; once its turn is over, the one approval request shown to `user`."""
    before = len(slack.fake.ephemerals_for(user))
    ts = await slack.mention(text_, user=user)
    await slack.wait_done(ts, timeout=20)
    shown = slack.fake.ephemerals_for(user)[before:]
    assert len(shown) == 1, shown
    return ts, shown[0]


async def click(slack: SlackHarness, payload: dict[str, Any]) -> None:
    resp = await slack.interact(payload)
    assert resp.status == 200  # acked; the decision comes after


async def test_read_at_once_write_waits_stranger_refused_approve_runs_once(
    start: Start, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    slack = await start()
    await install(slack, mcp)
    fake_openai.push(
        tool_calls([("tix_search_tickets", {"query": "printer"})]),
        text("One printer ticket is open."),
        tool_calls([CREATE]),
        text("Ticket T-101 is open."),
    )
    read = await slack.mention("any printer tickets?")
    assert await slack.wait_replies("C1", read, timeout=20) == ["One printer ticket is open."]
    assert mcp.calls == ["search_tickets"] and slack.fake.ephemerals == []  # no question

    ts, request = await asked(slack, "open a ticket: printer on fire")
    assert mcp.created == [] and "create_ticket" not in mcp.calls  # it waits
    (waiting,) = slack.replies("C1", ts)
    assert "<@U1>'s approval" in waiting and "printer on fire" not in waiting
    # To the requester only, in the thread, shown (the thread existed: the reply came first).
    where = (request.channel, request.user, request.thread_ts, request.shown)
    assert where == ("C1", "U1", ts, True)
    assert "`tix_create_ticket`" in request.text and "title: printer on fire" in request.text
    assert "priority: 1" in request.text

    stranger = slack.fake.button_click(request, APPROVE, user="U2")
    await click(slack, stranger)
    assert await slack.wait_approval_clicks(1) == ["refused"]
    (refusal,) = slack.fake.answers_at(stranger["response_url"])
    assert refusal["text"].startswith("Only the person who asked")
    assert refusal["replace_original"] is False and refusal["response_type"] == "ephemeral"
    assert request.replaced == 0 and mcp.created == []  # the request stays

    payload = slack.fake.button_click(request, APPROVE)
    double = slack.fake.button_click(request, APPROVE)  # pressed again before it was replaced
    await click(slack, payload)
    await click(slack, payload)  # Slack delivers the same click again
    await click(slack, double)
    outcomes = await slack.wait_approval_clicks(4, timeout=20)
    assert sorted(outcomes[1:]) == ["already_decided", "already_decided", "decided"]
    assert mcp.created == [{"title": "printer on fire", "priority": 1}]  # once
    assert request.replaced == 1 and request.text.startswith("Approved: running")
    assert slack.replies("C1", ts) == [waiting, "Ticket T-101 is open."]
    assert tool_results(fake_openai.requests[-1])[-1]["ok"] is True
    assert len(fake_openai.requests) == 4  # nothing more asked of the model


async def test_the_click_is_acked_before_the_tool_runs(
    start: Start, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    slack = await start()
    await install(slack, mcp)
    mcp.held_titles.add("printer on fire")  # the write waits until the test lets it go
    fake_openai.push(tool_calls([CREATE]), text("Ticket T-101 is open."))
    ts, request = await asked(slack, "open a ticket: printer on fire")
    # Slack wants the ack within 3 s: it comes while the approved write is still running.
    await asyncio.wait_for(click(slack, slack.fake.button_click(request, APPROVE)), timeout=3)
    await slack.fake.wait_for(lambda: bool(mcp.started), timeout=20)
    assert mcp.created == [] and request.text.startswith("Approved")
    mcp.writes_released.set()
    assert await slack.wait_approval_clicks(1, timeout=20) == ["decided"]
    assert slack.replies("C1", ts)[-1] == "Ticket T-101 is open."
    assert len(mcp.created) == 1


async def test_deny_and_expiry_are_told_to_the_model(
    start: Start, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    slack = await start(bot_approval_ttl=3.0)
    await install(slack, mcp)
    fake_openai.push(tool_calls([CREATE]), text("OK, I did not open it."))
    ts, request = await asked(slack, "open a ticket: printer on fire")
    await click(slack, slack.fake.button_click(request, DENY))
    assert await slack.wait_approval_clicks(1, timeout=20) == ["decided"]
    assert request.text.startswith("Denied")
    assert slack.replies("C1", ts)[-1] == "OK, I did not open it."
    (declined,) = tool_results(fake_openai.requests[-1])
    assert declined["error"]["type"] == "declined_by_person"

    # Nobody answers: the sweep of this process expires it and the model answers in the thread.
    fake_openai.push(tool_calls([CREATE]), text("Nobody approved it, so it was not opened."))
    ts, request = await asked(slack, "open a ticket: printer on fire")
    replies = await slack.wait_replies("C1", ts, count=2, timeout=20)
    assert replies[-1] == "Nobody approved it, so it was not opened."
    (expired,) = tool_results(fake_openai.requests[-1])
    assert expired["error"]["type"] == "approval_expired"
    await click(slack, slack.fake.button_click(request, APPROVE))  # too late
    assert (await slack.wait_approval_clicks(2))[-1] == "already_decided"
    assert mcp.created == []


async def test_a_process_that_never_saw_the_turn_takes_the_click(
    start_harness: Any, make_app: Any, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    first_core = await make_app()
    first = await start_harness(first_core)
    await install(first, mcp)
    fake_openai.push(tool_calls([CREATE]), text("Ticket T-101 is open."))
    ts, request = await asked(first, "open a ticket: printer on fire")
    await first.close()
    await first_core.close()  # the process that asked is gone

    second = await start_harness(await make_app())  # same store, nothing in memory
    await click(second, second.fake.button_click(request, APPROVE))
    assert await second.wait_approval_clicks(1, timeout=20) == ["decided"]
    assert second.replies("C1", ts)[-1] == "Ticket T-101 is open."
    assert mcp.created == [{"title": "printer on fire", "priority": 1}]


async def test_approve_none_and_approve_always(
    start: Start, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    slack = await start()
    await install(slack, mcp)
    fake_openai.push(tool_calls([CREATE]), text("Opened T-101."))
    _, request = await asked(slack, "open a ticket: printer on fire")
    await click(slack, slack.fake.button_click(request, ALWAYS))
    assert await slack.wait_approval_clicks(1, timeout=20) == ["decided"]
    assert "won't be asked again" in request.text
    fake_openai.push(tool_calls([CREATE]), text("Opened T-102."))
    again = await slack.mention("and another one")
    assert await slack.wait_replies("C1", again, timeout=20) == ["Opened T-102."]
    assert len(mcp.created) == 2 and len(slack.fake.ephemerals) == 1  # not asked again

    # Someone else in the same place is asked (the grant is that person's only).
    fake_openai.push(tool_calls([CREATE]))
    await asked(slack, "open one for me", user="U2")

    set_ = await slack.ask("/config", "set approve=none", user="UADMIN")
    assert set_["response_type"] == "ephemeral", set_
    fake_openai.push(tool_calls([CREATE]), text("Opened T-103."))
    free = await slack.mention("one more", user="U2")
    assert await slack.wait_replies("C1", free, timeout=20) == ["Opened T-103."]
    assert len(mcp.created) == 3 and len(slack.fake.ephemerals) == 2

    audit = (await slack.ask("/tools", "audit", user="UADMIN"))["text"]
    assert "`tix_create_ticket`" in audit and "approved by U1" in audit, audit
    assert "asked by U2 in C1: waiting" in audit


def test_request_blocks_are_valid_and_cut_long_values() -> None:
    args = {"title": "x" * 5000, "note": "<!channel> & <@U2>", **{f"k{i}": i for i in range(20)}}
    approval = Approval(
        id="a" * 16,
        team="slack:T0TEST",
        place="C1",
        session="s",
        person="slack:T0TEST:U1",
        audience="",
        turn_id="t",
        call_id="c",
        tool="tix_create_ticket",
        arguments=json.dumps(args),
        message="{}",
        created_at=0.0,
        expires_at=600.0,
    )
    blocks = request_blocks(approval)
    assert not invalid_blocks(blocks)
    shown = blocks[0]["text"]["text"]
    assert "more characters not shown" in shown and "more arguments" in shown
    assert "<!channel>" not in shown and "&lt;!channel&gt; &amp; &lt;@U2&gt;" in shown


def test_fake_refuses_what_slack_refuses() -> None:
    fake = FakeSlack()
    who = fake.tokens[fake.bot_token]
    ok = {"channel": "C1", "user": "U1", "text": "hi"}
    assert fake.api_chat_postEphemeral(ok, who)["ok"] is True
    for bad, error in [
        ({**ok, "channel": ""}, "channel_not_found"),
        ({**ok, "user": "UNOBODY"}, "user_not_found"),
        ({**ok, "channel": "DU2"}, "user_not_in_channel"),
        ({**ok, "text": ""}, "no_text"),
        ({**ok, "text": "x" * 40001}, "msg_too_long"),
        ({**ok, "blocks": [{"type": "actions", "elements": [{"type": "button"}]}]}, "invalid"),
    ]:
        assert fake.api_chat_postEphemeral(bad, who)["error"].startswith(error), bad
    button = {"type": "button", "action_id": "a", "text": {"type": "plain_text", "text": "A"}}
    for bad_button in [
        {**button, "style": "green"},
        {**button, "text": {"type": "mrkdwn", "text": "A"}},
        {**button, "text": {"type": "plain_text", "text": "A" * 76}},
        {**button, "value": "v" * 2001},
    ]:
        assert invalid_blocks([{"type": "actions", "elements": [bad_button]}]), bad_button
    assert invalid_blocks([{"type": "actions", "elements": [button, button]}])  # same action_id
    assert not invalid_blocks([{"type": "actions", "elements": [button]}])


async def test_socket_mode_takes_clicks_and_sweeps(
    fake_slack: FakeSlack, make_app: Any, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    core = await make_app(bot_approval_ttl=2.0)
    config = SlackConfig(
        bot_token=fake_slack.bot_token,
        app_token=fake_slack.app_token,
        api_url=fake_slack.api_url,
        http_host="127.0.0.1",
        http_port=0,
        working_reaction_delay=0.0,
        approval_sweep_seconds=0.2,
    )
    stop = asyncio.Event()
    HANDLED.attach()
    runner = asyncio.create_task(run_slack(core, config, stop=stop))
    try:
        await fake_slack.wait_for(lambda: fake_slack.socket_connected, timeout=10)
        url = fake_slack.response_url()
        command = {
            "command": "/tools",
            "text": f"install mcp name=tix url={mcp.url}",
            "user_id": "UADMIN",
            "channel_id": "C1",
            "team_id": "T0TEST",
            "response_url": url,
        }
        await fake_slack.send_envelope(command, kind="slash_commands")
        await fake_slack.wait_for(lambda: bool(fake_slack.answers_at(url)), timeout=10)

        async def ask() -> tuple[str, Ephemeral]:
            ts, before = new_ts(), len(fake_slack.ephemerals)
            event = {"type": "app_mention", "user": "U1", "text": "<@UBOT> a ticket please"}
            await fake_slack.send_envelope(
                event_body({**event, "ts": ts, "channel": "C1"}, team="T0TEST")
            )
            await fake_slack.wait_for(lambda: len(fake_slack.ephemerals) > before, timeout=20)
            return ts, fake_slack.ephemerals[-1]

        fake_openai.push(tool_calls([CREATE]), text("Opened T-101."))
        ts, request = await ask()
        clicked = await fake_slack.send_envelope(
            fake_slack.button_click(request, APPROVE), kind="interactive"
        )
        await fake_slack.wait_for(
            lambda: any(a.get("envelope_id") == clicked for a in fake_slack.socket_acks)
        )
        assert (await wait_clicks(1)) == ["decided"]
        assert [m.text for m in fake_slack.bot_messages("C1", ts)][-1] == "Opened T-101."
        assert len(mcp.created) == 1

        fake_openai.push(tool_calls([CREATE]), text("Nobody approved it."))
        ts, request = await ask()
        await fake_slack.wait_for(
            lambda: (
                [m.text for m in fake_slack.bot_messages("C1", ts)][-1:] == ["Nobody approved it."]
            ),
            timeout=20,
        )
        assert len(mcp.created) == 1
    finally:
        stop.set()
        await asyncio.wait_for(runner, timeout=30)
        HANDLED.detach()


async def wait_clicks(count: int, timeout: float = 20.0) -> list[str]:
    deadline = asyncio.get_running_loop().time() + timeout
    while len(HANDLED.approvals) < count:
        assert asyncio.get_running_loop().time() < deadline, HANDLED.approvals
        await asyncio.sleep(0.02)
    return list(HANDLED.approvals)


async def test_a_resumed_turn_waits_for_a_turn_slot_like_any_turn(
    start_harness: Any, make_app: Any, fake_openai: FakeOpenAI, mcp: FakeMcp
) -> None:
    """With one turn at a time (`max_concurrent_turns=1`), the turn an Approve resumes waits for
    the slot a running turn holds: it is a turn like any other, not a way around the adapter's
    turn-concurrency limit and load guard."""
    slack = await start_harness(
        await make_app(), approval_sweep_seconds=0.2, max_concurrent_turns=1
    )
    await install(slack, mcp)
    fake_openai.push(tool_calls([CREATE]))
    _, request = await asked(slack, "open a ticket: printer on fire")

    order: list[str] = []
    release = asyncio.Event()
    resumed = asyncio.Event()

    async def brain(body: dict[str, Any]) -> Any:
        said = " ".join(str(m.get("content")) for m in body["messages"] if m["role"] == "user")
        if "slow question" in said:
            order.append("slow asked")
            await release.wait()
            order.append("slow answered")
            return text("Slow answer.")
        order.append("resumed")
        resumed.set()
        return text("Ticket T-101 is open.")

    fake_openai.brain = brain
    slow = await slack.mention("slow question", channel="C2")
    await slack.fake.wait_for(lambda: order == ["slow asked"], 10)  # it holds the only slot
    await click(slack, slack.fake.button_click(request, APPROVE))
    # The decision is taken (the buttons replaced); its turn would be the next model request.
    await slack.fake.wait_for(lambda: request.replaced == 1, 10)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(resumed.wait(), 1.0)  # no slot: it waits
    assert mcp.created == []  # the approved write runs in the resumed turn, not before
    release.set()
    assert await slack.wait_approval_clicks(1, timeout=20) == ["decided"]
    assert order == ["slow asked", "slow answered", "resumed"]
    assert mcp.created == [{"title": "printer on fire", "priority": 1}]
    assert await slack.wait_replies("C2", slow, timeout=10) == ["Slow answer."]
