"""Feeding the Prometheus metrics in `bot.metrics` from the core (model calls, turns, tools).

Labels only ever take values from small fixed sets: a tool name the model invented is counted as
"unknown", so a misbehaving model cannot blow up the metrics' cardinality.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from bot import tracing
from bot.metrics import ERRORS, MODEL_LATENCY, MODEL_TOKENS, TOOL_CALLS, TURN_LATENCY, TURNS
from bot.model import ModelError, ModelResponse
from bot.turn import Model, TurnResult
from bot.usage.meter import UsageMeter


class MeteredModel:
    """A ModelClient that records latency, tokens and errors under a `kind` label."""

    def __init__(self, client: Model, kind: str, meter: UsageMeter | None = None) -> None:
        self.client = client
        self.kind = kind
        self.meter = meter  # usage metering and pricing (bot.usage.meter)

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_delta: Callable[[str], Awaitable[None]] | None = None,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        tool_choice: str | None = None,
        model: str | None = None,
    ) -> ModelResponse:
        with tracing.span(f"model.{self.kind}", {"messages": len(messages)}) as current:
            try:
                response = await self.client.complete(
                    messages,
                    tools=tools,
                    on_delta=on_delta,
                    response_format=response_format,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    tool_choice=tool_choice,
                    model=model,
                )
            except ModelError as err:
                ERRORS.labels("model", err.kind).inc()
                tracing.set_attributes(current, {"error.kind": err.kind})
                raise
            if response.usage is not None:
                tracing.set_attributes(
                    current,
                    {
                        "tokens.prompt": response.usage.prompt_tokens,
                        "tokens.completion": response.usage.completion_tokens,
                        "tool_calls": len(response.tool_calls),
                    },
                )
        MODEL_LATENCY.labels(self.kind).observe(response.duration_ms / 1000)
        usage = response.usage
        if usage is not None:
            MODEL_TOKENS.labels(self.kind, "prompt").inc(usage.prompt_tokens)
            MODEL_TOKENS.labels(self.kind, "completion").inc(usage.completion_tokens)
        if self.meter is not None:
            self.meter.record(
                self.kind,
                model or str(getattr(self.client, "model", "") or response.model),
                prompt=usage.prompt_tokens if usage is not None else None,
                cached=usage.cached_prompt_tokens if usage is not None else 0,
                completion=usage.completion_tokens if usage is not None else None,
                messages=messages if usage is None else (),
                content=(
                    response.content + "".join(c.name + c.arguments for c in response.tool_calls)
                    if usage is None
                    else ""
                ),
            )
        return response

    async def close(self) -> None:
        await self.client.close()


def record_turn(platform: str, result: TurnResult, known_tools: set[str]) -> None:
    ok = result.outcome in ("answer", "max_rounds", "replayed")
    TURNS.labels(platform, "ok" if ok else "error").inc()
    TURN_LATENCY.labels(platform).observe(result.duration_ms / 1000)
    if not ok:
        ERRORS.labels("turn", result.outcome).inc()
    for record in result.tool_calls:
        name = record.name if record.name in known_tools else "unknown"
        TOOL_CALLS.labels(name, record.outcome).inc()
