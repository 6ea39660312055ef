"""Socket Mode: run_slack connects over WebSocket; envelopes reach the same dispatch, get acked."""

from __future__ import annotations

import asyncio
import socket
import time

import aiohttp

from adapters.slack import SlackConfig, run_slack
from testkit.fakes.slack_api import FakeSlack
from testkit.slack_harness import HANDLED, event_body, new_ts
from tests.slack.echo_core import EchoCore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_socket_mode_envelopes_are_acked_and_answered(fake_slack: FakeSlack) -> None:
    core = EchoCore()
    port = _free_port()
    config = SlackConfig(
        bot_token=fake_slack.bot_token,
        app_token=fake_slack.app_token,
        api_url=fake_slack.api_url,
        http_host="127.0.0.1",
        http_port=port,
        update_interval=0.05,
        stream_interval=0.05,
    )
    stop = asyncio.Event()
    HANDLED.attach()
    runner = asyncio.create_task(run_slack(core, config, stop=stop))
    try:
        await fake_slack.wait_for(lambda: fake_slack.socket_connected, timeout=10)
        ts = new_ts()
        event = {
            "type": "app_mention",
            "user": "U1",
            "text": "<@UBOT> over the socket",
            "ts": ts,
            "channel": "C9",
        }
        sent = time.monotonic()
        envelope = await fake_slack.send_envelope(event_body(event, team="T0TEST", event_id="EvS1"))
        await fake_slack.wait_for(
            lambda: any(a.get("envelope_id") == envelope for a in fake_slack.socket_acks)
        )
        assert time.monotonic() - sent < 1.0
        # A quick answer is its reply alone (no working reaction): wait for that.
        await fake_slack.wait_for(lambda: bool(fake_slack.bot_messages("C9", ts)))
        assert [m.text for m in fake_slack.bot_messages("C9", ts)] == ["echo: over the socket"]

        # a Socket Mode retry of the same event is acked but not answered again
        retry = await fake_slack.send_envelope(
            event_body(event, team="T0TEST", event_id="EvS1"), retry_attempt=1
        )
        await fake_slack.wait_for(
            lambda: any(a.get("envelope_id") == retry for a in fake_slack.socket_acks)
        )
        assert sorted(await HANDLED.wait({"EvS1"}, 2)) == ["answered", "duplicate"]
        assert len(core.messages) == 1

        # slash commands arrive as envelopes too: acked at once (empty), answered through
        # the response_url
        command = {
            "command": "/memory",
            "text": "show",
            "user_id": "U1",
            "channel_id": "C9",
            "team_id": "T0TEST",
            "response_url": fake_slack.response_url(),
        }
        cmd = await fake_slack.send_envelope(command, kind="slash_commands")
        await fake_slack.wait_for(
            lambda: any(a.get("envelope_id") == cmd for a in fake_slack.socket_acks)
        )
        [ack] = [a for a in fake_slack.socket_acks if a.get("envelope_id") == cmd]
        assert not ack.get("payload")
        url = command["response_url"]
        await fake_slack.wait_for(lambda: bool(fake_slack.answers_at(url)))
        [answer] = fake_slack.answers_at(url)
        assert answer["text"] == "*/memory* show" and answer["response_type"] == "ephemeral"

        # the App Home tab: the event arrives over the socket, the view through views.publish
        home = {"type": "app_home_opened", "user": "U1", "channel": "D1", "tab": "home"}
        await fake_slack.send_envelope(event_body(home, team="T0TEST", event_id="EvHome"))
        assert await HANDLED.wait({"EvHome"}, 1) == ["done"]
        assert "`/memory`" in fake_slack.home_text("U1")

        # health and metrics are still served over HTTP; events are not
        async with aiohttp.ClientSession() as http:
            health = await http.get(f"http://127.0.0.1:{port}/healthz")
            events = await http.post(f"http://127.0.0.1:{port}/slack/events", data="{}")
            assert health.status == 200 and events.status in (404, 405)
    finally:
        stop.set()
        try:
            await asyncio.wait_for(runner, timeout=10)
        finally:
            HANDLED.detach()
