"""The Slack bench's own arithmetic: where a reply's wait is split (FakeOpenAI's arrival record
over real HTTP, matched to the mention's channel) and where the CPU trace is read."""

from __future__ import annotations

import time

import aiohttp
import openai

from bench.bench_slack import QUESTION, _asked_at, _cpu_at, _event, _question
from testkit.fakes.openai_server import FakeOpenAI


async def test_fake_openai_records_when_each_chat_request_arrived() -> None:
    async with FakeOpenAI() as fake:
        client = openai.AsyncOpenAI(api_key="sk-test", base_url=fake.base_url, max_retries=0)
        before = time.monotonic()
        for words in (_question("B", 7), _question("W", 7)):
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": f"Bot: {words}"}]
            )
        after = time.monotonic()
        await client.close()
        async with (
            aiohttp.ClientSession() as http,
            http.get(fake.base_url.removesuffix("/v1") + "/_fake/chats") as resp,
        ):
            rows = await resp.json()
            assert resp.status == 200
        async with (
            aiohttp.ClientSession() as http,
            http.get(fake.base_url.removesuffix("/v1") + "/_fake/chats?since=1") as resp,
        ):
            later = await resp.json()
    assert [r["user"] for r in rows] == ["Bot: question number B7", "Bot: question number W7"]
    assert before <= rows[0]["at"] <= rows[1]["at"] <= after
    assert later == rows[1:]
    # The measured mention and the warm-up one with the same number are told apart.
    assert _asked_at(rows) == {"CB00007": rows[0]["at"], "CW00007": rows[1]["at"]}


def test_a_mention_is_matched_by_its_words_and_only_its_first_request_counts() -> None:
    channel, _, body = _event(42, "B")
    found = QUESTION.search(body["event"]["text"])
    assert found is not None and channel == "CB00042"
    rows = [
        {"at": 1.0, "user": "question number B42"},
        {"at": 2.0, "user": "question number B42"},  # a second round of the same turn
        {"at": 3.0, "user": "something else"},
    ]
    assert _asked_at(rows) == {"CB00042": 1.0}


def test_the_cpu_trace_is_read_at_the_first_sample_at_or_after_the_moment() -> None:
    trace = [(10.0, 1.0), (10.02, 1.5), (10.04, 2.5)]
    assert _cpu_at(trace, 10.01) == 1.5
    assert _cpu_at(trace, 10.02) == 1.5
    assert _cpu_at(trace, 11.0) == 2.5  # after the last sample: the last one
    assert _cpu_at([], 1.0) != _cpu_at([], 1.0)  # nothing sampled: NaN, never a made-up figure
