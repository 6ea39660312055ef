"""ModelClient against FakeOpenAI through the real `openai` SDK (its retries, SSE, errors)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from bot.model import ModelClient, ModelError, ModelResponse, Usage, _StreamAccumulator
from testkit.fakes.openai_server import (
    FakeOpenAI,
    disconnect,
    hang,
    malformed_json_body,
    reset,
    status,
    text,
    tool_calls,
)

USER = [{"role": "user", "content": "hello there"}]
REMEMBER_TOOL = {
    "type": "function",
    "function": {
        "name": "remember",
        "description": "Store a fact about the speaker.",
        "parameters": {
            "type": "object",
            "properties": {"fact": {"type": "string"}},
            "required": ["fact"],
            "additionalProperties": False,
        },
    },
}
Collect = tuple[list[str], Callable[[str], Awaitable[None]]]
MakeClient = Callable[..., ModelClient]


async def test_plain_reply(fake: FakeOpenAI, make_client: MakeClient) -> None:
    fake.push(text("Hi! How can I help?"))
    response = await make_client().complete(USER)

    assert isinstance(response, ModelResponse)
    assert response.content == "Hi! How can I help?"
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert response.model == "fake-model"
    assert response.duration_ms > 0
    sent = fake.last_request
    assert sent["messages"] == USER
    assert sent["model"] == "fake-model"
    assert "stream" not in sent


async def test_no_tools_key_when_there_are_none(fake: FakeOpenAI, make_client: MakeClient) -> None:
    client = make_client()
    await client.complete(USER)
    await client.complete(USER, tools=[])
    await client.complete(USER, tools=[REMEMBER_TOOL])
    assert "tools" not in fake.requests[0]
    assert "tools" not in fake.requests[1]
    assert fake.requests[2]["tools"] == [REMEMBER_TOOL]


async def test_tool_choice_only_with_tools(fake: FakeOpenAI, make_client: MakeClient) -> None:
    client = make_client()
    await client.complete(USER, tools=[REMEMBER_TOOL], tool_choice="none")
    assert fake.last_request["tool_choice"] == "none"
    await client.complete(USER, tools=None, tool_choice="none")
    assert "tool_choice" not in fake.last_request


async def test_optional_parameters_are_passed_only_when_given(
    fake: FakeOpenAI, make_client: MakeClient
) -> None:
    fmt = {"type": "json_object"}
    await make_client().complete(USER, response_format=fmt, max_tokens=50, temperature=0.2)
    sent = fake.last_request
    assert sent["response_format"] == fmt
    assert sent["max_tokens"] == 50  # a compatible server: the widely understood name
    assert sent["temperature"] == 0.2
    await make_client().complete(USER)
    assert not {"response_format", "max_tokens", "temperature"} & set(fake.last_request)


async def test_streaming_reply_calls_on_delta(
    fake: FakeOpenAI, make_client: MakeClient, collect: Collect
) -> None:
    chunks, on_delta = collect
    reply = "Streaming works, chunk by chunk, across several SSE events."
    fake.push(text(reply))
    response = await make_client().complete(USER, on_delta=on_delta)

    assert len(chunks) > 3
    assert "".join(chunks) == reply == response.content
    assert response.finish_reason == "stop"
    assert response.usage is not None and response.usage.total_tokens > 0
    sent = fake.last_request
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}


async def test_streamed_tool_calls_are_assembled(
    fake: FakeOpenAI, make_client: MakeClient, collect: Collect
) -> None:
    chunks, on_delta = collect
    fake.chunk_size = 3  # arguments split across many deltas
    args_ok = '{"fact": "I am allergic to peanuts"}'
    args_broken = '{"location": "Paris", "unit": '  # malformed JSON stays raw
    fake.push(
        tool_calls(
            [("remember", args_ok), ("get_current_weather", args_broken)],
            content="Let me do that.",
        )
    )
    response = await make_client().complete(USER, tools=[REMEMBER_TOOL], on_delta=on_delta)

    assert "".join(chunks) == "Let me do that." == response.content
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("remember", args_ok),
        ("get_current_weather", args_broken),
    ]
    ids = [c.id for c in response.tool_calls]
    assert all(ids) and len(set(ids)) == 2
    assert response.finish_reason == "tool_calls"


async def test_non_streamed_tool_calls(fake: FakeOpenAI, make_client: MakeClient) -> None:
    fake.push(tool_calls([("remember", {"fact": "likes tea"}), ("remember", "not json")]))
    response = await make_client().complete(USER, tools=[REMEMBER_TOOL])
    assert [c.arguments for c in response.tool_calls] == ['{"fact": "likes tea"}', "not json"]
    assert response.content == ""
    assert response.finish_reason == "tool_calls"


async def test_two_rate_limits_then_success(fake: FakeOpenAI, make_client: MakeClient) -> None:
    fake.push(status(429, retry_after_ms=50), status(429, retry_after=1), text("finally"))
    started = time.monotonic()
    response = await make_client(max_retries=3).complete(USER)

    assert response.content == "finally"
    assert len(fake.requests) == 3
    # The SDK honoured the servers' delays (50 ms, then 1 s) rather than its own backoff.
    assert 1.0 <= time.monotonic() - started < 3.0
    assert [h.get("x-stainless-retry-count") for h in fake.request_headers] == ["0", "1", "2"]


async def test_rate_limit_that_outlasts_retries(fake: FakeOpenAI, make_client: MakeClient) -> None:
    fake.push(*[status(429, retry_after_ms=10)] * 3)
    with pytest.raises(ModelError) as caught:
        await make_client(max_retries=2).complete(USER)
    assert caught.value.kind == "rate_limited"
    assert "too many requests" in caught.value.user_message
    assert len(fake.requests) == 3


async def test_persistent_500_is_unavailable(fake: FakeOpenAI, make_client: MakeClient) -> None:
    fake.push(*[status(500, retry_after_ms=10)] * 5)
    with pytest.raises(ModelError) as caught:
        await make_client(max_retries=2).complete(USER)
    assert caught.value.kind == "unavailable"
    assert len(fake.requests) == 3  # one try + two retries
    assert len(fake.script) == 2


async def test_500_without_retry_headers_uses_sdk_backoff(
    fake: FakeOpenAI, make_client: MakeClient
) -> None:
    fake.push(status(503), text("back"))
    started = time.monotonic()
    response = await make_client(max_retries=1).complete(USER)
    assert response.content == "back"
    # First backoff step is 0.5 s less up to 25 % jitter.
    assert 0.3 <= time.monotonic() - started < 2.0


async def test_hang_becomes_timeout(fake: FakeOpenAI, make_client: MakeClient) -> None:
    fake.push(hang(10), hang(10))
    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        await make_client(timeout=0.3, max_retries=0).complete(USER)
    assert caught.value.kind == "timeout"
    assert time.monotonic() - started < 2.0
    assert "too long" in caught.value.user_message


async def test_stream_that_stalls_midway_becomes_timeout(
    fake: FakeOpenAI, make_client: MakeClient, collect: Collect
) -> None:
    """The timeout also bounds the silence between stream chunks (no retry once streaming)."""
    _, on_delta = collect
    fake.push(text("this stream stops after its first chunk", stall=10))
    with pytest.raises(ModelError) as caught:
        await make_client(timeout=0.3).complete(USER, on_delta=on_delta)
    assert caught.value.kind == "timeout"
    assert len(fake.requests) == 1


async def test_hang_then_answer_is_retried(fake: FakeOpenAI, make_client: MakeClient) -> None:
    fake.push(hang(10), text("after the hang"))
    response = await make_client(timeout=0.3, max_retries=1).complete(USER)
    assert response.content == "after the hang"


@pytest.mark.parametrize("streamed", [False, True])
async def test_broken_json_body_is_bad_response(
    fake: FakeOpenAI, make_client: MakeClient, collect: Collect, streamed: bool
) -> None:
    _, on_delta = collect
    fake.push(malformed_json_body())
    with pytest.raises(ModelError) as caught:
        await make_client().complete(USER, on_delta=on_delta if streamed else None)
    assert caught.value.kind == "bad_response"
    assert len(fake.requests) == 1  # a 200 is never retried


async def test_stream_without_chunks_is_bad_response(
    fake: FakeOpenAI, make_client: MakeClient, collect: Collect
) -> None:
    """A server that ignores stream=True and answers plain JSON yields no SSE events."""
    _, on_delta = collect
    fake.push(status(200, body={"choices": [{"message": {"content": "hi"}}]}))
    with pytest.raises(ModelError) as caught:
        await make_client().complete(USER, on_delta=on_delta)
    assert caught.value.kind == "bad_response"


@pytest.mark.parametrize(
    "body",
    [{"id": "x", "object": "chat.completion", "choices": []}, {"nothing": "useful"}],
)
async def test_missing_choices_is_bad_response(
    fake: FakeOpenAI, make_client: MakeClient, body: dict[str, Any]
) -> None:
    fake.push(status(200, body=body))
    with pytest.raises(ModelError) as caught:
        await make_client().complete(USER)
    assert caught.value.kind == "bad_response"


async def test_bad_request_is_not_retried(fake: FakeOpenAI, make_client: MakeClient) -> None:
    fake.push(status(400, message="This model's maximum context length is 8192 tokens."))
    with pytest.raises(ModelError) as caught:
        await make_client().complete(USER)
    assert caught.value.kind == "bad_request"
    assert "maximum context length" in caught.value.detail
    assert len(fake.requests) == 1


async def test_connection_refused_is_connection(make_client: MakeClient) -> None:
    client = make_client(base_url="http://127.0.0.1:9/v1", max_retries=0)
    with pytest.raises(ModelError) as caught:
        await client.complete(USER)
    assert caught.value.kind == "connection"


async def test_dropped_connection_is_connection(fake: FakeOpenAI, make_client: MakeClient) -> None:
    fake.push(disconnect())
    with pytest.raises(ModelError) as caught:
        await make_client(max_retries=0).complete(USER)
    assert caught.value.kind == "connection"


async def test_reset_connection_is_connection(fake: FakeOpenAI, make_client: MakeClient) -> None:
    """A TCP RST (not a clean close): the aiohttp transport reports it as a timeout of the SDK's;
    the client reads the cause and says "connection"."""
    fake.push(reset())
    with pytest.raises(ModelError) as caught:
        await make_client(max_retries=0).complete(USER)
    assert caught.value.kind == "connection"
    assert "couldn't reach" in caught.value.user_message


async def test_reset_then_answer_is_retried(fake: FakeOpenAI, make_client: MakeClient) -> None:
    fake.push(reset(), disconnect(), text("third time"))
    response = await make_client(max_retries=2).complete(USER)
    assert response.content == "third time"
    assert len(fake.requests) == 3


async def test_streamed_connection_errors_keep_their_kind(
    fake: FakeOpenAI, make_client: MakeClient, collect: Collect
) -> None:
    """Streamed requests go through the same mapping: refused, reset, and a hang."""
    _, on_delta = collect
    refused = make_client(base_url="http://127.0.0.1:9/v1", max_retries=0)
    fake.push(reset(), hang(10))
    kinds = []
    for client in (refused, make_client(max_retries=0), make_client(timeout=0.3, max_retries=0)):
        with pytest.raises(ModelError) as caught:
            await client.complete(USER, on_delta=on_delta)
        kinds.append(caught.value.kind)
    assert kinds == ["connection", "connection", "timeout"]


def test_the_aiohttp_transport_is_used() -> None:
    """Guard for the CPU figure in bench/bench_slack.py: the SDK's aiohttp transport (the
    `openai[aiohttp]` extra), not its default httpx one."""
    client = ModelClient(api_key="k", base_url="http://127.0.0.1:1/v1", model="m")
    assert type(client._client._client) is openai.DefaultAioHttpClient


async def test_auth_failure_never_leaks_the_key(
    fake: FakeOpenAI, make_client: MakeClient, caplog: pytest.LogCaptureFixture, api_key: str
) -> None:
    caplog.set_level(logging.DEBUG)  # everything: ours, the SDK's, httpx's
    fake.api_key = "sk-the-right-key-000000000000"  # ours is wrong; the 401 echoes it back
    client = make_client()
    with pytest.raises(ModelError) as caught:
        await client.complete(USER)
    err = caught.value
    assert err.kind == "auth"
    assert len(fake.requests) == 1  # 401 is not retried
    assert fake.request_headers[0]["Authorization"] == f"Bearer {api_key}"  # the key was sent
    for rendered in (str(err), repr(err), err.detail, err.user_message):
        assert api_key not in rendered
        assert "sk-" not in rendered
    assert "Incorrect API key" in err.detail
    ok, line = await client.ping()
    assert not ok and api_key not in line
    logged = "\n".join(
        f"{r.getMessage()} {getattr(r, 'fields', '')} {r.exc_text or ''}" for r in caplog.records
    )
    assert api_key not in logged


async def test_user_messages_are_plain_sentences() -> None:
    kinds = [
        "rate_limited",
        "unavailable",
        "timeout",
        "connection",
        "auth",
        "bad_request",
        "bad_response",
    ]
    for kind in kinds:
        message = ModelError(kind, "HTTP 500 internal").user_message  # type: ignore[arg-type]
        assert message.endswith(".") and len(message) < 120
        assert not any(ch.isdigit() for ch in message)
    assert ModelError("rate_limited", "x").user_message == (
        "I'm getting too many requests right now — please try again in a minute."
    )


async def test_usage_is_returned_and_logged(
    fake: FakeOpenAI, make_client: MakeClient, caplog: pytest.LogCaptureFixture, collect: Collect
) -> None:
    caplog.set_level(logging.INFO, logger="bot.model")
    client = make_client()
    fake.push(
        text("counted", usage={"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14})
    )
    response = await client.complete([{"role": "user", "content": "a private message"}])
    assert response.usage == Usage(11, 3, 14)
    _, on_delta = collect
    fake.push(
        text("also counted", usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7})
    )
    streamed = await client.complete(
        [{"role": "user", "content": "a private message"}], on_delta=on_delta
    )
    assert streamed.usage == Usage(5, 2, 7)

    records = [r for r in caplog.records if r.name == "bot.model" and r.msg == "model_call"]
    assert len(records) == 2
    fields = [r.fields for r in records]  # type: ignore[attr-defined]
    assert set(fields[0]) == {
        "model",
        "duration_ms",
        "prompt_tokens",
        "completion_tokens",
        "streamed",
        "tool_calls",
        "outcome",
    }
    assert fields[0]["prompt_tokens"] == 11 and fields[0]["completion_tokens"] == 3
    assert fields[0]["streamed"] is False and fields[1]["streamed"] is True
    assert fields[0]["outcome"] == "ok" and fields[0]["tool_calls"] == 0
    for record in caplog.records:
        assert "private message" not in f"{record.getMessage()} {getattr(record, 'fields', '')}"


async def test_failed_call_is_logged_with_its_kind(
    fake: FakeOpenAI, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.model")
    fake.push(status(401))
    with pytest.raises(ModelError):
        await make_client().complete(USER)
    (record,) = [r for r in caplog.records if r.msg == "model_call"]
    assert record.fields["outcome"] == "auth"  # type: ignore[attr-defined]
    assert record.levelno == logging.WARNING


@pytest.mark.parametrize("mode", ["ignore", "reject"])
async def test_servers_that_ignore_or_reject_stream_options(
    fake: FakeOpenAI, make_client: MakeClient, collect: Collect, mode: str
) -> None:
    chunks, on_delta = collect
    fake.stream_options = mode
    client = make_client()
    response = await client.complete(USER, on_delta=on_delta)
    assert response.content == "ok: hello there" == "".join(chunks)
    assert response.usage is None
    if mode == "reject":  # refused once, then never asked again
        assert [("stream_options" in r) for r in fake.requests] == [True, False]
        await client.complete(USER, on_delta=on_delta)
        assert "stream_options" not in fake.last_request


async def test_on_delta_errors_propagate_unchanged(
    fake: FakeOpenAI, make_client: MakeClient
) -> None:
    async def failing(text: str) -> None:
        raise ValueError("the sink broke")  # not mistaken for a bad model response

    with pytest.raises(ValueError, match="the sink broke"):
        await make_client().complete(USER, on_delta=failing)


async def test_cancellation_is_not_swallowed(fake: FakeOpenAI, make_client: MakeClient) -> None:
    fake.push(hang(10))
    task = asyncio.create_task(make_client().complete(USER))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_ping_lists_models(fake: FakeOpenAI, make_client: MakeClient) -> None:
    ok, line = await make_client().ping()
    assert ok and "fake-model" in line and "\n" not in line
    assert fake.requests == []  # /models only, no tokens spent


async def test_ping_falls_back_to_a_tiny_completion(
    fake: FakeOpenAI, make_client: MakeClient
) -> None:
    fake.models_endpoint = False
    ok, line = await make_client().ping()
    assert ok, line
    assert fake.last_request["max_tokens"] == 1


async def test_ping_never_raises(make_client: MakeClient) -> None:
    ok, line = await make_client(base_url="http://127.0.0.1:9/v1", max_retries=0).ping()
    assert not ok and "127.0.0.1:9" in line


def test_default_endpoint_is_openai() -> None:
    client = ModelClient(api_key="k", base_url=None, model="gpt-4o-mini")
    assert client.endpoint == "https://api.openai.com"
    assert client._is_openai  # so max_tokens goes out as max_completion_tokens


def _chunk(delta: dict[str, Any], finish: str | None = None) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def test_accumulator_handles_servers_reusing_index_zero() -> None:
    """Some compatible servers send every call whole, each at index 0 with its own id."""
    acc = _StreamAccumulator()
    for call_id, name in (("a", "remember"), ("b", "get_current_weather")):
        acc.add(
            _chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": call_id, "function": {"name": name, "arguments": "{}"}}
                    ]
                }
            )
        )
    acc.add(_chunk({}, "tool_calls"))
    result = acc.result("m")
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("a", "remember", "{}"),
        ("b", "get_current_weather", "{}"),
    ]
    assert result.finish_reason == "tool_calls"


def test_sdk_is_the_one_doing_retries() -> None:
    """Guard: our max_retries reaches the SDK client (its backoff, not a hand-rolled one)."""
    client = ModelClient(api_key="k", base_url="http://127.0.0.1:1/v1", model="m", max_retries=5)
    assert isinstance(client._client, openai.AsyncOpenAI)
    assert client._client.max_retries == 5
