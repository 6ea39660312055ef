"""Each step of the turn (`TurnRunner._run`) alone, on the real BotApp, SQLite and FakeOpenAI:
a step is called with what the steps before it produced, and what it leaves is read back from
the store or from the requests FakeOpenAI received (not from the step's own return)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bot.memory.prompts import FINAL_ANSWER_NOTE
from bot.messages import IncomingMessage
from bot.stores.records import StoredMessage
from bot.turn import Recalled, Turn, TurnResult
from testkit.fakes.openai_server import FakeOpenAI, status, text, tool_calls
from tests.helpers import CollectingSink, message, say


async def _turn(app: Any, msg: IncomingMessage) -> tuple[Turn | None, TurnResult]:
    result = TurnResult(turn_id="t_steps", reply="", outcome="error")
    toolbox = await app.toolboxes.for_team(msg.session.team_key)
    turn = await app.runner.load(msg, toolbox, CollectingSink(), result)
    return turn, result


async def _through_request(app: Any, msg: IncomingMessage) -> tuple[Turn, Any]:
    turn, _ = await _turn(app, msg)
    assert turn is not None
    await app.runner.prepare_tools(turn)
    await app.runner.recall_memories(turn)
    await app.runner.take_files(turn)
    return turn, await app.runner.record_request(turn)


async def test_load_reads_the_session_and_reuses_an_answered_message(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    fake_openai.push(text("Hi Ana."))
    first = replace(message("hi, I'm Ana"), message_id="m-1")
    await app.handle_message(first, CollectingSink())

    turn, _ = await _turn(app, message("and again"))
    assert turn is not None
    assert [m.content for m in turn.history] == ["hi, I'm Ana", "Hi Ana."]
    assert turn.prior is None

    again = replace(first, text="hi, I'm Ana")  # the same platform message delivered twice
    replay, result = await _turn(app, again)
    assert replay is None
    assert (result.outcome, result.reply) == ("replayed", "Hi Ana.")


async def test_prepare_tools_offers_the_builtins_with_their_cost(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    turn, _ = await _turn(app, message("remember that I like tea"))
    assert turn is not None and turn.schemas == []
    await app.runner.prepare_tools(turn)
    names = {s["function"]["name"] for s in turn.schemas}
    assert "remember" in names
    assert turn.tools_tokens == app.counter.tools(turn.schemas) > 0


async def test_recall_memories_asks_recall_and_keeps_a_resumed_turns_text(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    asked: list[tuple[str, int]] = []

    async def recall(
        msg: IncomingMessage, history: Sequence[StoredMessage], tokens: int
    ) -> Recalled:
        asked.append((msg.text, tokens))
        return Recalled(text="Ana said she moved to Lisbon.", people=["test:T1:U2"])

    app.runner.recall = recall
    turn, _ = await _turn(app, message("where does Ana live?"))
    assert turn is not None
    await app.runner.recall_memories(turn)
    assert asked == [("where does Ana live?", app.runner.builder.recall_tokens)]
    assert turn.recalled.text == "Ana said she moved to Lisbon."


async def test_take_files_leaves_a_message_without_files_alone(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    turn, _ = await _turn(app, message("no files here"))
    assert turn is not None
    await app.runner.take_files(turn)
    assert turn.files is None


async def test_record_request_stores_the_message_once_with_its_audience(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    msg = replace(message("what's the weather?"), message_id="m-9")
    _, ex = await _through_request(app, msg)
    stored = (await app.memory.load(msg.session)).tail
    assert [(m.role, m.content) for m in stored] == [("user", "what's the weather?")]
    assert stored[0].meta["message_id"] == "m-9"
    assert stored[0].meta["audience"] == msg.audience.id
    assert ex.ctx.message_ref == f"{msg.session.id}#{stored[0].seq}"
    assert ex.current == [{"role": "user", "content": "what's the weather?"}]
    assert not ex.guard.tainted


async def test_model_round_sends_the_request_and_the_final_round_forbids_tools(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    fake_openai.push(text("first"), text("last"))
    turn, ex = await _through_request(app, message("hello"))
    response = await app.runner.model_round(turn, ex, 1, final_round=False)
    assert response.content == "first"
    request = fake_openai.requests[-1]
    assert request["messages"][-1] == {"role": "user", "content": "hello"}
    assert request.get("tools") and "tool_choice" not in request

    response = await app.runner.model_round(turn, ex, 2, final_round=True)
    assert response.content == "last"
    request = fake_openai.requests[-1]
    assert request["tool_choice"] == "none"
    assert request["messages"][-1] == {"role": "system", "content": FINAL_ANSWER_NOTE}
    assert turn.result.rounds == 2 and len(turn.result.request_tokens) == 2


async def test_model_round_retries_a_refused_first_request_without_tools(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    fake_openai.push(status(400, message="tools are not supported"), text("plain"))
    turn, ex = await _through_request(app, message("hello"))
    response = await app.runner.model_round(turn, ex, 1, final_round=False)
    assert response.content == "plain"
    first, second = fake_openai.requests[-2:]
    assert first.get("tools") and not second.get("tools")
    assert turn.tools_rejected and turn.schemas == []


async def test_tool_round_runs_the_calls_and_records_each_result(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    fake_openai.push(tool_calls([("remember", {"fact": "Likes green tea."})]))
    msg = message("remember I like green tea")
    turn, ex = await _through_request(app, msg)
    response = await app.runner.model_round(turn, ex, 1, final_round=False)
    await app.runner.tool_round(turn, ex, response)

    call_id = response.tool_calls[0].id
    assert [r.name for r in turn.result.tool_calls] == ["remember"]
    tool_msg = ex.current[-1]
    assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"] == call_id
    assert json.loads(tool_msg["content"])["ok"] is True
    stored = (await app.memory.load(msg.session)).tail
    assert [m.role for m in stored] == ["user", "assistant", "tool"]
    assert stored[1].tool_calls and stored[1].tool_calls[0]["id"] == call_id
    facts = await app.store.list_facts(msg.person)
    assert [f.text for f in facts] == ["Likes green tea."]


async def test_finish_records_the_answer_and_the_outcome(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    fake_openai.push(text("  "))  # an empty answer: the fallback line is recorded and sent
    msg = message("say nothing")
    turn, ex = await _through_request(app, msg)
    response = await app.runner.model_round(turn, ex, 1, final_round=True)
    await app.runner.finish(turn, ex, response, final_round=True)
    assert turn.result.outcome == "max_rounds"
    stored = (await app.memory.load(msg.session)).tail
    assert stored[-1].role == "assistant" and stored[-1].content == turn.result.reply
    assert turn.result.reply.startswith("I don't have an answer")


async def test_the_steps_together_are_the_turn(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app()
    fake_openai.push(tool_calls([("remember", {"fact": "Uses vim."})]), text("Noted."))
    sink = await say(app, "remember I use vim")
    assert sink.final == "Noted."
    assert len(fake_openai.requests) == 2
