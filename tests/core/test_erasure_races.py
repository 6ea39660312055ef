"""`/memory forget all` while other work is in flight in the same session.

A turn that loaded the history before the erasure must not put the erased messages back (it
re-saves its cached history), and a summary folded from pre-erasure messages must not be written.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bot.core import CommandRequest
from bot.keys import SessionKey
from testkit.fakes.openai_server import FakeOpenAI, Step, default_brain, message_text, text
from tests.helpers import say

SESSION = SessionKey("test", "T1", "C1")


def forget_all(user: str) -> CommandRequest:
    return CommandRequest("test", "T1", "C1", user, "memory", "forget all")


async def test_a_turn_in_flight_does_not_bring_erased_messages_back(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()

    async def brain(request: dict[str, Any]) -> Step:
        if message_text(request["messages"][-1]).endswith("slow question"):  # "ub: slow question"
            entered.set()
            await gate.wait()
        return default_brain(request)

    fake_openai.brain = brain
    app = await make_app()
    await say(app, "my card PIN is 4711", user="UA")
    slow = asyncio.create_task(say(app, "slow question", user="UB"))
    await entered.wait()
    erasing = asyncio.create_task(app.handle_command(forget_all("UA")))
    for _ in range(200):  # until the erasure waits on the session lock held by B's turn
        if app.session_locks.users(SESSION.id) >= 2:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the erasure never reached the session lock")
    gate.set()
    await slow
    reply = await erasing
    assert reply.ok and "2 message(s)" in reply.text
    await say(app, "what was said here?", user="UB")
    assert "4711" not in json.dumps(fake_openai.requests[-1]["messages"])


async def test_a_summary_in_flight_is_discarded_after_an_erasure(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()

    async def brain(request: dict[str, Any]) -> Step:
        if not request.get("response_format"):
            return default_brain(request)
        entered.set()
        await gate.wait()
        said = message_text(request["messages"][-1])
        secret = "4711" if "4711" in said else "none"
        return text(
            json.dumps({"summary": f"UA's PIN is {secret}.", "key_facts": [f"PIN {secret}"]})
        )

    fake_openai.brain = brain
    app = await make_app(bot_context_tokens=3000)
    await say(app, "my card PIN is 4711", user="UA")
    for i in range(60):
        await say(app, f"chat {i} " + "details " * 40, user="UB")
        if entered.is_set():
            break
    assert entered.is_set()
    await app.handle_command(forget_all("UA"))
    gate.set()
    await app.drain(within=10)
    state = await app.store.get_state(SESSION)
    assert state is not None and state.erasures >= 1
    assert "4711" not in state.summary and all("4711" not in p.text for p in state.pinned)


async def test_the_erased_persons_own_turn_in_flight_is_erased_too(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    """A's turn is still being answered while A erases everything: what that turn stores after
    the first pass (the reply) is caught by the second pass."""
    gate, entered = asyncio.Event(), asyncio.Event()

    async def brain(request: dict[str, Any]) -> Step:
        if message_text(request["messages"][-1]) == "my locker code is 9911":
            entered.set()
            await gate.wait()
            return text("Noted, 9911.")
        return default_brain(request)

    fake_openai.brain = brain
    app = await make_app()
    turn = asyncio.create_task(say(app, "my locker code is 9911", user="UA", channel="C2"))
    await entered.wait()
    erasing = asyncio.create_task(app.handle_command(forget_all("UA")))
    session = SessionKey("test", "T1", "C2")
    for _ in range(200):
        if app.session_locks.users(session.id) >= 2:
            break
        await asyncio.sleep(0.01)
    gate.set()
    await turn
    await erasing
    left = await app.store.recent(session, limit=50)
    assert not [m for m in left if "9911" in m.content]
