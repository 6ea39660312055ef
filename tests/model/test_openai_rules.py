"""The fake model server refuses what the real Chat Completions API refuses (through the real
`openai` SDK, so the 400 reaches it exactly as OpenAI's would)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from testkit.fakes.openai_rules import CONVERSATION_RULES, Rejection
from testkit.fakes.openai_server import FakeOpenAI


def _call(call_id: str, name: str = "get_current_weather") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": '{"location": "Oslo"}'},
    }


USER = {"role": "user", "content": "weather in Oslo and Bergen?"}
ASKS_TWO = {"role": "assistant", "content": None, "tool_calls": [_call("call_a"), _call("call_b")]}


def _result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": '{"ok": true}'}


@pytest.fixture
async def client(fake: FakeOpenAI) -> AsyncIterator[openai.AsyncOpenAI]:
    made = openai.AsyncOpenAI(api_key="sk-test", base_url=fake.base_url, max_retries=0)
    yield made
    await made.close()


async def _send(client: openai.AsyncOpenAI, messages: list[dict[str, Any]], **kw: Any) -> Any:
    return await client.chat.completions.create(
        model=kw.pop("model", "gpt-4o-mini"),
        messages=messages,  # type: ignore[arg-type]
        **kw,
    )


async def test_a_well_formed_tool_conversation_is_accepted(
    client: openai.AsyncOpenAI, fake: FakeOpenAI
) -> None:
    done = await _send(client, [USER, ASKS_TWO, _result("call_b"), _result("call_a")])
    assert done.choices[0].message.content
    assert fake.rejections == []


@pytest.mark.parametrize(
    ("messages", "message", "param"),
    [
        pytest.param(
            [USER, _result("call_a")],
            "messages with role 'tool' must be a response to a preceeding message with "
            "'tool_calls'",
            "messages.[1].role",
            id="tool-message-without-tool-calls",
        ),
        pytest.param(
            [USER, ASKS_TWO, _result("call_a"), _result("call_x")],
            "'tool_call_id' of 'call_x' not found in 'tool_calls' of previous message",
            "messages.[3].tool_call_id",
            id="tool-call-id-not-announced",
        ),
        pytest.param(
            [USER, ASKS_TWO, _result("call_a"), {"role": "user", "content": "and?"}],
            "The following tool_call_ids did not have response messages: call_b",
            "messages.[1].role",
            id="tool-call-left-unanswered",
        ),
        pytest.param(
            [USER, ASKS_TWO, {"role": "user", "content": "hm"}, _result("call_a")],
            "messages with role 'tool' must be a response to a preceeding message",
            "messages.[3].role",
            id="tool-results-not-right-after-the-call",
        ),
        pytest.param(
            [{"role": "robot", "content": "beep"}],
            "Invalid value: 'robot'. Supported values are",
            "messages.[0].role",
            id="unknown-role",
        ),
    ],
)
async def test_protocol_violations_are_refused_with_400(
    client: openai.AsyncOpenAI,
    fake: FakeOpenAI,
    messages: list[dict[str, Any]],
    message: str,
    param: str,
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await _send(client, messages)
    assert message in str(info.value)
    assert info.value.param == param
    assert len(fake.rejections) == 1


async def test_image_parts_are_refused_by_a_text_only_model(
    client: openai.AsyncOpenAI, fake: FakeOpenAI
) -> None:
    image = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    }
    assert (await _send(client, [image], model="gpt-4o-mini")).choices
    with pytest.raises(openai.BadRequestError) as info:
        await _send(client, [image], model="text-only-model")
    assert "image_url is only supported by certain models" in str(info.value)
    assert info.value.param == "messages.[0].content.[1].type"


async def test_rules_compose(client: openai.AsyncOpenAI, fake: FakeOpenAI) -> None:
    """A test can add its own rule next to the standard ones."""

    def no_empty_user_text(body: dict[str, Any]) -> Rejection | None:
        empty = any(m.get("role") == "user" and m.get("content") == "" for m in body["messages"])
        return Rejection("user content must not be empty", "messages") if empty else None

    fake.rules = (*CONVERSATION_RULES, no_empty_user_text)
    with pytest.raises(openai.BadRequestError, match="must not be empty"):
        await _send(client, [{"role": "user", "content": ""}])
    with pytest.raises(openai.BadRequestError, match="Supported values"):
        await _send(client, [{"role": "robot", "content": "x"}])  # the standard rules still hold
