"""The executor runs at most `max_calls_per_round` calls of a response and `max_calls_per_turn`
per turn; every call past the cap gets a `limit_exceeded` error record and nothing runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated

from pydantic import Field

from tools.declare import tool
from tools.executor import ExecutorConfig, ToolExecutor
from tools.registry import ToolRegistry
from tools.types import ToolCallRecord, ToolCallRequest, ToolContext

MakeExecutor = Callable[..., ToolExecutor]
RAN: list[str] = []


@tool(description="Geocode a city (counts its calls).")
async def geocode(city: Annotated[str, Field(description="City.")]) -> dict[str, str]:
    RAN.append(city)
    return {"city": city}


def calls(n: int) -> list[ToolCallRequest]:
    return [
        ToolCallRequest(id=f"call_{i}", name="geocode", arguments=json.dumps({"city": f"c{i}"}))
        for i in range(n)
    ]


async def test_two_thousand_calls_run_ten(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    RAN.clear()
    records = await make_executor().execute(calls(2000), ctx, ToolRegistry([geocode]))
    assert len(RAN) == 10 and RAN == [f"c{i}" for i in range(10)]  # the tool's own count
    assert [r.tool_call_id for r in records] == [f"call_{i}" for i in range(2000)]
    assert [r.outcome for r in records[:10]] == ["ok"] * 10
    refused = records[10:]
    assert {r.outcome for r in refused} == {"limit_exceeded"}
    error = json.loads(refused[0].content)
    assert error["ok"] is False and error["error"]["type"] == "limit_exceeded"
    assert "at most 10 per response and 30 per turn" in error["error"]["message"]


async def test_the_turn_cap_counts_earlier_rounds(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    RAN.clear()
    executor = make_executor(max_calls_per_round=10, max_calls_per_turn=30)
    registry = ToolRegistry([geocode])
    records = await executor.execute(calls(8), ctx, registry, prior_calls=25)
    assert len(RAN) == 5
    assert [r.outcome for r in records] == ["ok"] * 5 + ["limit_exceeded"] * 3
    none = await executor.execute(calls(2), ctx, registry, prior_calls=30)
    assert len(RAN) == 5 and {r.outcome for r in none} == {"limit_exceeded"}


async def test_refused_calls_are_not_recorded_as_run(ctx: ToolContext) -> None:
    recorded: list[ToolCallRecord] = []

    async def on_record(record: ToolCallRecord, _ctx: ToolContext) -> None:
        recorded.append(record)

    executor = ToolExecutor(ExecutorConfig(max_calls_per_round=2), on_record=on_record)
    await executor.execute(calls(50), ctx, ToolRegistry([geocode]))
    assert [r.outcome for r in recorded] == ["ok", "ok"]


def test_allowance() -> None:
    cfg = ExecutorConfig(max_calls_per_round=10, max_calls_per_turn=30)
    assert [cfg.allowance(n) for n in (0, 20, 25, 30, 40)] == [10, 10, 5, 0, 0]
