"""`/good` and `/bad` in `bot chat` (a subprocess on FakeOpenAI): a vote on the last reply, kept
with its turn, changeable; one per person per reply; `/memory forget all` deletes the votes."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from testkit.fakes.openai_server import FakeOpenAI, text
from tests.e2e.test_chat_cli import ROOT, _run_chat
from tests.e2e.test_chat_cli import fake as fake


def run_chat(lines: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    """`bot chat` from this checkout (the shared venv's editable install may point elsewhere)."""
    return _run_chat(lines, env_extra={"PYTHONPATH": str(ROOT)}, **kw)


def _votes(data: Path) -> list[tuple[str, str, int, str, int, str, str]]:
    with sqlite3.connect(data / "bot.db") as conn:
        return conn.execute(
            "SELECT person, channel, vote, turn_id, seq, session, audience FROM feedback "
            "ORDER BY person"
        ).fetchall()


def test_good_and_bad_vote_on_the_last_reply(fake: FakeOpenAI, tmp_path: Path) -> None:
    data = tmp_path / "d"
    fake.push(text("Paris."), text("Lyon."))
    lines = ["/good", "capital of France?", "/good", "/bad", "/bad"]
    out = run_chat(lines, fake=fake, data_dir=data, args=("--user", "ann", "--channel", "geo"))
    assert out.returncode == 0, out.stderr
    said = out.stdout.strip().splitlines()
    assert said[0] == "There's no reply of mine to vote on yet."
    assert said[1] == "Paris."
    assert said[2].startswith("Thanks for the feedback")
    assert said[3] == "Changed your vote to :-1:."
    assert said[4].startswith("Thanks for the feedback")  # the same vote again: still one
    (ann,) = _votes(data)
    assert ann[:3] == ("console:local:ann", "geo", -1)
    assert ann[3].startswith("t_") and ann[4] == 1  # the turn and the seq of the question
    assert ann[5] == "console:local:geo:-" and ann[6] == "public"

    out = run_chat(
        ["where is Lyon?", "/good"],
        fake=fake,
        data_dir=data,
        args=("--user", "bob", "--channel", "geo"),
    )
    assert out.returncode == 0, out.stderr
    assert [v[0] for v in _votes(data)] == ["console:local:ann", "console:local:bob"]
    assert "/good" in run_chat(["/help"], fake=None, data_dir=data).stdout

    out = run_chat(["/memory forget all"], fake=fake, data_dir=data, args=("--user", "ann"))
    assert out.returncode == 0, out.stderr
    assert [v[0] for v in _votes(data)] == ["console:local:bob"]
