"""Episodic recall through `bot chat` (separate processes sharing one data directory, so each
run is also a restart): a detail said in a January thread is recalled in March in a new thread
of the same channel and in a DM with someone who took part; not in a DM with someone who did
not, not in another channel; an unrelated question recalls nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testkit.fakes.openai_server import FakeOpenAI
from tests.e2e.test_chat_cli import fake, run_chat  # noqa: F401  (fixture)

DETAIL = "FYI the supplier for the Lisbon order is Ferreira & Filhos"
QUESTION = "Who is the supplier for the Lisbon order?"
HEADER = "Memories from earlier conversations"


def _memories(request: dict[str, Any]) -> str:
    return "\n".join(
        m["content"]
        for m in request["messages"]
        if m["role"] == "system" and HEADER in str(m["content"])
    )


def test_lisbon_supplier_is_recalled_where_it_may_be(fake: FakeOpenAI, tmp_path: Path) -> None:  # noqa: F811
    data = tmp_path / "d"
    env = {"BOT_EMBEDDING_MODEL": "none"}

    def chat(line: str, *args: str) -> dict[str, Any]:
        before = len(fake.requests)
        out = run_chat([line], fake=fake, data_dir=data, args=args, env_extra=env)
        assert out.returncode == 0, out.stderr
        assert "Traceback" not in out.stderr
        return fake.requests[before]

    jan = ("--at", "2026-01-14T10:00")
    mar = ("--at", "2026-03-02T09:00")
    chat(DETAIL, "--user", "alice", "--channel", "ops", "--thread", "t1", *jan)
    chat("Thanks, noted", "--user", "bob", "--channel", "ops", "--thread", "t1", *jan)

    new_thread = chat(QUESTION, "--user", "carol", "--channel", "ops", "--thread", "t2", *mar)
    assert "Ferreira & Filhos" in _memories(new_thread)
    assert "14 January 2026" in _memories(new_thread)
    assert new_thread["messages"][-1] == {"role": "user", "content": QUESTION}

    bob_dm = chat(QUESTION, "--user", "bob", *mar)  # no --channel: a DM with the bot
    assert "Ferreira & Filhos" in _memories(bob_dm)

    dave_dm = chat(QUESTION, "--user", "dave", *mar)
    other_channel = chat(QUESTION, "--user", "alice", "--channel", "sales", *mar)
    unrelated = chat(
        "What is a good name for a cat?", "--user", "carol", "--channel", "ops", "--thread", "t3"
    )
    for request in (dave_dm, other_channel, unrelated):
        assert _memories(request) == ""
        assert "Ferreira" not in json.dumps(request["messages"])


def test_a_bad_date_is_one_clear_line(fake: FakeOpenAI, tmp_path: Path) -> None:  # noqa: F811
    out = run_chat(["hi"], fake=fake, data_dir=tmp_path / "d", args=("--at", "next tuesday"))
    assert out.returncode == 2
    assert "--at" in out.stderr and "Traceback" not in out.stderr
