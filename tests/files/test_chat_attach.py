"""`bot chat` with `/attach PATH` (the DESIGN's console syntax), as a subprocess on FakeOpenAI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.fakes.openai_server import FakeOpenAI
from testkit.files import LAST_LOG_LINE, make_log, make_pdf, make_png
from tests.e2e.test_chat_cli import _run_chat


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start_in_thread()
    yield server
    server.stop()


def test_attach_then_empty_line_then_mixed_files_then_too_many(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    (tmp_path / "server.log").write_bytes(make_log(2 * 1024 * 1024))
    (tmp_path / "shot.png").write_bytes(make_png(1600, 1000))
    (tmp_path / "report.pdf").write_bytes(make_pdf())
    for i in range(6):
        (tmp_path / f"n{i}.txt").write_text(f"note {i}\n")
    lines = [
        f"/attach {tmp_path / 'server.log'}",
        "",
        f"/attach {tmp_path / 'missing.txt'}",
        f"/attach '{tmp_path / 'shot.png'}'",
        f"/attach {tmp_path / 'report.pdf'}",
        "what are these?",
        *[f"/attach {tmp_path / f'n{i}.txt'}" for i in range(6)],
        "six notes",
    ]
    out = _run_chat(lines, fake=fake, data_dir=tmp_path / "d", env_extra={"BOT_MAX_FILES": "5"})
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    said = out.stdout.strip().splitlines()
    assert said[0] == "attached server.log; it goes with your next message"
    assert said[1].startswith("ok: [file: server.log")  # the fake's brain echoes the message
    assert said[2].startswith("cannot attach ") and "missing.txt" in said[2]
    assert said[3:5] == [
        "attached shot.png; it goes with your next message",
        "attached report.pdf; it goes with your next message",
    ]
    assert said[5] == "ok: what are these?"
    assert "6 files" in said[-1] and "at most 5" in said[-1]
    chats = [r for r in fake.requests if not r.get("response_format")]  # not summaries
    assert len(chats) == 2  # the six files never reached the model

    first = chats[0]["messages"][-1]["content"]
    assert isinstance(first, str) and first.startswith("[file: server.log")
    assert LAST_LOG_LINE in first
    second = chats[1]["messages"][-1]["content"]
    assert second[0]["text"].startswith("what are these?")
    assert "[image: shot.png (PNG image" in second[0]["text"]
    assert "[file: report.pdf (PDF document" in second[0]["text"]
    assert second[1]["type"] == "image_url"
