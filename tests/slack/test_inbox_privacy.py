"""What the durable inbox keeps of a person's words once their message was answered and they
asked `/memory forget all`: nothing, in any file (the embedded setup keeps the inbox in a SQLite
file of its own). Oracle: the raw bytes of every file in the data directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.core import CommandRequest
from testkit.fakes.openai_server import FakeOpenAI, text
from tests.helpers import until
from tests.slack.conftest import StartHarness

SECRET = "quasar-5151-locker"


def files_holding(directory: Path, phrase: str) -> list[str]:
    needle = phrase.encode()
    return sorted(p.name for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes())


async def test_forget_all_leaves_no_trace_of_an_answered_message_in_the_inbox_files(
    make_app: Any, start_harness: StartHarness, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    app = await make_app()
    slack = await start_harness(app)
    fake_openai.push(text("Noted."))
    ts = await slack.mention(f"my locker code is {SECRET}")
    assert await slack.wait_replies("C1", ts) == ["Noted."]
    await until(lambda: app.worker.in_flight == 0, what="the entry is done")
    data = tmp_path / "data"
    assert files_holding(data, SECRET)  # the oracle can see it before the erasure

    request = CommandRequest("slack", slack.team, "C1", "U1", "memory", "forget all")
    reply = await app.handle_command(request)
    assert reply.ok, reply.text
    assert files_holding(data, SECRET) == []
