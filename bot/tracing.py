"""OpenTelemetry traces, an optional extra (`pip install -e '.[otel]'`), off by default.

One trace per turn: a `turn` span with a child per model request (`model.chat`), per tool call
(`tool <name>`, with the call ids, so a slow reply can be pinned on one call) and per store
write (`store.append`). The turn's log line carries the trace id, so an operator goes from
"this reply took 9 s" in the log to the trace that says where the time went.

`BOT_TRACING=off` (default) never imports OpenTelemetry: `span()` is a shared no-op context
manager, so tracing costs nothing when off. `console` prints finished spans (for a try);
`otlp` exports to the collector named by the standard `OTEL_EXPORTER_OTLP_*` variables (needs
the extra's OTLP exporter). Tests call `configure(exporter=...)` with an in-memory exporter.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

_NOOP: AbstractContextManager[Any] = nullcontext()
_tracer: Any = None  # an opentelemetry Tracer once configured


class TracingUnavailable(Exception):
    """Tracing was asked for but the `otel` extra is not installed; one line for the operator."""


def configure(mode: str = "off", *, exporter: Any = None) -> None:
    """Turn tracing on (`console`, `otlp`, or any `exporter`) or off. Called once at start."""
    global _tracer
    if exporter is None and mode == "off":
        _tracer = None
        return
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
    except ImportError:
        raise TracingUnavailable(
            "BOT_TRACING needs the otel extra: pip install -e '.[otel]'"
        ) from None
    provider = TracerProvider(resource=Resource.create({"service.name": "chatbot"}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif mode == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise TracingUnavailable(
                "BOT_TRACING=otlp needs the otel extra: pip install -e '.[otel]'"
            ) from None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _tracer = provider.get_tracer("chatbot")


def enabled() -> bool:
    return _tracer is not None


def span(name: str, attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[Any]:
    """A child of the current span (a root when there is none); a no-op when tracing is off."""
    if _tracer is None:
        return _NOOP
    cm: AbstractContextManager[Any] = _tracer.start_as_current_span(
        name, attributes=dict(attributes or {})
    )
    return cm


def record_span(
    name: str, *, started_ns: int, duration_ms: float, attributes: Mapping[str, Any]
) -> None:
    """A span for work already done (a tool call the executor timed), under the current span."""
    if _tracer is None:
        return
    s = _tracer.start_span(name, start_time=started_ns, attributes=dict(attributes))
    s.end(end_time=started_ns + int(duration_ms * 1_000_000))


def set_attributes(current: Any, attributes: Mapping[str, Any]) -> None:
    if current is not None:
        current.set_attributes(dict(attributes))


def trace_id(current: Any) -> str | None:
    """The hex trace id of a span from `span()`, for log lines; None when tracing is off."""
    if current is None:
        return None
    return f"{current.get_span_context().trace_id:032x}"


def now_ns() -> int:
    return time.time_ns()


@contextmanager
def off() -> Iterator[None]:
    """Tracing off for a block (tests restore the default)."""
    global _tracer
    saved, _tracer = _tracer, None
    try:
        yield
    finally:
        _tracer = saved
