"""Property tests: whatever the model sends or a tool returns, the executor answers with a valid
envelope and never raises."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import Field

from tools.declare import tool
from tools.executor import ExecutorConfig, ToolExecutor
from tools.registry import ToolRegistry
from tools.types import ToolCallRequest, ToolContext

OUTCOMES = {
    "ok",
    "unknown_tool",
    "bad_arguments",
    "business_error",
    "transient_error",
    "timeout",
    "unexpected_error",
}

CTX = ToolContext("session", "speaker", "team")
MAX_CHARS = 600

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=10), children, max_size=6)
    ),
    max_leaves=30,
)


@tool(description="Search.")
async def search(
    query: Annotated[str, Field(description="Text.")],
    limit: int = 5,
    exact: bool = False,
    sort: Literal["asc", "desc"] = "asc",
    tags: list[str] | None = None,
) -> dict[str, Any]:
    return {"query": query, "limit": limit, "exact": exact, "sort": sort, "tags": tags}


@tool(description="Record.", write=True)
async def record(value: Any = None) -> Any:
    return value


REGISTRY = ToolRegistry([search, record])
EXECUTOR = ToolExecutor(ExecutorConfig(backoff_base=0.0, max_result_chars=MAX_CHARS))


def check(content: str) -> dict[str, Any]:
    content.encode("utf-8")  # sendable as-is
    env = json.loads(content)
    assert isinstance(env, dict) and isinstance(env["ok"], bool)
    if env["ok"]:
        assert "data" in env
    else:
        err = env["error"]
        assert err["type"] in OUTCOMES - {"ok"}
        assert isinstance(err["message"], str) and isinstance(err["retryable"], bool)
        assert all(isinstance(v, str) for v in err.get("fields", {}).values())
    return env


async def run_one(name: str, arguments: str) -> None:
    [rec] = await EXECUTOR.execute([ToolCallRequest("id", name, arguments)], CTX, REGISTRY)
    assert rec.outcome in OUTCOMES
    env = check(rec.content)
    assert env["ok"] == (rec.outcome == "ok")


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.text())
async def test_random_text_arguments(arguments: str) -> None:
    await run_one("search", arguments)


@FAST
@given(json_values)
async def test_random_json_arguments(value: Any) -> None:
    await run_one("search", json.dumps(value))


@FAST
@given(
    st.dictionaries(st.sampled_from(["query", "limit", "exact", "sort", "tags", "x"]), json_values)
)
async def test_random_objects_with_known_keys(value: dict[str, Any]) -> None:
    await run_one("search", json.dumps(value))


@FAST
@given(st.text(max_size=80), st.text(max_size=40))
async def test_random_tool_names(name: str, arguments: str) -> None:
    await run_one(name, arguments)


@FAST
@given(json_values)
async def test_random_return_values_fit(value: Any) -> None:
    args = json.dumps({"value": value})
    [rec] = await EXECUTOR.execute([ToolCallRequest("id", "record", args)], CTX, REGISTRY)
    assert rec.outcome == "ok"
    env = check(rec.content)
    assert len(rec.content) <= MAX_CHARS or env.get("truncated") is True
    assert rec.trimmed == (env.get("truncated") is True)
