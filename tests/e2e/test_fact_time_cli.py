"""A fact's time is when it was said (`bot chat --at` dates the messages), not when it was
stored: replaying an older statement after a newer one on the same subject leaves the newer one
live (the older is rejected, see `bot.memory.reconcile`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.fakes.openai_server import FakeOpenAI
from tests.e2e.test_chat_cli import run_chat


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start_in_thread()
    yield server
    server.stop()


def test_an_older_statement_replayed_later_never_replaces_the_newer(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    data = tmp_path / "d"
    channel = f"general-{uuid.uuid4().hex[:8]}"
    who = ("--user", "dana", "--channel", channel)
    march = run_chat(
        ["Please remember that I live in Munich."],
        fake=fake,
        data_dir=data,
        args=(*who, "--at", "2026-03-10T10:00"),
    )
    assert march.returncode == 0, march.stderr
    january = run_chat(
        ["Please remember that I live in Berlin."],
        fake=fake,
        data_dir=data,
        args=(*who, "--at", "2026-01-10T10:00"),
    )
    assert january.returncode == 0, january.stderr
    remembered = {
        c["id"]
        for r in fake.requests
        for m in r["messages"]
        for c in m.get("tool_calls") or []
        if c["function"]["name"] == "remember"
    }
    assert len(remembered) == 2  # both were asked, the model called the tool each time

    fake.requests.clear()
    later = run_chat(["where do I live?"], fake=fake, data_dir=data, args=who)
    assert later.returncode == 0, later.stderr
    note = json.dumps(fake.requests[-1]["messages"][:2], ensure_ascii=False)
    assert "I live in Munich" in note and "Berlin" not in note

    shown = run_chat(["/memory show history"], fake=fake, data_dir=data, args=who)
    live = shown.stdout.split("Replaced or closed earlier:")[0]
    assert "I live in Munich" in live and "since 2026-03-10" in live, shown.stdout
    assert "Berlin" not in shown.stdout  # rejected, not kept as history
