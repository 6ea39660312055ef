"""Slack slash-command ack latency when the command's work is slow (issue 20).

`/tools install mcp` probes the MCP server before it answers. Here the server (the test MCP
server behind a layer that delays requests) answers each POST of the probe `--probe` seconds
late (the probe makes two, so it takes about twice that).
Each round posts the signed command to the adapter (the real core on SQLite, the fake Slack,
the fake model: all in this process, as the e2e tests run them) and measures, by wall clock:
the ack (the HTTP answer to the command: Slack needs it within 3 s, and Bolt answers 404
"unhandled request" when its listener has not acked by then) and the answer (in the ack's body,
or the first post to the response_url).

    python bench/bench_slack_command_ack.py --probe 2 --rounds 6
    PYTHONPATH=<another checkout> python <this file>   # the same figures for that code

Only what both the old and the new adapter have is used, so the script runs against either.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # a PYTHONPATH checkout given first wins

from pydantic import SecretStr  # noqa: E402

from bot.app import build_app  # noqa: E402
from bot.config import Settings  # noqa: E402
from testkit.fakes.mcp_server import FakeMcp  # noqa: E402
from testkit.fakes.openai_server import FakeOpenAI  # noqa: E402
from testkit.fakes.slack_api import FakeSlack  # noqa: E402
from testkit.slack_harness import SlackHarness  # noqa: E402


class SlowMcp(FakeMcp):
    """The test MCP server, answering each HTTP request `delay` seconds late."""

    delay = 0.0

    def _asgi(self, mcp: Any) -> Any:
        inner = super()._asgi(mcp)

        async def slow(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope.get("method") == "POST":
                await asyncio.sleep(self.delay)
            await inner(scope, receive, send)

        return slow


async def one_round(h: SlackHarness, mcp: SlowMcp, n: int) -> tuple[float, float, int, bool]:
    url = h.fake.response_url()
    form = {
        "token": "legacy",
        "team_id": h.team,
        "team_domain": "test",
        "channel_id": "C1",
        "channel_name": "general",
        "user_id": "UADMIN",
        "user_name": "admin",
        "command": "/tools",
        "text": f"install mcp name=slow{n} url={mcp.url}",
        "api_app_id": "A0TEST",
        "response_url": url,
        "trigger_id": "1.2.3",
    }
    started = time.perf_counter()
    resp = await h.post_raw(urlencode(form), content_type="application/x-www-form-urlencoded")
    acked = time.perf_counter() - started
    inline = (await resp.read()).strip()
    if not inline:
        while not any(r.get("_url") == url for r in h.fake.responses):
            if time.perf_counter() - started > 60:
                raise TimeoutError("no answer in 60 s")
            await asyncio.sleep(0.005)
    answered = time.perf_counter() - started
    return acked, answered, resp.status, bool(inline)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    logging.disable(logging.WARNING)
    fake = await FakeSlack().start()
    mcp = SlowMcp()
    mcp.delay = args.probe
    await mcp.start()
    async with FakeOpenAI() as model:
        with tempfile.TemporaryDirectory() as data:
            settings = Settings(  # type: ignore[call-arg]
                _env_file=None,
                openai_api_key=SecretStr("sk-test"),
                openai_base_url=model.base_url,
                bot_model="gpt-4o-mini",
                bot_data_dir=Path(data),
                bot_rate_user="off",
                bot_rate_team="off",
            )
            core = await build_app(settings)
            h = await SlackHarness.start(fake, core)
            try:
                rounds = [await one_round(h, mcp, n) for n in range(args.rounds)]
            finally:
                await h.close()
                await core.close()
    await mcp.stop()
    await fake.close()
    acks = [r[0] for r in rounds]
    answers = [r[1] for r in rounds]
    return {
        "probe_seconds": args.probe,
        "rounds": args.rounds,
        "ack_ms_median": round(statistics.median(acks) * 1000, 1),
        "ack_ms_max": round(max(acks) * 1000, 1),
        "answer_ms_median": round(statistics.median(answers) * 1000, 1),
        "statuses": sorted({r[2] for r in rounds}),
        "answered_in_ack": sum(r[3] for r in rounds),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--probe", type=float, default=2.0, help="seconds each MCP request of the probe waits"
    )
    parser.add_argument("--rounds", type=int, default=8)
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
