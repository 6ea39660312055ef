"""Through the whole bot: "I'm vegetarian" on Monday, "I eat fish now" on Thursday."""

from __future__ import annotations

from typing import Any

from bot.core import CommandRequest
from bot.keys import PersonKey
from testkit.fakes.openai_server import FakeOpenAI
from tests.helpers import say

ALICE = PersonKey("test", "T1", "U1")


def cmd(text: str, user: str = "U1") -> CommandRequest:
    return CommandRequest("test", "T1", "C1", user, "memory", text)


async def test_one_live_fact_and_one_closed(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app()
    await say(app, "please remember that I am vegetarian")
    await say(app, "please remember that I am allergic to peanuts")
    await say(app, "please remember that I eat fish now", channel="C2")

    live = await app.store.list_facts(ALICE)
    assert sorted(f.key or "" for f in live) == ["allergy", "diet"]
    (diet,) = [f for f in live if f.key == "diet"]
    assert "pescatarian" in diet.text and diet.source == "user"
    assert diet.source_messages and diet.source_messages[0].startswith("test:T1:C2:-#")

    shown = (await app.handle_command(cmd("show"))).text
    assert diet.id in shown and "pescatarian" in shown and "vegetarian" not in shown
    assert "you said in C2, message" in shown
    history = (await app.handle_command(cmd("show history"))).text
    assert "pescatarian" in history and "vegetarian" in history and "replaced by" in history

    fake_openai.requests.clear()
    await say(app, "what should I cook tonight?")
    # Only the live version is in the memory note (the raw thread keeps what was said).
    note = next(m for m in fake_openai.requests[-1]["messages"][1:] if m["role"] == "system")
    assert "pescatarian" in note["content"] and "vegetarian" not in note["content"]


async def test_forget_one_erases_its_older_versions(make_app: Any) -> None:
    app = await make_app()
    await say(app, "please remember that I am vegetarian")
    await say(app, "please remember that I eat fish now")
    (diet,) = await app.store.list_facts(ALICE)
    reply = await app.handle_command(cmd(f"forget {diet.id}"))
    assert reply.ok
    assert await app.store.list_facts(ALICE, history=True) == []
