"""FakeOpenAI itself: its default brain, its thread mode (for sync/subprocess tests), its CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from testkit.fakes.openai_server import (
    FakeOpenAI,
    Reply,
    Step,
    default_brain,
    remembered_fact,
    text,
)

ROOT = Path(__file__).resolve().parents[2]
REMEMBER_TOOL = {
    "type": "function",
    "function": {
        "name": "remember",
        "parameters": {"type": "object", "properties": {"fact": {"type": "string"}}},
    },
}


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        ("Please remember that I'm allergic to peanuts.", "I'm allergic to peanuts"),
        ("remember: my timezone is CET", "my timezone is CET"),
        ("Can you Remember I prefer short answers!", "I prefer short answers"),
        ("记住我对花生过敏。", "我对花生过敏"),
        ("请记住：我喜欢喝茶", "我喜欢喝茶"),
        ("what do you remember", None),
        ("hello", None),
    ],
)
def test_remembered_fact(said: str, fact: str | None) -> None:
    assert remembered_fact(said) == fact


def _reply(step: Step) -> Reply:
    assert isinstance(step, Reply), step
    return step


def _request(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": messages, **extra}


def test_brain_calls_remember_then_confirms() -> None:
    asked = [{"role": "user", "content": "please remember that I like green tea"}]
    step = _reply(default_brain(_request(asked, tools=[REMEMBER_TOOL])))
    assert step == default_brain(_request(asked, tools=[REMEMBER_TOOL]))  # deterministic
    assert step.calls == (("remember", '{"fact": "I like green tea"}'),)

    after: list[dict[str, Any]] = [
        *asked,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "remember", "arguments": '{"fact": "I like green tea"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"ok": true, "data": "saved"}'},
    ]
    forced = _reply(default_brain(_request(asked, tools=[REMEMBER_TOOL], tool_choice="none")))
    assert forced.content.startswith("ok: ") and not forced.calls
    confirm = _reply(default_brain(_request(after, tools=[REMEMBER_TOOL])))
    assert confirm.content == "Got it — I'll remember that."
    assert not confirm.calls


def test_brain_without_tools_just_echoes() -> None:
    asked = [{"role": "user", "content": "remember that I like tea"}]
    assert _reply(default_brain(_request(asked))).content == "ok: remember that I like tea"
    long = [{"role": "system", "content": "be nice"}, {"role": "user", "content": "x" * 100}]
    assert _reply(default_brain(_request(long))).content == "ok: " + "x" * 60


def test_brain_reports_other_tool_results() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "where is order #W1?"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_order_status"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true, "data": "shipped"}'},
    ]
    reply = _reply(default_brain(_request(messages, tools=[REMEMBER_TOOL]))).content
    assert reply.startswith("Here's what I found:") and "shipped" in reply


def test_brain_structured_output() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Summarise."},
        {"role": "user", "content": "I moved to Berlin."},
        {"role": "assistant", "content": "Nice, Berlin is great."},
    ]
    schema = {
        "type": "object",
        "properties": {
            "summary": {"type": "string"},
            "facts": {"type": "array", "items": {"type": "string"}},
            "memories": {"type": "array", "items": {"type": "object"}},
            "confidence": {"type": "number"},
        },
        "required": ["summary", "facts", "memories", "confidence"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}}
    out = json.loads(_reply(default_brain(_request(messages, response_format=fmt))).content)
    assert out == {
        "summary": "I moved to Berlin. Nice, Berlin is great.",
        "facts": [],
        "memories": [],
        "confidence": 0,
    }
    plain = _reply(default_brain(_request(messages, response_format={"type": "json_object"})))
    assert json.loads(plain.content) == {"summary": out["summary"]}


async def test_brain_is_overridable_and_may_be_async(make_client: Any, fake: FakeOpenAI) -> None:
    async def brain(request: dict[str, Any]) -> Any:
        return text(f"{len(request['messages'])} messages")

    fake.brain = brain
    response = await make_client().complete([{"role": "user", "content": "hi"}])
    assert response.content == "1 messages"


async def test_latency_is_added(make_client: Any, fake: FakeOpenAI) -> None:
    fake.latency = 0.2
    response = await make_client().complete([{"role": "user", "content": "hi"}])
    assert response.duration_ms >= 200


def test_thread_mode_serves_sync_clients() -> None:
    with FakeOpenAI() as fake:
        fake.push(text("from a thread"))
        sync = openai.OpenAI(api_key="k", base_url=fake.base_url, max_retries=0)
        reply = sync.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content == "from a thread"
        chunks = sync.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "ok: hi"
        assert fake.requests[0]["messages"][0]["content"] == "hi"
        sync.close()


def test_start_in_thread_and_stop() -> None:
    fake = FakeOpenAI().start_in_thread()
    try:
        assert fake.base_url.startswith("http://127.0.0.1:")
    finally:
        fake.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_standalone_cli() -> None:
    """`python -m testkit.fakes.openai_server --port N` serves until terminated."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "testkit.fakes.openai_server", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert f"OPENAI_BASE_URL=http://127.0.0.1:{port}/v1" in proc.stdout.readline()
        with openai.OpenAI(
            api_key="k", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0
        ) as sync:
            assert [m.id for m in sync.models.list()]
            reply = sync.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
            assert reply.choices[0].message.content == "ok: hi"
    finally:
        proc.terminate()
        proc.wait(5)
