"""The same platform message reaching the turn twice (an inbox re-run after a crash, a second
event id): answered once, the answer said again; cut short, resumed as the same turn without
calling its completed tools again. Oracles: the fake model's request log, the write tool's own
call list, the stored conversation."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from bot.app import BotApp
from bot.toolbox import Toolbox
from testkit.fakes.openai_server import FakeOpenAI, hang, text, tool_calls
from tests.helpers import CollectingSink, message, until
from tools.declare import tool
from tools.registry import ToolRegistry


class Shop:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

        @tool(name="cancel_order", write=True)
        async def cancel_order(order_id: str) -> dict[str, Any]:
            """Cancel an order."""
            self.cancelled.append(order_id)
            return {"id": order_id, "status": "cancelled"}

        self.registry = ToolRegistry([cancel_order])


def asked(text_: str, ts: str = "1700000000.000100") -> Any:
    return replace(message(text_), message_id=ts)


async def run(app: BotApp, shop: Shop, msg: Any) -> CollectingSink:
    sink = CollectingSink()
    await app.runner.run(msg, Toolbox(shop.registry, app.toolboxes.executor), sink)
    return sink


async def users_stored(app: BotApp, msg: Any) -> list[str]:
    stored = await app.store.recent(msg.session, limit=50)
    return [m.content for m in stored if m.role == "user"]


async def test_an_answered_message_is_answered_again_without_the_model(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app, shop = await make_app(), Shop()
    fake_openai.push(text("Hello there."))
    msg = asked("hi")
    first = await run(app, shop, msg)
    second = await run(app, shop, msg)
    assert first.final == second.final == "Hello there."
    assert len(fake_openai.requests) == 1
    assert await users_stored(app, msg) == ["hi"]
    other = await run(app, shop, asked("hi", ts="1700000000.000200"))  # another message: a turn
    assert len(fake_openai.requests) == 2 and other.final != ""


async def test_a_turn_cut_short_after_a_write_resumes_without_writing_again(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app, shop = await make_app(), Shop()
    fake_openai.push(tool_calls([("cancel_order", {"order_id": "W1"})]), hang(30))
    msg = asked("Please cancel my order W1")
    crashed = asyncio.create_task(run(app, shop, msg))
    await until(lambda: len(fake_openai.requests) == 2, what="the tool ran, the model answers")
    crashed.cancel()  # the process dies here
    await asyncio.gather(crashed, return_exceptions=True)
    assert shop.cancelled == ["W1"]

    fake_openai.push(text("Your order W1 is cancelled."))
    again = await run(app, shop, msg)
    assert again.final == "Your order W1 is cancelled."
    assert shop.cancelled == ["W1"]  # not twice
    resumed = fake_openai.requests[2]["messages"]
    results = [json.loads(m["content"]) for m in resumed if m["role"] == "tool"]
    assert [r["data"]["status"] for r in results] == ["cancelled"]
    assert [m["content"] for m in resumed if m["role"] == "user"] == [msg.text]
    assert await users_stored(app, msg) == [msg.text]
    stored = await app.store.recent(msg.session, limit=50)
    assert len({m.turn_id for m in stored}) == 1  # one turn, continued
