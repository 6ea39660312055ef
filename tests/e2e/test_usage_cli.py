"""Usage end to end as an operator meets it: `bot chat` against FakeOpenAI returning known usage
(cached prompt tokens included), then `/usage` in the chat and `bot usage` (report and CSV).
Totals are checked against the fake server's own log of the usage it sent, costs to the cent
against prices applied here."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.fakes.openai_server import FakeOpenAI, text
from tests.e2e.test_chat_cli import run_chat

PRICE_IN, PRICE_CACHED, PRICE_OUT = 0.15, 0.075, 0.60
PRICES = f"gpt-4o-mini={PRICE_IN}/{PRICE_CACHED}/{PRICE_OUT}"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start_in_thread()
    yield server
    server.stop()


def bot_usage(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "BOT_", "MONGO"))}
    env.update({"BOT_DATA_DIR": str(data_dir), "OPENAI_API_KEY": "sk-test"})
    return subprocess.run(
        [sys.executable, "-m", "bot", "usage", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=data_dir.parent,
        env=env,
    )


def usage(prompt: int, cached: int, completion: int) -> dict[str, object]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def test_chat_usage_and_the_operator_report_match_the_server(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.push(
        text("first", usage=usage(1234, 1000, 56)),
        text("second", usage=usage(2345, 2000, 78)),
    )
    data = tmp_path / "d"
    out = run_chat(
        ["hello", "/good", "and another", "/bad", "/good", "/usage"],
        fake=fake,
        data_dir=data,
        env_extra={"BOT_PRICES": PRICES},
    )
    assert out.returncode == 0, out.stderr
    sent = [u for _, u in fake.usage_sent]
    prompt = sum(int(u["prompt_tokens"]) for u in sent)  # type: ignore[call-overload]
    cached = sum(int(u["prompt_tokens_details"]["cached_tokens"]) for u in sent)  # type: ignore[index]
    completion = sum(int(u["completion_tokens"]) for u in sent)  # type: ignore[call-overload]
    dollars = ((prompt - cached) * PRICE_IN + cached * PRICE_CACHED + completion * PRICE_OUT) / 1e6
    assert len(sent) == 2
    # In the chat: today's line with the server's totals.
    assert (
        f"Today: {prompt + completion:,} tokens ({prompt:,} in, {cached:,} of them cached"
        in out.stdout
    )
    assert f"${dollars:,.2f}" in out.stdout
    # Votes (the second reply's changed from down to up), counted for the admin at the terminal.
    assert "Feedback on replies this month: 2 up, 0 down" in out.stdout

    report = bot_usage(data, "--csv")
    assert report.returncode == 0, report.stderr
    rows = list(csv.DictReader(io.StringIO(report.stdout)))
    assert rows and {r["kind"] for r in rows} == {"chat"}
    assert sum(int(r["prompt_tokens"]) for r in rows) == prompt
    assert sum(int(r["cached_prompt_tokens"]) for r in rows) == cached
    assert sum(int(r["completion_tokens"]) for r in rows) == completion
    assert round(sum(float(r["cost_usd"]) for r in rows), 2) == round(dollars, 2)
    assert {r["estimated_requests"] for r in rows} == {"0"}
    plain = bot_usage(data)
    assert plain.returncode == 0 and f"{prompt + completion:,} tokens" in plain.stdout
    assert "console:local: Feedback on replies: 2 up, 0 down" in plain.stdout


def test_a_server_without_usage_is_estimated_and_says_so(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.stream_options = "ignore"  # streamed answers come without a usage chunk
    data = tmp_path / "d"
    out = run_chat(["hello there"], fake=fake, data_dir=data)
    assert out.returncode == 0, out.stderr
    assert fake.usage_sent == []  # nothing the bot could read
    rows = list(csv.DictReader(io.StringIO(bot_usage(data, "--csv").stdout)))
    assert len(rows) == 1 and rows[0]["estimated_requests"] == "1"
    assert int(rows[0]["prompt_tokens"]) > 0 and int(rows[0]["completion_tokens"]) > 0
    assert rows[0]["cost_usd"] == "0.000000" and rows[0]["unpriced_requests"] == "1"


def test_bad_input_and_a_missing_store_are_told_apart(tmp_path: Path) -> None:
    missing = bot_usage(tmp_path / "nowhere")
    assert missing.returncode == 3 and "no store" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad = bot_usage(tmp_path / "nowhere", "--team", "x" * 100_000)
    assert bad.returncode == 2 and "--team must be PLATFORM:TEAM" in bad.stderr
    assert len(bad.stderr) < 1000
    since = bot_usage(tmp_path / "nowhere", "--since", "yesterday")
    assert since.returncode == 2 and "--since must be YYYY-MM-DD" in since.stderr


def test_in_the_console_the_budget_refuses_and_its_setter_is_told(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    out = run_chat(
        ["/config set budget=40/day", "a question that uses the whole budget", "and another"],
        fake=fake,
        data_dir=tmp_path / "d",
    )
    assert out.returncode == 0, out.stderr
    assert len(fake.requests) == 1  # the second question made no model request
    assert out.stdout.count("Budget alert:") == 1, out.stderr
    assert "this channel's budget (40 tokens a day) is used up" in out.stdout
