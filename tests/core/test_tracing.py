"""OpenTelemetry traces (the `otel` extra, installed by CI): one trace per turn with the model
requests, tool calls and store writes under it, and the trace id in the turn's log line."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from bot import tracing
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.helpers import say

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.configure(exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.configure("off")


async def test_a_turn_is_one_trace_with_model_tool_and_store_spans(
    make_app: Any,
    fake_openai: FakeOpenAI,
    spans: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = await make_app()
    tracing.configure(exporter=spans)  # make_app's build_app set BOT_TRACING=off
    fake_openai.push(tool_calls([("remember", {"fact": "Likes tea."})]), text("Noted."))
    with caplog.at_level(logging.INFO, logger="bot.turn"):
        sink = await say(app, "remember I like tea")
    assert sink.final == "Noted."
    finished = spans.get_finished_spans()
    [turn] = [s for s in finished if s.name == "turn"]
    trace = turn.context.trace_id
    mine = [s for s in finished if s.context.trace_id == trace]
    names = [s.name for s in mine]
    assert names.count("model.chat") == 2
    assert "tool remember" in names and "store.append" in names
    for s in mine:
        if s is not turn:
            assert s.parent is not None and s.parent.span_id == turn.context.span_id
    [tool_span] = [s for s in mine if s.name == "tool remember"]
    assert tool_span.attributes is not None
    assert tool_span.attributes["tool.outcome"] == "ok"
    assert tool_span.attributes["tool.tool_call_id"]  # ties the span to the model's call
    assert turn.attributes is not None and turn.attributes["outcome"] == "answer"
    [line] = [r for r in caplog.records if r.getMessage() == "turn"]
    assert line.__dict__["fields"]["trace_id"] == f"{trace:032x}"


async def test_two_turns_are_two_traces(
    make_app: Any, fake_openai: FakeOpenAI, spans: InMemorySpanExporter
) -> None:
    app = await make_app()
    tracing.configure(exporter=spans)
    await say(app, "one")
    await say(app, "two")
    turns = [s for s in spans.get_finished_spans() if s.name == "turn"]
    assert len({s.context.trace_id for s in turns}) == 2


BLOCK_OTEL = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
for m in [m for m in sys.modules if m.startswith("opentelemetry")]:
    del sys.modules[m]
"""


def test_without_the_extra_tracing_is_a_no_op_and_asking_for_it_is_one_line() -> None:
    code = BLOCK_OTEL + (
        "import bot.app, bot.turn, bot.tracing as t\n"
        "t.configure('off')\n"
        "with t.span('x') as s: assert s is None\n"
        "try:\n"
        "    t.configure('console')\n"
        "except t.TracingUnavailable as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "BOT_TRACING needs the otel extra: pip install -e '.[otel]'"
