"""`bot chat` (a subprocess, as a user runs it) with an MCP server's pack: install, a call that
reaches the server with its token, the result reaching the model, and no token anywhere in the
bot's own output or the model's requests."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from testkit.fakes.mcp_server import FakeMcp
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls

TOKEN = "cli-mcp-token-93b1d2"


async def test_mcp_pack_through_bot_chat(tmp_path: Path) -> None:
    async with FakeMcp(token=TOKEN) as mcp, FakeOpenAI() as fake:
        fake.push(
            tool_calls([("tix_search_tickets", {"query": "vpn", "limit": 2})]),
            text("Two VPN tickets are open."),
        )
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
                "BOT_LOG_LEVEL": "DEBUG",
            }
        )
        lines = [
            f"/tools install mcp name=tix url={mcp.url} token={TOKEN}",
            "/tools",
            "any open VPN tickets?",
        ]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "chat",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=tmp_path,
            env=env,
        )
        out, err = await asyncio.wait_for(
            proc.communicate(("\n".join(lines) + "\n").encode()), timeout=120
        )
        stdout, stderr = out.decode(), err.decode()
        assert proc.returncode == 0, stderr[-2000:]
        assert "Installed the `mcp` tool pack as `tix`" in stdout
        assert "`tix` (mcp)" in stdout and "healthy" in stdout
        assert "Two VPN tickets are open." in stdout
        assert mcp.calls == ["search_tickets"]
        assert all(h.get("authorization") == f"Bearer {TOKEN}" for h in mcp.headers)
        offered = {t["function"]["name"] for t in fake.requests[0]["tools"]}
        assert {"tix_search_tickets", "tix_create_ticket", "remember"} <= offered
        result = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"][-1]
        assert json.loads(result["content"])["data"]["structured"]["total"] == 2
        # The token: sent to the MCP server only. Not in the bot's output or logs (DEBUG), not
        # in anything the model was sent.
        assert TOKEN not in stdout and TOKEN not in stderr
        assert TOKEN not in json.dumps(fake.requests)
        assert "Traceback" not in stderr
