"""Per-person OAuth connections: what a sign-in and a connected person's turn cost.

Against the fake protected MCP server and its authorization server (testkit/fakes/oauth_mcp.py)
on loopback, with the real SQLite store and the `mcp` client: `PEOPLE` people each start a
sign-in (discovery from the 401, the team's one registration, PKCE, the sealed pending row),
sign in, and finish it (state taken once, code exchanged, tokens sealed); then each connected
person's turn builds their tools (the per-turn cost: one store read, the cached listing) and
makes one tool call. Prints medians in ms (wall; loopback, so mostly the bot's own work) and the
machine's speed reference (`bench.speed`).

    python -m bench.bench_person_oauth
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx

from bench.speed import reference_ms
from bot.connections.base import Owner
from bot.connections.person_tools import PersonTools
from bot.connections.signin import ServerAuth, SignIns
from bot.secrets import SecretBox
from bot.stores.connections import connections_of
from bot.stores.sqlite import SqliteStore
from testkit.fakes.oauth_mcp import FakeOAuthMcp
from tools.mcp.connection import McpPool
from tools.types import ToolContext

PEOPLE = 20
PUBLIC = "http://127.0.0.1:9"


def _ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.1f}"


async def main() -> None:
    box = SecretBox("a passphrase for the bench only")
    with tempfile.TemporaryDirectory() as tmp:
        store = await SqliteStore.open(Path(tmp) / "bot.db")
        conns = connections_of(store)
        assert conns is not None
        pool = McpPool(connect_timeout=10.0)
        signins = SignIns(conns, box, PUBLIC)
        people = PersonTools(conns, box, pool, PUBLIC)
        start_s: list[float] = []
        finish_s: list[float] = []
        first_s: list[float] = []
        warm_s: list[float] = []
        async with FakeOAuthMcp() as fake, httpx.AsyncClient() as browser:
            logging.getLogger().setLevel(logging.WARNING)  # the SDK's server logs at INFO
            server = ServerAuth(fake.url)
            for i in range(PEOPLE):
                owner = Owner("slack:T1", f"slack:T1:U{i}", "tickets")
                t = time.perf_counter()
                started = await signins.start(owner, server)
                start_s.append(time.perf_counter() - t)
                first = await browser.get(started.authorize)
                login = await browser.get(first.headers["location"] + f"&user=u{i}")
                query = dict(parse_qsl(urlsplit(login.headers["location"]).query))
                t = time.perf_counter()
                await signins.finish(query)
                finish_s.append(time.perf_counter() - t)
            for i in range(PEOPLE):
                owner = Owner("slack:T1", f"slack:T1:U{i}", "tickets")
                ctx = ToolContext("slack:T1:C1:1.1", owner.person, "slack:T1")
                for samples in (first_s, warm_s, warm_s):
                    t = time.perf_counter()
                    tools = await people.tools(owner, "tickets@slack:T1", server, None)
                    samples.append(time.perf_counter() - t)
                whoami = next(t for t in tools if t.name == "tickets_whoami")
                await whoami.fn(whoami.args_model(), ctx)
            assert len(fake.calls) == PEOPLE
        await pool.aclose()
        await store.close()
    print(f"person OAuth, {PEOPLE} people, loopback, median ms:")
    print(f"  sign-in start (401, metadata, registration once, PKCE, sealed row): {_ms(start_s)}")
    print(f"  sign-in finish (state taken, code exchanged, tokens sealed):       {_ms(finish_s)}")
    print(f"  first turn's tools (own session: connect, list):                   {_ms(first_s)}")
    print(f"  each later turn's tools (store read, cached listing):              {_ms(warm_s)}")
    print(f"  speed reference: {reference_ms():.0f} ms (bench.speed; lower is faster)")


if __name__ == "__main__":
    asyncio.run(main())
