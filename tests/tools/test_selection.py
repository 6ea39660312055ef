"""The right tools per turn: ranking, what is always offered, and the whole flow through the bot
(two MCP servers = 13 tools, over the threshold of 12)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

from bot.core import CommandRequest
from testkit.fakes.mcp_server import FakeMcp
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.helpers import say
from tools.selection import SelectionConfig, ToolSelector, terms


def _schema(name: str, description: str, **params: str) -> dict[str, Any]:
    props = {k: {"type": "string", "description": v} for k, v in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props},
        },
    }


SCHEMAS = [
    _schema("remember", "Store a fact the speaker asked you to remember.", fact="The fact"),
    _schema("get_current_weather", "Current weather for a city.", location="City name"),
    _schema("get_order_status", "Look up an order: status, items, tracking ids.", order_id="Id"),
    _schema("crm_search_contacts", "Find contacts at customer companies.", query="Name"),
    _schema("ops_rollback", "Roll a service back to its previous version.", service="Service"),
    _schema("cal_list_events", "List calendar events (meetings) in a time range.", start="From"),
]


def test_terms_split_names_and_stem() -> None:
    assert terms("searchTickets crm_search_contacts Meetings") == [
        "search",
        "ticket",
        "crm",
        "search",
        "contact",
        "meet",
    ]


async def test_ranking_and_always_included() -> None:
    sel = ToolSelector(SelectionConfig(offer=2))
    chosen = await sel.choose(SCHEMAS, "roll back the checkout service", always={"remember"})
    assert chosen == ["ops_rollback", "remember"] or set(chosen) >= {"ops_rollback", "remember"}
    assert len(chosen) <= 3
    # The conversation so far counts too (a follow-up names nothing).
    follow = await sel.choose(
        SCHEMAS, "and tomorrow?", ["what meetings do I have today?"], always={"remember"}
    )
    assert "cal_list_events" in follow
    # Nothing relevant: only what is always offered.
    assert await sel.choose(SCHEMAS, "hello!", always={"remember"}) == ["remember"]


def test_needed_by_count_or_token_share() -> None:
    sel = ToolSelector(SelectionConfig(max_tools=12, token_share=0.2))
    assert not sel.needed(12, 500, 8000)
    assert sel.needed(13, 500, 8000)
    assert sel.needed(5, 2000, 8000)


class WordVectors:
    """A tiny deterministic embedder (bag of hashed words): what `embed` promises, no model."""

    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        out = []
        for t in texts:
            v = [0.0] * 64
            for w in terms(t.replace("consignment", "order")):  # consignment ~ order
                v[zlib.crc32(w.encode()) % 64] += 1.0  # stable across processes (not hash())
            out.append(v)
        return out


async def test_embedder_is_fused_in_and_cached() -> None:
    emb = WordVectors()
    lexical = await ToolSelector(SelectionConfig(offer=1)).choose(SCHEMAS, "where's my consignment")
    assert "get_order_status" not in lexical
    sel = ToolSelector(SelectionConfig(offer=1), embed=emb.embed)
    assert await sel.choose(SCHEMAS, "where's my consignment") == ["get_order_status"]
    await sel.choose(SCHEMAS, "where's my consignment")
    assert emb.calls == 3  # tool texts embedded once, then one call per query


TOOLS = ("search_tickets", "create_ticket", "slow_report", "explode", "chart", "add_tool")


def cmd(text: str, *, team: str = "T1") -> CommandRequest:
    return CommandRequest("test", team, "C1", "U1", "tools", text, is_platform_admin=True)


def _offered(fake: FakeOpenAI, n: int = -1) -> set[str]:
    return {t["function"]["name"] for t in fake.requests[n].get("tools") or []}


async def test_many_tools_offered_by_relevance_through_the_bot(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    async with FakeMcp() as tix, FakeMcp() as ops:
        for name, server in (("tix", tix), ("ops", ops)):
            assert (await app.handle_command(cmd(f"install mcp name={name} url={server.url}"))).ok
        fake_openai.push(text("let me look"))
        await say(app, "search the support tickets about printers")
        first = _offered(fake_openai)
        installed = {f"{p}_{t}" for p in ("tix", "ops") for t in TOOLS} | {"remember"}
        assert {"tix_search_tickets", "remember"} <= first and len(first) <= 9
        # some installed tools were left out (read-only ones picked: a write after a tool result
        # would need the person's own words, see bot.write_guard)
        missing = sorted(n for n in installed - first if n.endswith(("_chart", "_explode")))
        assert missing
        # The model calls one it was not offered: it runs, and is offered from the next round.
        fake_openai.push(
            tool_calls([("tix_search_tickets", {"query": "printer"})]),
            tool_calls([(missing[0], {"query": "printer"} if "search" in missing[0] else {})]),
            text("Found them."),
        )
        await say(app, "search the support tickets about printers")
        assert missing[0] not in _offered(fake_openai, -3)
        result = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool"][-1]
        assert json.loads(result["content"]).get("error", {}).get("type") != "unknown_tool"
        assert missing[0] in _offered(fake_openai, -1)
        # Next turn, about something else: tools called earlier in the session stay offered.
        fake_openai.push(text("hi"))
        await say(app, "thanks, that's all")
        assert {"tix_search_tickets", missing[0], "remember"} <= _offered(fake_openai)
        # Another place (a new session), same question: only the relevant ones.
        fake_openai.push(text("ok"))
        await say(app, "hello there", channel="C2")
        assert _offered(fake_openai) == {"remember"}


async def test_audit_of_installs_removals_and_breaker_openings(
    make_app: Any, fake_openai: FakeOpenAI, closed_port_url: str
) -> None:
    app = await make_app()
    app.toolboxes.executor.config = type(app.toolboxes.executor.config)(backoff_base=0.0)
    async with FakeMcp(token="audit-secret-1") as tix:
        await app.handle_command(cmd(f"install mcp name=tix url={tix.url} token=audit-secret-1"))
        await app.handle_command(cmd("install weather"))
        await app.handle_command(cmd("remove weather"))
        await app.handle_command(cmd(f"install orders url={closed_port_url}"))
        for _ in range(2):
            fake_openai.push(tool_calls([("get_order_status", {"order_id": "#W1"})]), text("x"))
            await say(app, "where is order #W1")
        await app.toolboxes.drain_audit()
        listed = (await app.handle_command(cmd("list"))).text
    lines = listed.split("Recent changes:")[1].strip().splitlines()
    assert len(lines) == 5
    assert "`tix` (mcp) installed by U1" in lines[0]
    assert "`weather` installed by U1" in lines[1] and "`weather` removed by U1" in lines[2]
    assert "`orders` installed by U1" in lines[3]
    assert "`orders` failing repeatedly" in lines[4]
    assert "audit-secret-1" not in listed
    other = (await app.handle_command(cmd("list", team="T2"))).text
    assert "Recent changes" not in other


async def test_related_words_and_entity_shapes_reach_tools_that_share_no_word() -> None:
    """A request that shares no word with the tool it needs still gets it, through the related
    words (a parcel is an order) and the entities it names (an issue key like the tool's own
    example, an e-mail address for a parameter that takes one)."""
    schemas = [
        *SCHEMAS,
        _schema("tix_get_issue", "Get one issue by key (e.g. OPS-123).", key="Issue key"),
        _schema("ops_service_status", "Health of production services.", service="Service"),
        _schema("ops_list_deployments", "Recent deployments of a service.", service="Service"),
        _schema("ops_get_metrics", "Error rate and latency of a service.", service="Service"),
        _schema("hr_find_employee", "Find an employee: email, phone.", email="Email address"),
    ]
    sel = ToolSelector(SelectionConfig(offer=1))
    assert "get_order_status" in await sel.choose(schemas, "where's my parcel?")
    assert "ops_service_status" in await sel.choose(schemas, "is prod on fire?")
    assert "tix_get_issue" in await sel.choose(schemas, "what's up with OPS-77?")
    assert "hr_find_employee" in await sel.choose(schemas, "who is jo@corp.example")
    # The entity terms stay out of requests that name none.
    assert sel.weights("hello there").keys() == {"hello", "there"}
