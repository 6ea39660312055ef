"""Per-person tool connections through Slack (signed events to the HTTP endpoint, the local
Web API server, the real core, its durable inbox) against the fake protected MCP server with
its authorization server: two people in one channel each get a private link (a DM from the
app), sign in in their browser, and the callback on the Slack app's own HTTP server (under
BOT_PUBLIC_URL) connects them; each waiting question is then answered in its thread, and each
tool call carries its own person's subject. A replayed callback is refused; a token due for
refresh is refreshed without a new link; `/tools disconnect` and `/memory forget all` take
effect on the next turn. Nothing of a token
or code reaches the model, Slack, the logs or the store file in plain text."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.fakes.oauth_mcp import FakeOAuthMcp
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from testkit.slack_harness import SlackHarness
from tests.slack.conftest import StartHarness

SECRET = "a passphrase for the tests only"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


async def _browse(link: str, user: str, issuer: str) -> tuple[str, httpx.Response]:
    async with httpx.AsyncClient() as http:
        opened = await http.get(link)  # the bot's "Connect" link
        assert opened.status_code == 302, opened.text
        assert opened.headers["location"].startswith(f"{issuer}/authorize?")
        first = await http.get(opened.headers["location"])
        assert first.status_code == 302, first.text
        login = await http.get(first.headers["location"] + f"&user={user}")
        assert login.status_code == 302
        back = login.headers["location"]
        return back, await http.get(back)


def _dm_link(slack: SlackHarness, user: str) -> str:
    dms = slack.fake.calls_to("chat.postMessage", channel=user)
    assert len(dms) == 1, dms
    return next(w for w in str(dms[0].args["text"]).split() if w.startswith("http"))


async def test_two_people_connect_through_slack(
    start_harness: StartHarness,
    make_app: Any,
    fake_openai: FakeOpenAI,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    port = _free_port()
    public = f"http://127.0.0.1:{port}"
    core = await make_app(bot_public_url=public, bot_secret_key=SECRET)
    slack = await start_harness(core, port=port)
    async with FakeOAuthMcp(access_ttl=4) as fake:  # short-lived: refreshed 2 s before expiry
        done = await slack.ask(
            "/tools", f"install mcp name=tickets url={fake.url} auth=user", user="UADMIN"
        )
        assert "as `tickets`" in done["text"], done

        # Alice asks in the channel: the model needs the server; she gets a DM with the link
        fake_openai.push(tool_calls([("tickets_connect", {})]), text("Please use my DM."))
        ts_a = await slack.mention("what are my tickets?", user="UALICE")
        await slack.wait_done(ts_a, timeout=20)
        assert slack.replies("C1", thread_ts=ts_a) == ["Please use my DM."]
        assert "tickets_whoami" not in _offered(fake_openai.requests[0])
        link_a = _dm_link(slack, "UALICE")
        assert not slack.fake.calls_to("chat.postMessage", channel="UBOB")

        # Bob asks in the same channel: his own link
        fake_openai.push(tool_calls([("tickets_connect", {})]), text("Please use my DM."))
        ts_b = await slack.mention("and mine?", user="UBOB")
        await slack.wait_done(ts_b, timeout=20)
        link_b = _dm_link(slack, "UBOB")
        assert link_a != link_b

        # Alice signs in: the page says connected, her question is answered in its thread
        fake_openai.push(tool_calls([("tickets_my_tickets", {})]), text("2 open, Alice."))
        back_a, page = await _browse(link_a, "alice", fake.issuer)
        assert back_a.startswith(public + "/oauth/callback?")
        assert page.status_code == 200 and "Connected" in page.text
        await slack.wait_replies("C1", ts_a, count=2, timeout=20)
        assert slack.replies("C1", thread_ts=ts_a)[-1] == "2 open, Alice."

        fake_openai.push(tool_calls([("tickets_whoami", {})]), text("You are bob."))
        _back, page = await _browse(link_b, "bob", fake.issuer)
        assert page.status_code == 200
        await slack.wait_replies("C1", ts_b, count=2, timeout=20)
        assert fake.calls == [("alice", "my_tickets"), ("bob", "whoami")]

        # the same callback again: refused, no third answer
        async with httpx.AsyncClient() as http:
            replay = await http.get(back_a)
        assert replay.status_code == 400 and "already used or has expired" in replay.text

        # Alice asks again: no new link, her own account
        fake_openai.push(tool_calls([("tickets_whoami", {})]), text("You are alice."))
        ts_c = await slack.mention("who am I there?", user="UALICE")
        await slack.wait_done(ts_c, timeout=20)
        assert fake.calls[-1] == ("alice", "whoami")
        assert len(slack.fake.calls_to("chat.postMessage", channel="UALICE")) == 1

        # later: her access token is due; it is refreshed, without a new link
        await asyncio.sleep(2.2)
        fake_openai.push(tool_calls([("tickets_whoami", {})]), text("Still alice."))
        ts_d = await slack.mention("and now?", user="UALICE")
        await slack.wait_done(ts_d, timeout=20)
        assert fake.calls[-1] == ("alice", "whoami")
        assert "refresh_token" in fake.server.token_requests
        assert len(slack.fake.calls_to("chat.postMessage", channel="UALICE")) == 1
        assert "replayed refresh token" not in fake.server.refused

        # their own commands: Alice lists and disconnects; Bob forgets everything
        listed = await slack.ask("/tools", "connections", user="UALICE")
        assert listed["response_type"] == "ephemeral" and "`tickets` (connected" in listed["text"]
        gone = await slack.ask("/tools", "disconnect tickets", user="UALICE")
        assert "Disconnected `tickets`" in gone["text"]
        forgot = await slack.ask("/memory", "forget all", user="UBOB")
        assert forgot["response_type"] == "ephemeral"
        for user in ("UALICE", "UBOB"):
            fake_openai.push(text("You would need to connect first."))
            ts = await slack.mention("my tickets?", user=user)
            await slack.wait_done(ts, timeout=20)
            offered = _offered(fake_openai.requests[-1])
            assert "tickets_connect" in offered and "tickets_whoami" not in offered

        issued = fake.server.issued
        await asyncio.sleep(0)  # (everything above finished: each reply was awaited)
    assert len(issued) >= 6
    where = {
        "model": json.dumps(fake_openai.requests),
        "slack": repr(slack.fake.calls),
        "logs": "\n".join(
            r.getMessage() + str(getattr(r, "fields", ""))
            for r in caplog.records
            # the test's browser (plain httpx) is the person's, not the bot's (httpx2)
            if r.name.split(".")[0] not in ("httpx", "httpcore")
        ),
    }
    for name, seen in where.items():
        assert not [s for s in issued if s in seen], name
    await core.close()
    raw = await asyncio.to_thread(
        lambda: b"".join(p.read_bytes() for p in (tmp_path / "data").glob("bot.db*"))
    )
    assert raw and not [s for s in issued if s.encode() in raw]
