"""Approvals before actions, end to end through `bot chat` (a subprocess, as a person runs it)
with the model at FakeOpenAI and a real MCP server that records its calls: a read runs at once;
a write waits and runs once on `/approve`; `/deny` and expiry are told to the model, which
answers; a pending call survives the process ending (clean exit) and a kill -9; `approve=none`
and "always" grants; another person cannot decide it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from testkit.fakes.mcp_server import FakeMcp
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls

ASKED = "I'd like to run `tix_create_ticket`"
CREATE = ("tix_create_ticket", {"title": "printer on fire", "priority": 1})


def _env(tmp_path: Path, fake: FakeOpenAI, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "BOT_", "MONGODB", "REDIS"))
    }
    env.update(
        {
            "BOT_DATA_DIR": str(tmp_path / "data"),
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": fake.base_url,
            "BOT_EMBEDDING_MODEL": "none",
            **extra,
        }
    )
    return env


async def _start(tmp_path: Path, env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    user = () if "--user" in args else ("--user", "ann")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "chat",
        "--channel",
        "C1",
        *user,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )


async def chat(tmp_path: Path, env: dict[str, str], lines: list[str], *args: str) -> str:
    proc = await _start(tmp_path, env, *args)
    out, err = await asyncio.wait_for(
        proc.communicate(("\n".join(lines) + "\n").encode()), timeout=120
    )
    assert proc.returncode == 0, err.decode()[-2000:]
    assert "Traceback" not in err.decode()
    return out.decode()


def install(mcp: FakeMcp) -> str:
    return f"/tools install mcp name=tix url={mcp.url}"


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


async def test_read_runs_at_once_write_waits_and_runs_once_on_approve(tmp_path: Path) -> None:
    async with FakeMcp() as mcp, FakeOpenAI() as fake:
        fake.push(
            tool_calls([("tix_search_tickets", {"query": "printer"})]),
            text("One printer ticket is open."),
            tool_calls([CREATE]),
            text("Ticket T-101 is open."),
        )
        env = _env(tmp_path, fake)
        out = await chat(
            tmp_path,
            env,
            [install(mcp), "any printer tickets?", "open a ticket: printer on fire", "/approve"],
        )
        assert "One printer ticket is open." in out
        assert mcp.calls[0] == "search_tickets"  # the read ran without asking
        assert ASKED in out and "title: printer on fire" in out and "priority: 1" in out
        assert "Approved" in out and "Ticket T-101 is open." in out
        assert mcp.created == [{"title": "printer on fire", "priority": 1}]  # once
        # The model saw the write's real result, tied to its call, then answered.
        assert tool_results(fake.requests[-1])[-1]["ok"] is True
        again = await chat(tmp_path, env, ["/approve"])  # a second answer does nothing more
        assert "Nothing of yours is waiting" in again
        assert len(mcp.created) == 1


async def test_deny_is_told_to_the_model_and_it_answers(tmp_path: Path) -> None:
    async with FakeMcp() as mcp, FakeOpenAI() as fake:
        fake.push(tool_calls([CREATE]), text("OK, I did not open it."))
        env = _env(tmp_path, fake)
        out = await chat(tmp_path, env, [install(mcp), "open a ticket: printer on fire", "/deny"])
        assert ASKED in out and "Denied" in out and "OK, I did not open it." in out
        assert mcp.created == [] and "create_ticket" not in mcp.calls
        (declined,) = tool_results(fake.requests[-1])
        assert declined["error"]["type"] == "declined_by_person"


async def test_a_pending_call_survives_the_process_ending_and_expires(tmp_path: Path) -> None:
    async with FakeMcp() as mcp, FakeOpenAI() as fake:
        fake.push(tool_calls([CREATE]), text("Opened after your OK."))
        env = _env(tmp_path, fake)
        out = await chat(tmp_path, env, [install(mcp), "open a ticket: printer on fire"])
        assert ASKED in out and mcp.created == []
        later = await chat(tmp_path, env, ["/approve"])  # a new process
        assert "Opened after your OK." in later
        assert mcp.created == [{"title": "printer on fire", "priority": 1}]

        fake.push(tool_calls([CREATE]), text("It expired, so nothing was opened."))
        short = _env(tmp_path, fake, BOT_APPROVAL_TTL="1s")
        await chat(tmp_path, short, ["open another: printer on fire"])
        await asyncio.sleep(1.2)
        expired = await chat(tmp_path, short, ["/approve"])
        assert "expired" in expired and "It expired, so nothing was opened." in expired
        assert len(mcp.created) == 1
        (result,) = tool_results(fake.requests[-1])[-1:]
        assert result["error"]["type"] == "approval_expired"


async def test_a_pending_call_survives_kill_9(tmp_path: Path) -> None:
    async with FakeMcp() as mcp, FakeOpenAI() as fake:
        fake.push(tool_calls([CREATE]), text("Opened after the restart."))
        env = _env(tmp_path, fake)
        await chat(tmp_path, env, [install(mcp)])
        proc = await _start(tmp_path, env)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"open a ticket: printer on fire\n")
        await proc.stdin.drain()
        seen = b""
        while ASKED.encode() not in seen:  # the request was shown: the pause is stored
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
            assert line, "bot chat ended before asking"
            seen += line
        proc.kill()
        await proc.wait()
        out = await chat(tmp_path, env, ["/approve"])
        assert "Opened after the restart." in out
        assert mcp.created == [{"title": "printer on fire", "priority": 1}]


async def test_approve_none_always_grants_and_strangers(tmp_path: Path) -> None:
    async with FakeMcp() as mcp, FakeOpenAI() as fake:
        fake.push(
            tool_calls([CREATE]),
            text("Opened."),
            tool_calls([("tix_create_ticket", {"title": "toner low"})]),
            text("Opened again, no need to ask."),
        )
        env = _env(tmp_path, fake)
        out = await chat(tmp_path, env, [install(mcp), "open a ticket: printer on fire"])
        assert ASKED in out
        stranger = await chat(tmp_path, env, ["/approve"], "--user", "bob")
        assert "Nothing of yours is waiting" in stranger and mcp.created == []
        out = await chat(
            tmp_path, env, ["/approve always", "open a ticket: toner low", "/config grants"]
        )
        assert "won't be asked again" in out and "Opened again, no need to ask." in out
        assert out.count(ASKED) == 0
        assert [c["title"] for c in mcp.created] == ["printer on fire", "toner low"]
        assert "`tix_create_ticket` — ann" in out  # the grant, listed
        # Revoked in /config: the next write asks again.
        fake.push(tool_calls([("tix_create_ticket", {"title": "jam"})]))
        out = await chat(
            tmp_path, env, ["/config revoke tix_create_ticket", "open a ticket: jam", "/deny"]
        )
        assert "Revoked 1 grant(s)" in out and ASKED in out
        audit = await chat(tmp_path, env, ["/tools audit"])
        assert "`tix` (mcp) installed by ann" in audit
        first = "`tix_create_ticket` (priority: 1; title: printer on fire) asked by ann in C1"
        assert f"{first}: approved by ann" in audit
        assert "ran: ok" in audit and "title: jam) asked by ann in C1: denied by ann" in audit

        # approve=none: an admin's choice for this channel; the write runs at once.
        fake.push(tool_calls([("tix_create_ticket", {"title": "paper jam"})]), text("Done."))
        out = await chat(
            tmp_path,
            env,
            ["/config set approve=none", "open a ticket: paper jam"],
            "--user",
            "carol",
        )
        assert ASKED not in out and "Done." in out
        assert [c["title"] for c in mcp.created][-1] == "paper jam"
