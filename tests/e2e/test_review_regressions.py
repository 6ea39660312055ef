"""Regressions found in review (each failed before its fix): tool engine, model client, tokens,
configuration and the console. Subprocess cases run `python -m bot` as a user would."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from aiohttp import web
from pydantic import BaseModel

from bot.model import ModelClient, ModelError
from bot.tokens import TokenCounter
from testkit.fakes.openai_server import FakeOpenAI
from tests.support.shared_data import shared_data_file
from tools import envelope
from tools.declare import tool
from tools.executor import ExecutorConfig, ToolExecutor
from tools.orders_demo import create_app
from tools.registry import ToolRegistry
from tools.types import ToolCallRequest, ToolContext

ROOT = Path(__file__).resolve().parents[2]
CTX = ToolContext("slack:T1:C1:-", "slack:T1:U1", "slack:T1")


def run_bot(
    tmp: Path, *args: str, env: dict[str, str] | None = None, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "BOT_", "REDIS"))}
    base.update({"OPENAI_API_KEY": "x", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    base.update({"BOT_DATA_DIR": str(tmp / "data"), "PYTHONPATH": str(ROOT)})
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        input=stdin,
        capture_output=True,
        env=base,
        cwd=tmp,
        timeout=120,
    )


def one_clean_line(p: subprocess.CompletedProcess[bytes]) -> None:
    err = p.stderr.decode(errors="replace")
    assert "Traceback" not in err, err[-400:]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start_in_thread()
    yield server
    server.stop()


# --- tool engine --------------------------------------------------------------------------


async def test_write_tool_not_repeated_after_timeout() -> None:
    effects = {"n": 0}

    @tool(write=True, timeout=0.05)
    async def place_order(item: str) -> str:
        """Place an order."""
        effects["n"] += 1  # acted ...
        await asyncio.sleep(0.2)  # ... but slow to confirm
        return "ok"

    executor = ToolExecutor(ExecutorConfig(backoff_base=0))
    call = ToolCallRequest("c1", "place_order", '{"item":"mug"}')
    [record] = await executor.execute([call], CTX, ToolRegistry([place_order]))
    assert effects["n"] == 1 and record.outcome == "timeout"
    assert "may or may not" in record.content


class Item(BaseModel):
    sku: str
    qty: int = 1


async def test_nested_unknown_field_is_reported_like_the_schema_says() -> None:
    @tool
    async def add_items(items: list[Item]) -> list[int]:
        """Add items."""
        return [i.qty for i in items]

    assert add_items.parameters["properties"]["items"]["items"]["additionalProperties"] is False
    executor = ToolExecutor(ExecutorConfig(backoff_base=0))
    call = ToolCallRequest("c1", "add_items", '{"items":[{"sku":"A","quantity":5}]}')
    [record] = await executor.execute([call], CTX, ToolRegistry([add_items]))
    assert record.outcome == "bad_arguments"
    assert "items[0].quantity" in json.loads(record.content)["error"]["fields"]


def test_envelope_dict_key_with_a_lone_surrogate() -> None:
    data = envelope.jsonable({"caf\ud83d": 1})
    assert json.loads(envelope.fit(data, 4000)[0])


async def test_orders_demo_non_utf8_auth_header_is_401() -> None:
    runner = web.AppRunner(create_app({"#W1": {"order_id": "#W1"}}, "tok"))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with httpx.AsyncClient() as client:
            resp = await client.get(
                f"http://127.0.0.1:{port}/orders/%23W1", headers={"Authorization": b"Bearer \xff"}
            )
        assert resp.status_code == 401
    finally:
        await runner.cleanup()


# --- model client -------------------------------------------------------------------------


async def _complete(stream: bool, chunks: Any = None, body: Any = None) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        if body is not None:
            return web.json_response(body)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for c in chunks:
            await resp.write(f"data: {json.dumps(c)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    client = ModelClient(api_key="sk-test", base_url=url, model="m", max_retries=0)

    async def sink(_text: str) -> None:
        return None

    try:
        return await client.complete(
            [{"role": "user", "content": "x"}], on_delta=sink if stream else None
        )
    finally:
        await client.close()
        await runner.cleanup()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "x",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


async def test_indexless_fragments_repeating_the_id_form_one_call() -> None:
    start = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_order_status", "arguments": ""},
    }
    chunks = [
        _chunk({"tool_calls": [start]}),
        _chunk({"tool_calls": [{"id": "call_1", "function": {"arguments": '{"order_id":'}}]}),
        _chunk({"tool_calls": [{"id": "call_1", "function": {"arguments": '"#W1"}'}}]}),
        _chunk({}, "tool_calls"),
    ]
    response = await _complete(True, chunks=chunks)
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("get_order_status", '{"order_id":"#W1"}')
    ]


@pytest.mark.parametrize(
    "body",
    [{"choices": {"0": {}}}, {"choices": [{"message": {"role": "assistant", "tool_calls": 5}}]}],
)
async def test_malformed_bodies_are_bad_response(body: Any) -> None:
    with pytest.raises(ModelError) as err:
        await _complete(False, body=body)
    assert err.value.kind == "bad_response"


async def test_non_text_stream_content_is_ignored_not_a_crash() -> None:
    chunks = [
        _chunk({"content": [{"type": "text", "text": "hi"}]}),
        _chunk({"content": "ok"}, "stop"),
    ]
    assert (await _complete(True, chunks=chunks)).content == "ok"


def test_truncate_never_splits_a_character() -> None:
    counter = TokenCounter("gpt-4o-mini")
    text = "记住我喜欢😀🎉👍🏽" * 5
    cuts = [counter.truncate(text, n) for n in range(1, 40)]
    assert all("\ufffd" not in c and text.startswith(c) for c in cuts)


# --- command line -------------------------------------------------------------------------


def test_no_password_from_the_base_url_in_doctor_output(tmp_path: Path) -> None:
    p = run_bot(tmp_path, "doctor", env={"OPENAI_BASE_URL": "http://admin:s3cretpw@127.0.0.1:9/v1"})
    assert b"s3cretpw" not in p.stdout + p.stderr
    assert b"127.0.0.1:9" in p.stdout


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"BOT_LOG_LEVEL": "verbose"}, "BOT_LOG_LEVEL"),
        ({"REDIS_URL": "redis://localhost:abc"}, "REDIS_URL"),
    ],
)
@pytest.mark.parametrize("command", ["doctor", "chat"])
def test_bad_settings_are_one_clean_line(
    tmp_path: Path, env: dict[str, str], name: str, command: str
) -> None:
    p = run_bot(tmp_path, command, env=env, stdin=b"hi\n")
    one_clean_line(p)
    assert p.returncode != 0
    assert name.encode() in p.stderr + p.stdout or b"Redis" in p.stdout


def test_non_utf8_dotenv_is_one_clean_line(tmp_path: Path) -> None:
    (tmp_path / ".env").write_bytes(b"BOT_MODEL=\xff\xfe\n")
    p = run_bot(tmp_path, "doctor")
    one_clean_line(p)
    assert p.returncode == 2 and b".env" in p.stderr


def test_orders_demo_bad_port_is_one_clean_line(tmp_path: Path) -> None:
    orders = shared_data_file("retail/orders.json")
    p = run_bot(tmp_path, "orders-demo", "--data", str(orders), "--port", "70000")
    one_clean_line(p)
    assert p.returncode == 2 and b"port" in p.stderr


@pytest.mark.parametrize("encoding", ["utf-8:strict", ""])  # strict: what en_US.UTF-8 gives
def test_chat_survives_a_non_utf8_line(tmp_path: Path, fake: FakeOpenAI, encoding: str) -> None:
    env = {"OPENAI_BASE_URL": fake.base_url, "PYTHONIOENCODING": encoding}
    p = run_bot(tmp_path, "chat", env=env, stdin=b"one\nlatin1 caf\xe9\nthree\n")
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0 and out.count("ok: ") == 3, (out, p.stderr[-300:])
    assert "went wrong" not in out
    one_clean_line(p)


async def test_null_for_an_optional_parameter_means_its_default() -> None:
    @tool
    async def forecast(location: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
        """Forecast."""
        return f"{location}:{unit}"

    @tool
    async def note(text: str, tag: str | None = "misc") -> str:
        """A note whose tag may be explicitly empty."""
        return f"{text}:{tag}"

    executor = ToolExecutor(ExecutorConfig(backoff_base=0))
    registry = ToolRegistry([forecast, note])
    calls = [
        ToolCallRequest("c1", "forecast", '{"location": "Paris", "unit": null}'),
        ToolCallRequest("c2", "note", '{"text": "hi", "tag": null}'),
        ToolCallRequest("c3", "forecast", '{"location": null}'),
    ]
    first, second, third = await executor.execute(calls, CTX, registry)
    assert json.loads(first.content)["data"] == "Paris:celsius"
    assert json.loads(second.content)["data"] == "hi:None"  # null is a real value there
    assert third.outcome == "bad_arguments"  # a required parameter cannot be null
