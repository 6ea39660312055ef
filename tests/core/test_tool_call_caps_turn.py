"""A model reply with 2,000 tool calls: ten run, the conversation stays within the budget.

Token counts are checked twice: with the bot's counter and with tiktoken called directly on the
request the model server received (content, names and arguments only, a lower bound that needs
no knowledge of the counter under test).
"""

from __future__ import annotations

import json
from typing import Any

import tiktoken

from bot.keys import PersonKey
from testkit.fakes.openai_server import FakeOpenAI, Step, default_brain, text, tool_calls
from tests.helpers import say

BUDGET = 8000


def chat_brain(rounds: list[Step], final: str) -> Any:
    """The turn's own chat requests (tools offered) get `rounds` then `final`; the bot's
    internal model calls (fact reconciliation, summaries) get the default brain."""
    steps = list(rounds)

    def brain(request: dict[str, Any]) -> Step:
        if not request.get("tools") or request.get("response_format"):
            return default_brain(request)
        return steps.pop(0) if steps else text(final)

    return brain


def chat_requests(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [r for r in fake.requests if r.get("tools") and not r.get("response_format")]


def independent_tokens(request: dict[str, Any]) -> int:
    enc = tiktoken.get_encoding("o200k_base")
    total = 0
    for message in request["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            total += len(enc.encode(content))
        for call in message.get("tool_calls") or []:
            total += len(enc.encode(call["function"]["name"]))
            total += len(enc.encode(call["function"]["arguments"]))
    total += len(enc.encode(json.dumps(request.get("tools") or [])))
    return total + int(request.get("max_tokens") or request.get("max_completion_tokens") or 0)


async def test_two_thousand_tool_calls_in_one_reply(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app(bot_context_tokens=BUDGET)
    facts = [("remember", {"fact": f"Fact number {i} " + "detail " * 30}) for i in range(2000)]
    fake_openai.brain = chat_brain([tool_calls(facts)], "done")
    sink = await say(app, "remember everything", user="U1")
    assert sink.final == "done" and not sink.error
    stored = await app.store.list_facts(PersonKey("test", "T1", "U1"))
    assert 1 <= len(stored) <= 10  # the store's side (similar facts may be merged)

    second = chat_requests(fake_openai)[1]
    [assistant] = [m for m in second["messages"] if m.get("tool_calls")]
    ids = [c["id"] for c in assistant["tool_calls"]]
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ids  # one result per call, in order
    assert len(ids) == 13  # ten run, three refused shown, the rest left out
    refused = [json.loads(m["content"]) for m in results[10:]]
    assert all(r["error"]["type"] == "limit_exceeded" for r in refused)
    assert independent_tokens(second) <= BUDGET
    counter = app.counter
    assert counter.messages(second["messages"]) + counter.tools(second.get("tools") or []) <= BUDGET


async def test_the_turn_cap_holds_across_rounds(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app(bot_max_tool_calls_per_round=10, bot_max_tool_calls=30)
    rounds = [
        tool_calls(
            [
                ("remember", {"fact": f"Fact number {r * 10 + i} " + "detail " * 30})
                for i in range(10)
            ]
        )
        for r in range(4)
    ]
    fake_openai.brain = chat_brain(rounds, "enough")
    sink = await say(app, "please remember all of these facts", user="U2")
    assert sink.final == "enough"
    fifth = chat_requests(fake_openai)[4]
    last_call = [m for m in fifth["messages"] if m.get("tool_calls")][-1]
    assert len(last_call["tool_calls"]) == 3  # none may run: three refused shown, seven left out
    last_results = [m for m in fifth["messages"] if m["role"] == "tool"][-3:]
    assert all(json.loads(m["content"])["error"]["type"] == "limit_exceeded" for m in last_results)
    ran = [m for m in fifth["messages"] if m["role"] == "tool" and json.loads(m["content"])["ok"]]
    assert len(ran) == 30  # what the model server received: thirty results, then refusals


async def test_huge_tool_results_fit_a_small_budget(make_app: Any, fake_openai: FakeOpenAI) -> None:
    """A small budget, ten huge results: every request still fits."""
    app = await make_app(bot_context_tokens=1536)
    facts = [("remember", {"fact": f"Fact {i} " + "lorem " * 200}) for i in range(12)]
    fake_openai.brain = chat_brain([tool_calls(facts)], "ok")
    sink = await say(app, "remember", user="U3")
    assert sink.final == "ok"
    for request in chat_requests(fake_openai):
        assert independent_tokens(request) <= 1536
