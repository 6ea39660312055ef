"""A pending approval survives the end of the `bot slack` process that asked (SIGTERM, and
kill -9): the process started after it takes the requester's click and runs the tool once, in
the thread it was asked in. Real processes over signed HTTP, FakeSlack, FakeOpenAI and a real
MCP server that records its calls."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest

from testkit.fakes.mcp_server import FakeMcp
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from testkit.fakes.slack_api import FakeSlack
from testkit.slack_harness import SECRET, event_body, new_ts, signed_headers

CREATE = ("tix_create_ticket", {"title": "printer on fire", "priority": 1})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Bot:
    """One `bot slack` process; its log (JSON lines) in a file."""

    def __init__(self, env: dict[str, str], workdir: Path, name: str) -> None:
        self.env, self.workdir = env, workdir
        self.port = _free_port()
        self.log = workdir / f"{name}.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, http: aiohttp.ClientSession) -> Bot:
        with self.log.open("wb") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bot",
                "slack",
                cwd=self.workdir,
                env={**self.env, "BOT_HTTP_PORT": str(self.port)},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )
        for _ in range(600):
            assert self.proc.returncode is None, self.log.read_text()[-3000:]
            try:
                async with http.get(f"http://127.0.0.1:{self.port}/healthz") as resp:
                    if resp.status == 200:
                        return self
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        raise AssertionError("bot slack did not start:\n" + self.log.read_text()[-3000:])

    def lines(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            if name in line:
                try:
                    found.append(json.loads(line))
                except ValueError:
                    found.append({"raw": line})
        return found

    async def post(self, http: aiohttp.ClientSession, body: str, content_type: str) -> int:
        headers = {"Content-Type": content_type, **signed_headers(body, secret=SECRET)}
        url = f"http://127.0.0.1:{self.port}/slack/events"
        async with http.post(url, data=body.encode(), headers=headers) as resp:
            await resp.read()
            return resp.status

    async def stop(self, sig: int) -> None:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        await asyncio.wait_for(self.proc.wait(), timeout=60)
        assert "Traceback" not in self.log.read_text(errors="replace")


async def _until(predicate: Any, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
async def test_a_pending_approval_survives_the_process_that_asked(tmp_path: Path, how: int) -> None:
    fake = await FakeSlack().start()
    try:
        async with FakeMcp() as mcp, FakeOpenAI() as openai, aiohttp.ClientSession() as http:
            env = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("OPENAI_", "BOT_", "MONGODB", "REDIS", "SLACK_"))
            }
            env.update(
                {
                    "PYTHONUNBUFFERED": "1",
                    "BOT_DATA_DIR": str(tmp_path / "data"),
                    "BOT_HTTP_HOST": "127.0.0.1",
                    "BOT_LOG_LEVEL": "INFO",
                    "BOT_EMBEDDING_MODEL": "none",
                    "BOT_RATE_USER": "off",
                    "BOT_RATE_TEAM": "off",
                    "OPENAI_API_KEY": "sk-test",
                    "OPENAI_BASE_URL": openai.base_url,
                    "SLACK_BOT_TOKEN": fake.bot_token,
                    "SLACK_SIGNING_SECRET": SECRET,
                    "SLACK_API_URL": fake.api_url,
                }
            )
            first = await Bot(env, tmp_path, "first").start(http)
            url = fake.response_url()
            form = {
                "team_id": fake.team_id,
                "channel_id": "C1",
                "user_id": "UADMIN",
                "command": "/tools",
                "text": f"install mcp name=tix url={mcp.url}",
                "response_url": url,
                "trigger_id": "1.2.3",
            }
            assert (
                await first.post(http, urlencode(form), "application/x-www-form-urlencoded") == 200
            )
            await _until(lambda: bool(fake.answers_at(url)))
            assert "as `tix`" in fake.answers_at(url)[0]["text"]

            openai.push(tool_calls([CREATE]), text("Ticket T-101 is open."))
            ts = new_ts()
            mention = {
                "type": "app_mention",
                "user": "U1",
                "text": f"<@{fake.bot_user_id}> open a ticket: printer on fire",
                "ts": ts,
                "channel": "C1",
            }
            body = json.dumps(event_body(mention, team=fake.team_id))
            assert await first.post(http, body, "application/json") == 200
            await _until(lambda: bool(first.lines('"slack_event_handled"')))
            (request,) = fake.ephemerals_for("U1")
            assert mcp.created == []
            await first.stop(how)

            second = await Bot(env, tmp_path, "second").start(http)
            try:
                payload = fake.button_click(request, "bot_approval_approve")
                form_body = urlencode({"payload": json.dumps(payload)})
                for _ in range(2):  # the click, and Slack delivering it again
                    status = await second.post(http, form_body, "application/x-www-form-urlencoded")
                    assert status == 200
                await _until(lambda: len(second.lines('"slack_approval_handled"')) >= 2)
                replies = [m.text for m in fake.bot_messages("C1", ts)]
                assert replies[-1] == "Ticket T-101 is open.", replies
                assert mcp.created == [{"title": "printer on fire", "priority": 1}]  # once
                assert request.text.startswith("Approved")
                assert len(fake.ephemerals) == 1  # the restart asked nothing again
            finally:
                await second.stop(signal.SIGTERM)
    finally:
        await fake.close()
