"""Context assembly: budget, turn boundaries, tool pairing, aged tool results, private turns."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from bot.memory.context import ContextBuilder, MemoryView
from bot.memory.prompts import SYSTEM_PROMPT
from bot.memory.render import compact_tool_result, render_group
from bot.stores.records import Fact, PinnedFact, StoredMessage
from bot.tokens import TokenCounter

COUNTER = TokenCounter("gpt-4o-mini")
NOW = datetime.now(UTC)


def msg(
    seq: int, role: str, content: str = "", *, turn: str, speaker: str = "p:t:u1", **kw: Any
) -> StoredMessage:
    return StoredMessage(
        session="p:t:c:-",
        seq=seq,
        role=role,  # type: ignore[arg-type]
        content=content,
        speaker=speaker,
        turn_id=turn,
        tokens=COUNTER.count(content),
        **kw,
    )


def tool_turn(
    seq: int,
    turn: str,
    *,
    tool: str = "get_order_status",
    result: str = "{}",
    speaker: str = "p:t:u1",
) -> list[StoredMessage]:
    call = {"id": f"call_{turn}", "type": "function", "function": {"name": tool, "arguments": "{}"}}
    return [
        msg(seq, "user", f"question {turn}", turn=turn, speaker=speaker),
        msg(seq + 1, "assistant", "", turn=turn, tool_calls=[call], speaker=speaker),
        msg(
            seq + 2,
            "tool",
            result,
            turn=turn,
            tool_call_id=f"call_{turn}",
            name=tool,
            from_tool=True,
            speaker=speaker,
        ),
        msg(seq + 3, "assistant", f"answer {turn}", turn=turn, speaker=speaker),
    ]


def builder(budget: int = 3000, reply: int = 500) -> ContextBuilder:
    return ContextBuilder(COUNTER, budget=budget, reply_tokens=reply)


def test_order_and_stable_prefix() -> None:
    view = MemoryView(
        speaker_facts=[Fact(id="a1", person="p:t:u1", text="Is vegan.")],
        pinned=[PinnedFact(text="Order #W1 is urgent.", speaker="")],
        summary="They discussed lunch.",
        history=[msg(1, "user", "hi", turn="a"), msg(2, "assistant", "hello", turn="a")],
        speaker="p:t:u1",
    )
    built = builder().build(view, [{"role": "user", "content": "now?"}], tools_tokens=100)
    roles = [m["role"] for m in built.messages]
    assert roles == ["system", "system", "user", "assistant", "user"]
    assert built.messages[0]["content"] == SYSTEM_PROMPT
    note = built.messages[1]["content"]
    assert "Is vegan." in note and "urgent" in note and "lunch" in note


def test_history_fits_budget_and_is_cut_at_turn_boundaries() -> None:
    history: list[StoredMessage] = []
    for i in range(300):
        history += tool_turn(
            i * 4 + 1, f"t{i}", result=json.dumps({"ok": True, "data": {"x": "y" * 50}})
        )
    b = builder(budget=3000, reply=500)
    built = b.build(
        MemoryView(history=history, speaker="p:t:u1"),
        [{"role": "user", "content": "q"}],
        tools_tokens=200,
    )
    assert built.tokens + 500 <= 3000
    assert built.dropped_history > 0
    body = built.messages[1:-1]
    # Every tool message follows the assistant message that asked for it.
    asked: set[str] = set()
    for m in body:
        for c in m.get("tool_calls") or []:
            asked.add(c["id"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in asked
    assert body[0]["role"] == "user"  # starts at a turn boundary


def test_aged_tool_results_are_shrunk_to_key_fields() -> None:
    big = json.dumps(
        {
            "ok": True,
            "data": {
                "status": "delivered",
                "items": [{"n": i, "name": "x" * 80} for i in range(40)],
            },
        }
    )
    history = (
        tool_turn(1, "old", result=big) + tool_turn(5, "mid") + tool_turn(9, "new", result=big)
    )
    built = builder(budget=20000, reply=500).build(
        MemoryView(history=history), [{"role": "user", "content": "q"}], tools_tokens=0
    )
    tools = [m for m in built.messages if m["role"] == "tool"]
    assert len(tools[0]["content"]) < len(big) and "delivered" in tools[0]["content"]
    assert tools[-1]["content"] == big  # fresh turns keep the whole result
    assert json.loads(compact_tool_result(big))["data"]["status"] == "delivered"


def test_unmatched_tool_calls_are_dropped() -> None:
    turn = tool_turn(1, "crash")[:2]  # the process died after asking for the tool
    rendered = render_group(turn)
    assert all(not m.get("tool_calls") for m in rendered)
    assert [m["role"] for m in rendered] == ["user"]


def test_other_peoples_remember_turns_are_left_out() -> None:
    alice = tool_turn(
        1,
        "a",
        tool="remember",
        result='{"ok":true,"data":{"fact":"allergic to nuts"}}',
        speaker="p:t:alice",
    )
    bob = tool_turn(5, "b", speaker="p:t:bob")
    view_for_bob = MemoryView(history=alice + bob, speaker="p:t:bob")
    seen = json.dumps(
        builder().build(view_for_bob, [{"role": "user", "content": "q"}], tools_tokens=0).messages
    )
    assert "nuts" not in seen and "question a" not in seen and "question b" in seen
    view_for_alice = MemoryView(history=alice + bob, speaker="p:t:alice")
    seen = json.dumps(
        builder().build(view_for_alice, [{"role": "user", "content": "q"}], tools_tokens=0).messages
    )
    assert "nuts" in seen


def test_huge_current_turn_is_trimmed_to_fit() -> None:
    current = [
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "word " * 20000},
    ]
    b = builder(budget=3000, reply=500)
    built = b.build(MemoryView(summary="s " * 2000), current, tools_tokens=300)
    assert built.tokens + 500 <= 3000
    assert "trimmed" in built.messages[-1]["content"]


def test_reported_tokens_match_a_full_recount() -> None:
    history: list[StoredMessage] = []
    for i in range(30):
        history += tool_turn(
            i * 4 + 1, f"t{i}", result=json.dumps({"ok": True, "data": {"v": "z" * 900}})
        )
    built = builder(budget=8000, reply=500).build(
        MemoryView(history=history, summary="earlier", speaker="p:t:u1"),
        [{"role": "user", "content": "q"}],
        tools_tokens=0,
    )
    assert built.tokens == COUNTER.messages(built.messages)


def test_a_cut_off_private_turn_of_someone_else_stays_out() -> None:
    alice = tool_turn(
        1,
        "a",
        tool="remember",
        result='{"ok":true,"data":{"fact":"PIN 4711"}}',
        speaker="p:t:alice",
    )
    alice[-1] = alice[-1].model_copy(
        update={"content": "Noted: your PIN is 4711.", "meta": {"private": True}}
    )
    bob = tool_turn(5, "b", speaker="p:t:bob")
    for cut in (2, 3):  # the window starts at the tool result, or at the final reply
        view = MemoryView(history=alice[cut:] + bob, speaker="p:t:bob")
        seen = json.dumps(
            builder().build(view, [{"role": "user", "content": "q"}], tools_tokens=0).messages
        )
        assert "4711" not in seen and "question b" in seen
