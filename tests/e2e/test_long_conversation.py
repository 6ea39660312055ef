"""A 200-turn conversation on a 3,000-token budget, on each store/cache combination.

What must hold: no model request exceeds the budget; a fact stated in turn 1 is still in the
context at turn 200 (verbatim or through the summary); the reply path never waits on a summary
(the summariser is held on an event that is only released at the end, and turns still finish).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from bot.app import BotApp
from testkit.fakes.openai_server import FakeOpenAI, Step, default_brain, message_text, text
from tests.helpers import say
from tests.support.token_oracle import request_tokens

BUDGET = 3000
TURNS = 200
# The summariser is held on purpose until turn 120; on a loaded machine those turns can take
# longer than the suite's usual 10 s model timeout, which would abandon the held request and
# start a second one. The timeout is not what these tests are about.
HELD = {"bot_model_timeout": 600.0}
FACT = "I am allergic to peanuts"


class SummaryBrain:
    """Plays a sensible model: summaries keep lines mentioning allergies as key facts.

    `gate` blocks summary requests until set, proving turns never wait for them.
    """

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.summary_requests = 0

    async def __call__(self, request: dict[str, Any]) -> Step:
        if request.get("response_format"):
            self.summary_requests += 1
            await self.gate.wait()
            body = " ".join(message_text(m) for m in request["messages"])
            facts = sorted(
                {
                    line.rsplit(":", 1)[-1].strip(" -.")
                    for line in body.splitlines()
                    if "allergic to" in line or "过敏" in line
                }
            )
            summary = " ".join(body.split())[-300:]
            return text(json.dumps({"summary": summary, "key_facts": facts[:5]}))
        return default_brain(request)


async def _converse(app: BotApp, fake: FakeOpenAI, brain: SummaryBrain, fact: str) -> None:
    where = {"channel": f"C{uuid.uuid4().hex[:6]}", "user": "U42"}
    first = await say(app, f"Hi! Note for this chat: {fact}.", **where)
    assert first.final and not first.error
    for i in range(2, TURNS + 1):
        if i == 120:
            brain.gate.set()  # summaries may finish from here on
        filler = f"Turn {i}: let's talk about topic number {i} and its many details " * 3
        sink = await say(app, filler, **where)
        assert sink.final and not sink.error, f"turn {i} failed: {sink.final}"
        if i < 120:
            assert brain.summary_requests <= 1  # one is in flight at most, not awaited
        if i % 20 == 0:
            await asyncio.sleep(0)  # let background summaries progress
    await app.drain(within=30)
    final = await say(app, "What should you keep in mind about my diet?", **where)
    assert final.final
    chats = [r for r in fake.requests if not r.get("response_format")]
    assert len(chats) >= TURNS
    over = [request_tokens(r) for r in fake.requests if request_tokens(r) > BUDGET]
    assert not over, f"requests over budget: {over[:5]}"
    last_context = json.dumps(chats[-1]["messages"], ensure_ascii=False)
    assert fact in last_context
    assert brain.summary_requests >= 1


@pytest.fixture
def brain(fake_openai: FakeOpenAI) -> SummaryBrain:
    b = SummaryBrain()
    fake_openai.brain = b
    return b


async def test_long_conversation_sqlite_in_process(
    make_app: Any, fake_openai: FakeOpenAI, brain: SummaryBrain
) -> None:
    app = await make_app(bot_context_tokens=BUDGET, **HELD)
    await _converse(app, fake_openai, brain, FACT)


@pytest.mark.mongo
@pytest.mark.redis
async def test_long_conversation_mongo_and_redis(
    make_app: Any,
    fake_openai: FakeOpenAI,
    brain: SummaryBrain,
    mongo_uri: str,
    redis_url: str,
    redis_prefix: str,
) -> None:
    app = await make_app(
        bot_context_tokens=BUDGET,
        **HELD,
        mongodb_uri=mongo_uri,
        mongodb_db=f"t{uuid.uuid4().hex[:10]}",
        redis_url=redis_url,
        bot_redis_prefix=redis_prefix,
    )
    await _converse(app, fake_openai, brain, FACT)


async def test_long_conversation_in_chinese(
    make_app: Any, fake_openai: FakeOpenAI, brain: SummaryBrain
) -> None:
    app = await make_app(bot_context_tokens=BUDGET, **HELD)
    await _converse(app, fake_openai, brain, "我对花生过敏 (I am allergic to peanuts)")
