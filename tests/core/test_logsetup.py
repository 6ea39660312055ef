"""Structured logs: JSON lines, credentials redacted, libraries' chatter (and bodies) dropped."""

from __future__ import annotations

import io
import json
import logging

import pytest

from bot.logsetup import JsonFormatter, setup_logging


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buf = io.StringIO()
    monkeypatch.setattr("sys.stderr", buf)
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    setup_logging("INFO", json_lines=True)
    yield buf
    root.handlers[:], root.level = saved[0], saved[1]


def test_json_fields_and_redaction(stream: io.StringIO) -> None:
    logging.getLogger("bot.x").info(
        "model_call",
        extra={"fields": {"api_key": "sk-live-123", "prompt_tokens": 12, "token": "xoxb"}},
    )
    record = json.loads(stream.getvalue().strip())
    assert record["event"] == "model_call" and record["prompt_tokens"] == 12
    assert record["api_key"] == "[redacted]" and record["token"] == "[redacted]"
    assert "sk-live-123" not in stream.getvalue()


def test_library_info_records_are_dropped_even_with_their_own_level(stream: io.StringIO) -> None:
    bolt = logging.getLogger("slack_bolt.RequestVerification")
    bolt.setLevel(logging.INFO)  # what Bolt does to its own loggers
    bolt.info("Invalid request signature detected (body: secret message text)")
    bolt.warning("something worth seeing")
    out = stream.getvalue()
    assert "secret message text" not in out and "something worth seeing" in out


def test_exceptions_are_rendered() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "failed", None, __import__("sys").exc_info()
        )
    line = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in line["exc"]


async def test_a_turn_logs_no_message_text_or_key(
    make_app: object, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.helpers import say

    app = await make_app()  # type: ignore[operator]
    secret_text = "my passport number is XK-4455-PLUM"
    with caplog.at_level(logging.DEBUG):
        await say(app, "please remember that " + secret_text)
        await say(app, "and what's the weather in Lisbon?")
    formatter = JsonFormatter()
    lines = [formatter.format(r) for r in caplog.records]
    assert any('"event": "turn"' in line for line in lines)
    assert any('"event": "tool_call"' in line for line in lines)
    joined = "\n".join(lines)
    assert "XK-4455-PLUM" not in joined and "Lisbon" not in joined and "sk-test" not in joined


@pytest.mark.parametrize(
    "created", [1768384800.0, 1768384800.0004, 1768384800.9996, 1768384859.999, 1768384860.5]
)
def test_timestamps_are_iso_utc_with_milliseconds(created: float) -> None:
    """The cached-seconds timestamp says what datetime says (truncated to the millisecond)."""
    from datetime import UTC, datetime

    formatter = JsonFormatter()
    for at in (created - 1.0, created):  # a second seen before, then a new one
        record = logging.LogRecord("x", logging.INFO, __file__, 1, "tick", None, None)
        record.created = at
        expected = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
        assert json.loads(formatter.format(record))["ts"] == expected


def test_redaction_is_decided_per_field_name_every_time(stream: io.StringIO) -> None:
    log = logging.getLogger("bot.x")
    for _ in range(3):  # the decision is remembered; the values never are
        log.info("e", extra={"fields": {"bot_token": "xoxb-1", "completion_tokens": 7}})
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(r["bot_token"], r["completion_tokens"]) for r in lines] == [("[redacted]", 7)] * 3
