"""Every executor rule: classification, coercion, retries, concurrency, idempotency, records."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any, Literal

import httpx
import pytest
from pydantic import Field, field_validator

from tools.declare import tool
from tools.errors import ToolArgumentError, ToolBusinessError, ToolTransientError
from tools.executor import GENERIC_FAILURE, ToolExecutor
from tools.idempotency import MemoryIdempotencyCache
from tools.registry import ToolRegistry
from tools.types import ToolCallRecord, ToolCallRequest, ToolContext

MakeExecutor = Callable[..., ToolExecutor]


def call(name: str, arguments: str = "", cid: str = "call_1") -> ToolCallRequest:
    return ToolCallRequest(id=cid, name=name, arguments=arguments)


def env(record: ToolCallRecord) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(record.content)
    return value


@tool(description="Weather.")
async def weather(
    location: Annotated[str, Field(description="City.")],
    unit: Literal["celsius", "fahrenheit"] = "celsius",
) -> dict[str, str]:
    return {"location": location, "unit": unit}


@tool(description="Types.")
async def types_tool(
    n: int = 0, flag: bool = False, ratio: float = 0.0, label: str = ""
) -> dict[str, Any]:
    return {"n": n, "flag": flag, "ratio": ratio, "label": label}


async def run(
    executor: ToolExecutor, ctx: ToolContext, *calls: ToolCallRequest, tools: Any = ()
) -> list[ToolCallRecord]:
    reg = ToolRegistry([weather, types_tool, *tools])
    return await executor.execute(list(calls), ctx, reg)


# --- unknown tools and argument parsing ------------------------------------------------------


async def test_unknown_tool_names_it_and_lists_the_available(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    [rec] = await run(make_executor(), ctx, call("get_wether", '{"location":"x"}'))
    assert rec.outcome == "unknown_tool"
    err = env(rec)["error"]
    assert err["type"] == "unknown_tool" and err["retryable"] is False
    assert "'get_wether'" in err["message"]
    assert "types_tool, weather" in err["message"]


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ('{"location": "Berlin"', "not valid JSON"),
        ("not json", "not valid JSON"),
        ("[1, 2]", "got an array"),
        ("42", "got a number"),
        ("null", "got null"),
        ('"Berlin"', "got a string"),
        ("[" * 100_000, "not valid JSON"),
    ],
)
async def test_broken_or_non_object_arguments_are_bad_arguments(
    make_executor: MakeExecutor, ctx: ToolContext, arguments: str, reason: str
) -> None:
    [rec] = await run(make_executor(), ctx, call("weather", arguments))
    assert rec.outcome == "bad_arguments"
    assert reason in env(rec)["error"]["message"]
    assert env(rec)["error"]["retryable"] is True


@pytest.mark.parametrize("arguments", ["", "   ", "{}"])
async def test_empty_arguments_mean_an_empty_object(
    make_executor: MakeExecutor, ctx: ToolContext, arguments: str
) -> None:
    [rec] = await run(make_executor(), ctx, call("types_tool", arguments))
    assert rec.outcome == "ok"
    assert env(rec) == {"ok": True, "data": {"n": 0, "flag": False, "ratio": 0.0, "label": ""}}


async def test_double_encoded_arguments_are_accepted(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    [rec] = await run(make_executor(), ctx, call("weather", json.dumps('{"location":"Oslo"}')))
    assert env(rec)["data"]["location"] == "Oslo"


async def test_safe_coercion(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    args = '{"n": "123", "flag": "true", "ratio": "1.5", "label": 42}'
    f = '{"flag": "false"}'
    recs = await run(make_executor(), ctx, call("types_tool", args), call("types_tool", f))
    assert env(recs[0])["data"] == {"n": 123, "flag": True, "ratio": 1.5, "label": "42"}
    assert env(recs[1])["data"]["flag"] is False


async def test_field_level_errors(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    [rec] = await run(make_executor(), ctx, call("weather", '{"unit": "kelvin", "extra_field": 1}'))
    assert rec.outcome == "bad_arguments"
    err = env(rec)["error"]
    assert err["fields"] == {
        "location": "required",
        "unit": "must be one of celsius, fahrenheit",
        "extra_field": "not allowed (known fields: location, unit)",
    }
    for text in ("location: required", "unit: must be one of celsius, fahrenheit"):
        assert text in err["message"]
    assert "weather" in err["message"]


async def test_type_errors_name_the_expected_type(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    args = '{"n": "many", "flag": "perhaps", "ratio": [], "label": {}}'
    [rec] = await run(make_executor(), ctx, call("types_tool", args))
    assert env(rec)["error"]["fields"] == {
        "n": "must be an integer",
        "flag": "must be true or false",
        "ratio": "must be a number",
        "label": "must be a string",
    }


async def test_validation_errors_do_not_echo_values(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    [rec] = await run(make_executor(), ctx, call("types_tool", '{"n": "SECRET-VALUE-123"}'))
    assert rec.outcome == "bad_arguments" and "SECRET-VALUE" not in rec.content


async def test_custom_validator_messages_are_shown(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    from pydantic import BaseModel

    class Args(BaseModel):
        day: str

        @field_validator("day")
        @classmethod
        def _weekday(cls, v: str) -> str:
            if v not in ("mon", "tue"):
                raise ValueError("must be mon or tue")
            return v

    @tool(description="Book.", args=Args)
    async def book(args: Args) -> str:
        return args.day

    [rec] = await run(make_executor(), ctx, call("book", '{"day": "sun"}'), tools=[book])
    assert env(rec)["error"]["fields"] == {"day": "must be mon or tue"}


async def test_tool_argument_error_is_bad_arguments(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    @tool(description="Checks late.")
    async def late_check(date: str) -> str:
        raise ToolArgumentError("date", "must be within the next 7 days")

    [rec] = await run(
        make_executor(), ctx, call("late_check", '{"date": "2001-01-01"}'), tools=[late_check]
    )
    assert rec.outcome == "bad_arguments"
    assert env(rec)["error"]["fields"] == {"date": "must be within the next 7 days"}


# --- failures: business, transient, timeout, unexpected --------------------------------------


async def test_business_errors_are_shown_as_is_and_not_retried(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    attempts = 0

    @tool(description="Find order.")
    async def find(order_id: str) -> None:
        nonlocal attempts
        attempts += 1
        raise ToolBusinessError(f"order {order_id} not found")

    [rec] = await run(make_executor(), ctx, call("find", '{"order_id":"#W1"}'), tools=[find])
    assert rec.outcome == "business_error" and attempts == 1 and rec.attempts == 1
    assert env(rec)["error"] == {
        "type": "business_error",
        "message": "order #W1 not found",
        "retryable": False,
    }


def flaky(failures: int, exc: Callable[[], BaseException]) -> Any:
    state = {"calls": 0}

    @tool(description="Flaky.")
    async def flaky_tool() -> str:
        state["calls"] += 1
        if state["calls"] <= failures:
            raise exc()
        return "fine"

    return flaky_tool, state


def _status_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "http://upstream.test/x")
    response = httpx.Response(status, request=request)
    return httpx.HTTPStatusError(f"HTTP {status}", request=request, response=response)


@pytest.mark.parametrize(
    "exc",
    [
        lambda: ToolTransientError("upstream 503"),
        lambda: httpx.ConnectError("refused"),
        lambda: httpx.ReadTimeout("slow"),
        lambda: _status_error(503),
        lambda: _status_error(429),
        lambda: ConnectionResetError(),
    ],
)
async def test_transient_errors_are_retried_then_succeed(
    make_executor: MakeExecutor, ctx: ToolContext, exc: Callable[[], BaseException]
) -> None:
    t, state = flaky(2, exc)
    [rec] = await run(make_executor(), ctx, call("flaky_tool"), tools=[t])
    assert rec.outcome == "ok" and rec.attempts == 3 and state["calls"] == 3


async def test_transient_errors_give_up_after_the_bound(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    t, state = flaky(100, lambda: ToolTransientError("down: token=abc"))
    [rec] = await run(make_executor(max_retries=2), ctx, call("flaky_tool"), tools=[t])
    assert rec.outcome == "transient_error" and rec.attempts == 3 and state["calls"] == 3
    err = env(rec)["error"]
    assert err["retryable"] is True and "temporarily unavailable, try again later" in err["message"]
    assert "token=abc" not in rec.content


async def test_retries_are_configurable(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    t, state = flaky(100, lambda: ToolTransientError("down"))
    [rec] = await run(make_executor(max_retries=0), ctx, call("flaky_tool"), tools=[t])
    assert rec.attempts == 1 and state["calls"] == 1


async def test_no_retry_starts_after_the_budget(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    @tool(description="Slow.", timeout=0.05)
    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    [rec] = await run(
        make_executor(max_retries=5, retry_budget=0.08), ctx, call("slow"), tools=[slow]
    )
    assert rec.outcome == "timeout" and rec.attempts == 2


async def test_http_4xx_is_not_transient(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    t, state = flaky(100, lambda: _status_error(400))
    [rec] = await run(make_executor(), ctx, call("flaky_tool"), tools=[t])
    assert rec.outcome == "unexpected_error" and state["calls"] == 1


async def test_real_connection_refused_is_transient(
    make_executor: MakeExecutor, ctx: ToolContext, http: httpx.AsyncClient, closed_port_url: str
) -> None:
    @tool(description="Fetch.")
    async def fetch() -> int:
        return (await http.get(closed_port_url)).status_code

    [rec] = await run(make_executor(), ctx, call("fetch"), tools=[fetch])
    assert rec.outcome == "transient_error" and rec.attempts == 3


async def test_per_tool_timeout(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    calls = 0

    @tool(description="Slow.", timeout=0.05)
    async def slow() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(5)
        return "late"

    started = time.perf_counter()
    [rec] = await run(make_executor(max_retries=1), ctx, call("slow"), tools=[slow])
    assert time.perf_counter() - started < 1.0
    assert rec.outcome == "timeout" and rec.attempts == 2 and calls == 2
    err = env(rec)["error"]
    assert err["type"] == "timeout" and err["retryable"] is True
    assert "0.05s" in err["message"] and "try again later" in err["message"]


async def test_unexpected_errors_are_logged_but_hidden(
    make_executor: MakeExecutor, ctx: ToolContext, caplog: pytest.LogCaptureFixture
) -> None:
    calls = 0

    @tool(description="Buggy.")
    async def buggy() -> None:
        nonlocal calls
        calls += 1
        raise KeyError("internal-detail-xyz")

    with caplog.at_level(logging.ERROR, logger="tools.executor"):
        [rec] = await run(make_executor(), ctx, call("buggy"), tools=[buggy])
    assert rec.outcome == "unexpected_error" and calls == 1
    assert env(rec)["error"]["message"] == GENERIC_FAILURE
    assert "internal-detail-xyz" not in rec.content and "Traceback" not in rec.content
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and isinstance(logged[0].exc_info[1], KeyError)  # type: ignore[index]


async def test_odd_return_values_still_give_valid_json(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    @tool(description="Odd.")
    async def odd() -> Any:
        return {"nan": float("nan"), "obj": object(), "set": {1}, 3: "int key"}

    [rec] = await run(make_executor(), ctx, call("odd"), tools=[odd])
    data = env(rec)["data"]
    assert rec.outcome == "ok" and data["nan"] is None and data["set"] == [1] and data["3"]


async def test_chinese_stays_readable(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    [rec] = await run(make_executor(), ctx, call("weather", '{"location": "北京"}'))
    assert '"北京"' in rec.content


async def test_tools_receive_the_context(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    @tool(description="Who.")
    async def who(c: ToolContext) -> str:
        return c.speaker_id

    [rec] = await run(make_executor(), ctx, call("who"), tools=[who])
    assert env(rec)["data"] == ctx.speaker_id


# --- concurrency ------------------------------------------------------------------------------


async def test_calls_run_concurrently_and_keep_request_order(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    entered: list[str] = []
    all_in = asyncio.Event()

    @tool(description="Wait for every call to start, sleep, then echo.")
    async def nap(delay: float, tag: str) -> str:
        entered.append(tag)
        if len(entered) == 5:
            all_in.set()
        await all_in.wait()  # run one at a time, this never returns: the tool times out
        await asyncio.sleep(delay)
        return tag

    calls = [
        call("nap", json.dumps({"delay": 0.1 - i * 0.02, "tag": f"t{i}"}), f"c{i}")
        for i in range(5)
    ]
    recs = await run(make_executor(max_concurrency=8), ctx, *calls, tools=[nap])
    assert all(r.outcome == "ok" for r in recs)
    assert [env(r)["data"] for r in recs] == ["t0", "t1", "t2", "t3", "t4"]
    assert [r.tool_call_id for r in recs] == ["c0", "c1", "c2", "c3", "c4"]


async def test_concurrency_cap(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    running = peak = 0

    @tool(description="Count.")
    async def busy() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1

    recs = await run(make_executor(max_concurrency=2), ctx, *[call("busy")] * 7, tools=[busy])
    assert all(r.outcome == "ok" for r in recs) and peak == 2


# --- write tools and idempotency -------------------------------------------------------------


def counter_tool() -> Any:
    state = {"acted": 0}

    @tool(description="Refund.", write=True)
    async def refund(order_id: str, amount: float) -> dict[str, Any]:
        state["acted"] += 1
        await asyncio.sleep(0.01)
        return {"refund": state["acted"], "order_id": order_id}

    return refund, state


async def test_repeated_write_calls_are_replayed(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    refund, state = counter_tool()
    ex = make_executor()
    [first] = await run(ex, ctx, call("refund", '{"order_id": "#W1", "amount": 5}'), tools=[refund])
    # Same arguments after coercion and key order: replayed, not acted twice.
    [again] = await run(
        ex, ctx, call("refund", '{"amount": "5.0", "order_id": "#W1"}'), tools=[refund]
    )
    assert state["acted"] == 1
    assert not first.replayed and again.replayed and again.outcome == "ok"
    assert again.content == first.content and again.data == first.data
    assert again.call_id != first.call_id
    # Different arguments or another session act again.
    await run(ex, ctx, call("refund", '{"order_id": "#W1", "amount": 6}'), tools=[refund])
    other = ToolContext("another-session", ctx.speaker_id, ctx.team_id)
    await run(ex, other, call("refund", '{"order_id": "#W1", "amount": 5}'), tools=[refund])
    assert state["acted"] == 3


async def test_writes_are_replayed_within_one_request_and_act_again_for_a_new_one(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    """A re-run of the same message (same message id: a crashed turn resumed) replays; the person
    asking again in a new message acts again."""
    refund, state = counter_tool()
    ex = make_executor()
    c = call("refund", '{"order_id": "#W1", "amount": 5}')
    first_ask = replace(ctx, message_id="1700000000.000100", turn_id="t1")
    await run(ex, first_ask, c, tools=[refund])
    [rerun] = await run(ex, replace(first_ask, turn_id="t1"), c, tools=[refund])
    assert state["acted"] == 1 and rerun.replayed
    [asked_again] = await run(
        ex, replace(ctx, message_id="1700000000.000200", turn_id="t2"), c, tools=[refund]
    )
    assert state["acted"] == 2 and not asked_again.replayed


async def test_concurrent_duplicate_writes_act_once(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    refund, state = counter_tool()
    c = call("refund", '{"order_id": "#W1", "amount": 5}')
    recs = await run(make_executor(), ctx, c, c, c, tools=[refund])
    assert state["acted"] == 1
    assert sorted(r.replayed for r in recs) == [False, True, True]
    assert len({r.content for r in recs}) == 1


async def test_replay_window_expires(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    now = [1000.0]
    cache = MemoryIdempotencyCache(clock=lambda: now[0])
    refund, state = counter_tool()
    ex = make_executor(idempotency=cache, idempotency_ttl=600)
    c = call("refund", '{"order_id": "#W1", "amount": 5}')
    await run(ex, ctx, c, tools=[refund])
    now[0] += 599
    await run(ex, ctx, c, tools=[refund])
    assert state["acted"] == 1
    now[0] += 2
    await run(ex, ctx, c, tools=[refund])
    assert state["acted"] == 2


async def test_failed_writes_are_not_cached(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    attempts = 0

    @tool(description="Pay.", write=True)
    async def pay(amount: int) -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ToolBusinessError("card declined")
        return "paid"

    ex = make_executor()
    [a] = await run(ex, ctx, call("pay", '{"amount": 1}'), tools=[pay])
    [b] = await run(ex, ctx, call("pay", '{"amount": 1}'), tools=[pay])
    assert a.outcome == "business_error" and b.outcome == "ok" and not b.replayed


class DictCache:
    """Shaped like the bot's Cache protocol (get_json/set_json with ttl); JSON round trips."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.ttls: list[float] = []

    async def get_json(self, key: str) -> Any | None:
        raw = self.data.get(key)
        return None if raw is None else json.loads(raw)

    async def set_json(self, key: str, value: Any, *, ttl: float) -> None:
        self.ttls.append(ttl)
        self.data[key] = json.dumps(value)

    async def delete(self, key: str) -> None:
        self.data.pop(key, None)


async def test_external_idempotency_cache_is_used(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    cache = DictCache()
    refund, state = counter_tool()
    c = call("refund", '{"order_id": "#W1", "amount": 5}')
    await run(make_executor(idempotency=cache, idempotency_ttl=42), ctx, c, tools=[refund])
    # A second executor (another process) sharing the cache replays too.
    [rec] = await run(make_executor(idempotency=cache), ctx, c, tools=[refund])
    assert state["acted"] == 1 and rec.replayed and cache.ttls[-1] == 42
    assert all(k.startswith("tools:idem:") for k in cache.data)
    assert all("#W1" not in k for k in cache.data)  # keys are hashes, not argument text


async def test_a_write_an_earlier_process_started_and_never_confirmed_is_not_run_again(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    cache = DictCache()
    refund, state = counter_tool()
    c = call("refund", '{"order_id": "#W1", "amount": 5}')

    await run(make_executor(idempotency=cache), ctx, c, tools=[refund])
    (key,) = cache.data  # the call's key; now as a process that died mid-call left it:
    cache.data[key] = json.dumps({"started": True, "call_id": "elsewhere"})
    acted = state["acted"]
    [rec] = await run(make_executor(idempotency=cache), ctx, c, tools=[refund])
    assert state["acted"] == acted  # not acted a second time
    assert rec.outcome == "transient_error"
    assert "may or may not have been done" in json.loads(rec.content)["error"]["message"]


async def test_a_failed_write_leaves_no_marker_behind(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    cache = DictCache()

    @tool(description="Refund.", write=True)
    async def refund(order_id: str) -> dict[str, Any]:
        raise ToolBusinessError("order not found")

    await run(
        make_executor(idempotency=cache), ctx, call("refund", '{"order_id": "x"}'), tools=[refund]
    )
    assert cache.data == {}  # a later call may try again


async def test_a_broken_cache_does_not_break_calls(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    class Broken:
        async def get_json(self, key: str) -> Any | None:
            raise ConnectionError("redis down")

        async def set_json(self, key: str, value: Any, *, ttl: float) -> None:
            raise ConnectionError("redis down")

    refund, _ = counter_tool()
    c = call("refund", '{"order_id": "#W1", "amount": 5}')
    [rec] = await run(make_executor(idempotency=Broken()), ctx, c, tools=[refund])
    assert rec.outcome == "ok"


# --- records and logs ------------------------------------------------------------------------


async def test_records_ids_and_callback(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    seen: list[tuple[ToolCallRecord, ToolContext]] = []

    async def on_record(record: ToolCallRecord, c: ToolContext) -> None:
        seen.append((record, c))

    ex = make_executor(on_record=on_record)
    recs = await run(ex, ctx, call("weather", '{"location":"Rome"}', "m1"), call("nope", "", "m2"))
    assert [r.tool_call_id for r in recs] == ["m1", "m2"]
    assert [r.name for r in recs] == ["weather", "nope"]
    assert all(r.call_id.startswith("tc_") and len(r.call_id) == 15 for r in recs)
    assert len({r.call_id for r in recs}) == 2
    assert recs[0].arguments == '{"location":"Rome"}'
    assert recs[0].data == {"location": "Rome", "unit": "celsius"}
    assert recs[0].duration_ms >= 0 and recs[0].result_size == len(recs[0].content)
    assert sorted(r.call_id for r, _ in seen) == sorted(r.call_id for r in recs)
    assert all(c is ctx for _, c in seen)


async def test_a_failing_callback_does_not_break_calls(
    make_executor: MakeExecutor, ctx: ToolContext
) -> None:
    async def on_record(record: ToolCallRecord, c: ToolContext) -> None:
        raise RuntimeError("store down")

    [rec] = await run(make_executor(on_record=on_record), ctx, call("weather", '{"location":"x"}'))
    assert rec.outcome == "ok"


async def test_one_info_line_per_call_without_values(
    make_executor: MakeExecutor, ctx: ToolContext, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "Sesame-Street-42-private"
    with caplog.at_level(logging.INFO, logger="tools.executor"):
        recs = await run(
            make_executor(),
            ctx,
            call("weather", json.dumps({"location": secret})),
            call("weather", json.dumps({"location": secret, "unit": "kelvin"})),
        )
    lines = [r for r in caplog.records if r.getMessage() == "tool_call"]
    assert len(lines) == 2
    fields = [r.fields for r in lines]  # type: ignore[attr-defined]
    assert {f["call_id"] for f in fields} == {r.call_id for r in recs}
    for f in fields:
        assert set(f) >= {
            "call_id",
            "tool",
            "session",
            "outcome",
            "duration_ms",
            "result_size",
            "attempts",
        }
        assert f["session"] == ctx.session_id and f["tool"] == "weather"
    assert sorted(f["outcome"] for f in fields) == ["bad_arguments", "ok"]
    for r in caplog.records:
        assert secret not in r.getMessage() and secret not in json.dumps(getattr(r, "fields", {}))


async def test_large_results_are_trimmed(make_executor: MakeExecutor, ctx: ToolContext) -> None:
    @tool(description="Big.")
    async def big() -> list[dict[str, Any]]:
        return [{"id": i, "name": f"item {i}"} for i in range(2000)]

    [rec] = await run(make_executor(max_result_chars=1500), ctx, call("big"), tools=[big])
    body = env(rec)
    assert rec.outcome == "ok" and rec.trimmed and len(rec.content) <= 1500
    assert rec.result_size > 1500 and body["truncated"] is True
    assert body["data"][-1].endswith("more items omitted")
    assert len(rec.data) == 2000  # the record keeps the full result for tracing
