"""The turn loop end to end inside the process: real BotApp, real SQLite, FakeOpenAI over HTTP."""

from __future__ import annotations

import json
from typing import Any

from bot.turn import TurnResult
from testkit.fakes.openai_server import FakeOpenAI, hang, status, text, tool_calls
from tests.helpers import message, say
from tests.support.token_oracle import request_tokens


def _tool_messages(req: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in req["messages"] if m["role"] == "tool"]


async def test_plain_reply_and_memory_of_the_thread(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app()
    fake_openai.push(text("Hello Alice!"), text("You said your name is Alice."))
    first = await say(app, "hi, I'm Alice")
    second = await say(app, "what's my name?")
    assert first.final == "Hello Alice!" and not first.error
    assert second.final == "You said your name is Alice."
    last = fake_openai.requests[-1]["messages"]
    contents = [m.get("content") for m in last]
    assert "hi, I'm Alice" in contents and "Hello Alice!" in contents
    assert last[0]["role"] == "system"
    # The stable prefix is byte-identical across turns (prompt caching).
    assert fake_openai.requests[0]["messages"][0] == last[0]
    assert fake_openai.requests[0]["tools"] == fake_openai.requests[1]["tools"]


async def test_tool_result_is_fed_back_with_its_call_id(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    fake_openai.push(
        tool_calls([("remember", {"fact": "Likes green tea."})]),
        text("Noted."),
    )
    sink = await say(app, "remember I like green tea")
    assert sink.final == "Noted."
    second = fake_openai.requests[1]["messages"]
    assistant = next(m for m in second if m.get("tool_calls"))
    tool_msg = _tool_messages(fake_openai.requests[1])[0]
    assert tool_msg["tool_call_id"] == assistant["tool_calls"][0]["id"]
    envelope = json.loads(tool_msg["content"])
    assert envelope["ok"] is True and envelope["data"]["fact"] == "Likes green tea."


async def test_unknown_tool_and_bad_arguments_are_fed_back(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    fake_openai.push(
        tool_calls([("launch_rockets", "{}"), ("remember", '{"fact": ')]),
        tool_calls([("remember", {"fact": "Prefers metric units."})]),
        text("Done."),
    )
    sink = await say(app, "remember metric please")
    assert sink.final == "Done."
    results = [json.loads(m["content"]) for m in _tool_messages(fake_openai.requests[1])]
    assert results[0]["ok"] is False and results[0]["error"]["type"] == "unknown_tool"
    assert "remember" in results[0]["error"]["message"]
    assert results[1]["error"]["type"] == "bad_arguments"
    facts = await app.store.list_facts(message("x").person)
    assert [f.text for f in facts] == ["Prefers metric units."]


async def test_max_rounds_ends_with_a_tool_free_answer(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app(bot_max_tool_rounds=2)
    fake_openai.push(
        tool_calls([("launch_rockets", "{}")]),
        tool_calls([("launch_rockets", "{}")]),
        text("I couldn't do that, sorry."),
    )
    result = await app.run_turn(message("go"), _sink())
    assert isinstance(result, TurnResult)
    assert result.outcome == "max_rounds" and result.rounds == 3
    assert fake_openai.requests[-1]["tool_choice"] == "none"
    assert result.reply == "I couldn't do that, sorry."


async def test_model_errors_become_friendly_replies(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app(bot_model_retries=1)
    fake_openai.push(status(500), status(500))
    sink = await say(app, "hello?")
    assert sink.error and sink.final
    assert "500" not in sink.final and "Traceback" not in sink.final
    # The user's message was kept: the next turn sees it.
    fake_openai.push(text("Back again."))
    await say(app, "still there?")
    contents = [m.get("content") for m in fake_openai.requests[-1]["messages"]]
    assert "hello?" in contents


async def test_turn_timeout_gives_a_friendly_reply(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app(bot_turn_timeout=1.0, bot_model_timeout=5.0, bot_model_retries=0)
    fake_openai.push(hang(3))
    sink = await say(app, "slow one")
    assert sink.error and "too long" in (sink.final or "")
    # The message was stored while the model was asked, and kept when the turn timed out.
    fake_openai.push(text("Back again."))
    await say(app, "still there?")
    contents = [m.get("content") for m in fake_openai.requests[-1]["messages"]]
    assert "slow one" in contents


async def test_rate_limited_twice_then_success(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app(bot_model_retries=2)
    fake_openai.push(
        status(429, retry_after_ms=50), status(429, retry_after_ms=50), text("made it")
    )
    sink = await say(app, "hi")
    assert sink.final == "made it" and not sink.error
    assert len(fake_openai.requests) == 3


async def test_empty_and_oversized_messages(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app(bot_context_tokens=3000)
    empty = await say(app, "   ")
    assert empty.final and not fake_openai.requests
    big = "lorem ipsum " * 20_000
    sink = await say(app, big)
    assert sink.final and not sink.error
    assert request_tokens(fake_openai.requests[-1]) <= 3000


async def test_sessions_and_people_are_isolated(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app()
    await say(app, "please remember that I am allergic to peanuts", user="alice")
    await say(app, "secret plan in channel one", channel="C-one", user="alice")
    fake_openai.requests.clear()
    await say(app, "hello", channel="C-two", user="bob")
    seen = json.dumps(fake_openai.requests, ensure_ascii=False)
    assert "peanuts" not in seen and "secret plan" not in seen
    fake_openai.requests.clear()
    await say(app, "hello again", channel="C-two", user="alice")
    seen = json.dumps(fake_openai.requests, ensure_ascii=False)
    assert "allergic to peanuts" in seen and "secret plan" not in seen


def _sink() -> Any:
    from tests.helpers import CollectingSink

    return CollectingSink()


async def test_a_server_that_rejects_tools_still_gets_an_answer(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    def brain(request: dict[str, Any]) -> Any:
        if request.get("tools"):
            return status(400, message="this model does not support tools")
        return text("answered without tools")

    fake_openai.brain = brain
    app = await make_app(bot_model_retries=0)
    sink = await say(app, "hello")
    assert sink.final == "answered without tools" and not sink.error
    assert "tools" not in fake_openai.requests[-1]


async def test_broken_json_from_the_model_gives_a_friendly_reply(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    from testkit.fakes.openai_server import malformed_json_body

    app = await make_app(bot_model_retries=0)
    fake_openai.push(malformed_json_body())
    sink = await say(app, "hello")
    assert sink.error and sink.final and "{" not in sink.final
    fake_openai.push(text("recovered"))
    assert (await say(app, "again")).final == "recovered"


async def test_huge_tool_call_arguments_do_not_break_the_budget(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app(bot_context_tokens=3000)
    huge = json.dumps({"fact": "peanut " * 6000})
    fake_openai.push(tool_calls([("remember", huge)]), tool_calls([("remember", huge)]), text("ok"))
    sink = await say(app, "remember all of this")
    assert sink.final == "ok"
    sizes = [request_tokens(r) for r in fake_openai.requests]
    assert max(sizes) <= 3000, sizes
