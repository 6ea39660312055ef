"""Runs the tool calls of one model response: validate, dispatch, retry, record, envelope.

`ToolExecutor.execute` never raises for anything the model sends. Every call ends as a
`ToolCallRecord` whose `content` is the envelope JSON for the `tool` message, with one outcome:

- `unknown_tool`: the message names the tool and lists the available ones;
- `bad_arguments`: broken JSON, a non-object, or field-level validation errors (`fields`);
- `business_error`: `ToolBusinessError` text, shown as-is, not retried;
- `timeout` / `transient_error`: retried a bounded number of times with jittered backoff, then
  reported as temporarily unavailable (`retryable: true`);
- `unexpected_error`: logged with its stack trace; the model only hears that it failed;
- `limit_exceeded`: not run, because the response asked for more than `max_calls_per_round`
  calls, or the turn already ran `max_calls_per_turn` (one log line for all of them).

Calls of one response run concurrently under a cap and come back in request order. Write tools
are idempotent (see `tools.idempotency`). Logs carry ids, outcome and sizes, never argument
values or results, which may hold personal data or tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from tools import envelope
from tools.breaker import BreakerBoard, CircuitBreaker
from tools.declare import Tool
from tools.errors import (
    ToolArgumentError,
    ToolBusinessError,
    ToolTimedOut,
    ToolTransientError,
)
from tools.idempotency import IdempotencyCache, MemoryIdempotencyCache, idempotency_key
from tools.keylocks import KeyLocks
from tools.registry import ToolRegistry
from tools.schema import field_errors, unknown_fields
from tools.types import Outcome, ToolCallRecord, ToolCallRequest, ToolContext

logger = logging.getLogger("tools.executor")

RecordCallback = Callable[[ToolCallRecord, ToolContext], Awaitable[None]]

GENERIC_FAILURE = (
    "The tool failed because of an internal error. Do not call it again with the same "
    "arguments; tell the user this could not be done right now."
)
_TRANSIENT: tuple[type[BaseException], ...] = (
    ToolTransientError,
    TimeoutError,
    ConnectionError,
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    """Limits of the executor. Tests set `backoff_base=0` to retry without waiting."""

    max_concurrency: int = 8  # calls of one response running at once
    max_retries: int = 2  # extra attempts after a transient failure
    backoff_base: float = 0.25  # seconds before the first retry, doubled each time
    backoff_max: float = 2.0
    max_result_chars: int = 4000  # envelope size sent to the model before trimming
    idempotency_ttl: float = 600.0  # seconds a write tool's result is replayed
    retry_budget: float = 30.0  # no retry starts later than this many seconds into a call
    max_calls_per_round: int = 10  # calls of one model response that run; the rest are refused
    max_calls_per_turn: int = 30  # calls run in one turn, over all its rounds

    def allowance(self, prior_calls: int) -> int:
        """How many calls of the next response may run, `prior_calls` having run this turn."""
        return max(0, min(self.max_calls_per_round, self.max_calls_per_turn - prior_calls))


@dataclass(slots=True)
class _Result:
    outcome: Outcome
    content: str
    result_size: int
    data: Any = None
    trimmed: bool = False
    attempts: int = 1
    replayed: bool = False


def _fail(
    outcome: Outcome,
    message: str,
    *,
    retryable: bool,
    fields: dict[str, str] | None = None,
    attempts: int = 1,
) -> _Result:
    content = envelope.dumps(envelope.error(outcome, message, retryable=retryable, fields=fields))
    return _Result(outcome, content, len(content), attempts=attempts)


def new_call_id() -> str:
    return "tc_" + uuid.uuid4().hex[:12]


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: timeouts, connection trouble, and upstream 5xx/429."""
    if isinstance(exc, _TRANSIENT):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        return status >= 500 or status == 429
    return False


def parse_arguments(text: str | None) -> dict[str, Any] | str:
    """The arguments object, or a short reason it is not one. Empty text means `{}`.

    A JSON string that itself holds an object (double-encoded arguments) is accepted.
    """
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
        if isinstance(value, str) and value.lstrip().startswith("{"):
            value = json.loads(value)
    except json.JSONDecodeError as exc:
        return f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except (ValueError, RecursionError):
        return "not valid JSON"
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
        return f"expected a JSON object, got {kind.get(type(value), 'a number')}"
    return value


class ToolExecutor:
    """Executes tool calls; one instance is shared by all turns (it holds the write locks)."""

    def __init__(
        self,
        config: ExecutorConfig | None = None,
        *,
        idempotency: IdempotencyCache | None = None,
        on_record: RecordCallback | None = None,
        breakers: BreakerBoard | None = None,
    ) -> None:
        self.config = config or ExecutorConfig()
        self.breakers = breakers if breakers is not None else BreakerBoard()
        self._cache: IdempotencyCache = idempotency or MemoryIdempotencyCache()
        self._on_record = on_record
        self._locks: KeyLocks[str] = KeyLocks()

    async def execute(
        self,
        calls: Sequence[ToolCallRequest],
        ctx: ToolContext,
        registry: ToolRegistry,
        *,
        prior_calls: int = 0,
    ) -> list[ToolCallRecord]:
        """Run `calls` (concurrently, capped) and return their records in the same order.

        Only the first `allowance(prior_calls)` calls run; each one after them gets a
        `limit_exceeded` error record (not passed to `on_record`: nothing happened).
        """
        allowed = self.config.allowance(prior_calls)
        run, refused = calls[:allowed], calls[allowed:]
        sem = asyncio.Semaphore(max(1, self.config.max_concurrency))
        if len(run) == 1:
            records = [await self._one(run[0], ctx, registry, sem)]
        else:
            records = list(await asyncio.gather(*(self._one(c, ctx, registry, sem) for c in run)))
        if refused:
            logger.warning(
                "tool_calls_limited",
                extra={
                    "fields": {
                        "turn_id": ctx.turn_id,
                        "ran": len(run),
                        "refused": len(refused),
                        "prior": prior_calls,
                    }
                },
            )
            records.extend(self._refused(c) for c in refused)
        return records

    def _refused(self, call: ToolCallRequest) -> ToolCallRecord:
        cfg = self.config
        message = (
            f"Not run: too many tool calls (at most {cfg.max_calls_per_round} per response and "
            f"{cfg.max_calls_per_turn} per turn). Answer with the results you have, or ask for "
            "fewer calls."
        )
        res = _fail("limit_exceeded", message, retryable=False)
        return ToolCallRecord(
            call_id=new_call_id(),
            tool_call_id=call.id,
            name=call.name,
            arguments=call.arguments,
            outcome=res.outcome,
            content=res.content,
            duration_ms=0.0,
            result_size=res.result_size,
        )

    async def _one(
        self,
        call: ToolCallRequest,
        ctx: ToolContext,
        registry: ToolRegistry,
        sem: asyncio.Semaphore,
    ) -> ToolCallRecord:
        started = time.perf_counter()
        call_id = new_call_id()
        try:
            res = await self._dispatch(call, call_id, ctx, registry, sem)
        except Exception:
            logger.exception("tool executor failed", extra={"fields": {"call_id": call_id}})
            res = _fail("unexpected_error", GENERIC_FAILURE, retryable=False)
        record = ToolCallRecord(
            call_id=call_id,
            tool_call_id=call.id,
            name=call.name,
            arguments=call.arguments,
            outcome=res.outcome,
            content=res.content,
            duration_ms=(time.perf_counter() - started) * 1000.0,
            result_size=res.result_size,
            trimmed=res.trimmed,
            attempts=res.attempts,
            replayed=res.replayed,
            data=res.data,
        )
        if logger.isEnabledFor(logging.INFO):
            logger.info("tool_call", extra={"fields": _log_fields(record, ctx)})
        if self._on_record is not None:
            try:
                await self._on_record(record, ctx)
            except Exception:
                logger.exception(
                    "on_record callback failed", extra={"fields": {"call_id": call_id}}
                )
        return record

    async def _dispatch(
        self,
        call: ToolCallRequest,
        call_id: str,
        ctx: ToolContext,
        registry: ToolRegistry,
        sem: asyncio.Semaphore,
    ) -> _Result:
        tool = registry.get(call.name)
        if tool is None:
            available = ", ".join(registry.names()) or "none"
            return _fail(
                "unknown_tool",
                f"There is no tool named {str(call.name)[:80]!r}. Available tools: {available}.",
                retryable=False,
            )
        parsed = parse_arguments(call.arguments)
        if isinstance(parsed, str):
            return _fail(
                "bad_arguments",
                f"Arguments for {tool.name} must be a JSON object: {parsed}.",
                retryable=True,
            )
        parsed = _drop_nulls_for_defaults(parsed, tool)
        extra = [f for f in unknown_fields(parsed, tool.parameters) if "." in f or "[" in f]
        if extra:  # top-level extras are pydantic's own "extra_forbidden" errors below
            fields = {f: "not allowed (no such field)" for f in extra[:20]}
            listing = "; ".join(f"{k}: {v}" for k, v in fields.items())
            return _fail(
                "bad_arguments",
                f"Invalid arguments for {tool.name}: {listing}. Fix these and call it again.",
                retryable=True,
                fields=fields,
            )
        if tool.check_args is not None:
            # A server's schema checks the model's arguments: off the loop (jsonschema is
            # pure Python; a hostile schema's patterns are bounded in tools.mcp.schema).
            parsed, problems = await asyncio.to_thread(tool.check_args, parsed)
            if problems:
                listing = "; ".join(f"{k}: {v}" for k, v in problems.items())
                return _fail(
                    "bad_arguments",
                    f"Invalid arguments for {tool.name}: {listing}. Fix these and call it again.",
                    retryable=True,
                    fields=problems,
                )
        try:
            args = tool.args_model.model_validate(parsed)
        except ValidationError as exc:
            fields = field_errors(exc, tool.parameters)
            listing = "; ".join(f"{k}: {v}" for k, v in fields.items())
            return _fail(
                "bad_arguments",
                f"Invalid arguments for {tool.name}: {listing}. Fix these and call it again.",
                retryable=True,
                fields=fields,
            )
        if tool.write:
            return await self._idempotent(tool, args, call_id, ctx, sem)
        return await self._attempts(tool, args, call_id, ctx, sem)

    async def _idempotent(
        self,
        tool: Tool,
        args: BaseModel,
        call_id: str,
        ctx: ToolContext,
        sem: asyncio.Semaphore,
    ) -> _Result:
        key = idempotency_key(ctx.session_id, tool.name, args, event=ctx.message_id or ctx.turn_id)
        async with self._locks.hold(key):
            try:
                cached = await self._cache.get_json(key)
            except Exception:
                logger.warning("idempotency cache read failed", exc_info=True)
                cached = None
            if isinstance(cached, dict) and isinstance(cached.get("content"), str):
                return _Result(
                    "ok",
                    cached["content"],
                    int(cached.get("result_size", len(cached["content"]))),
                    data=cached.get("data"),
                    trimmed=bool(cached.get("trimmed", False)),
                    attempts=0,
                    replayed=True,
                )
            if isinstance(cached, dict) and cached.get("started"):
                # Begun by a process that died before it recorded the outcome (the turn is
                # being re-run): it may have acted, so it is not run again.
                logger.warning("write tool outcome unknown", extra={"fields": {"tool": tool.name}})
                return _fail(
                    "transient_error",
                    f"An earlier attempt at {tool.name} with these arguments was interrupted "
                    "before it confirmed; it may or may not have been done. Check its effect "
                    "before calling it again.",
                    retryable=False,
                    attempts=0,
                )
            marker = {"started": True, "call_id": call_id}
            try:  # outlives the call's own time limits, then lapses
                await self._cache.set_json(key, marker, ttl=self._started_ttl(tool))
            except Exception:
                logger.warning("idempotency cache write failed", exc_info=True)
            res = await self._attempts(tool, args, call_id, ctx, sem)
            if res.outcome == "ok":
                entry = {
                    "content": res.content,
                    "result_size": res.result_size,
                    "trimmed": res.trimmed,
                    "data": res.data,
                    "call_id": call_id,
                }
                try:
                    await self._cache.set_json(key, entry, ttl=self.config.idempotency_ttl)
                except Exception:
                    logger.warning("idempotency cache write failed", exc_info=True)
            else:  # it failed here and told us so: a later call may try again
                with contextlib.suppress(Exception):
                    await self._cache.delete(key)
            return res

    def _started_ttl(self, tool: Tool) -> float:
        return tool.timeout * (self.config.max_retries + 1) + self.config.retry_budget + 60.0

    async def _attempts(
        self,
        tool: Tool,
        args: BaseModel,
        call_id: str,
        ctx: ToolContext,
        sem: asyncio.Semaphore,
    ) -> _Result:
        cfg = self.config
        started = time.monotonic()
        attempt = 0
        breaker = self.breakers.get(tool.provider) if tool.provider else None
        while True:
            attempt += 1
            if breaker is not None and not breaker.allow():
                return _breaker_open(tool, breaker, attempt - 1)
            failure: BaseException | None = None
            timed_out = False
            async with sem:
                timer = asyncio.timeout(tool.timeout)
                try:
                    async with timer:
                        data = await tool.invoke(args, ctx)
                except ToolBusinessError as exc:
                    if breaker is not None:
                        breaker.success()  # the provider answered
                    message = str(exc)[:1000] or "The request could not be completed."
                    return _fail("business_error", message, retryable=False, attempts=attempt)
                except ToolArgumentError as exc:
                    if breaker is not None:
                        breaker.release()
                    return _fail(
                        "bad_arguments",
                        f"Invalid arguments for {tool.name}: {exc.field}: {exc.message}.",
                        retryable=True,
                        fields={exc.field: exc.message},
                        attempts=attempt,
                    )
                except asyncio.CancelledError:
                    if breaker is not None:
                        breaker.release()  # a cancelled probe must not hold the half-open slot
                    raise
                except Exception as exc:
                    failure = exc
                    # The tool's own timer (a TimeoutError it raised, saying why) counts too.
                    timed_out = timer.expired() or isinstance(exc, ToolTimedOut)
            if failure is None:
                if breaker is not None:
                    breaker.success()
                clean = envelope.jsonable(data)
                content, size, trimmed = envelope.fit(clean, cfg.max_result_chars)
                return _Result("ok", content, size, clean, trimmed, attempt)
            fields = {"call_id": call_id, "tool": tool.name, "attempt": attempt}
            if not (timed_out or is_transient(failure)):
                if breaker is not None:
                    breaker.release()
                logger.exception(
                    "tool raised an unexpected error", exc_info=failure, extra={"fields": fields}
                )
                return _fail("unexpected_error", GENERIC_FAILURE, retryable=False, attempts=attempt)
            fields["error"] = "timeout" if timed_out else type(failure).__name__
            logger.warning("tool transient failure", extra={"fields": fields})
            if breaker is not None:
                breaker.failure()
            if tool.write and not isinstance(failure, ToolTransientError):
                # A write that timed out or lost its connection may have acted already: running
                # it again could act twice. Only a tool's own ToolTransientError says "nothing
                # happened, retry".
                why = "timed out" if timed_out else "lost its connection"
                return _fail(
                    "timeout" if timed_out else "transient_error",
                    f"{tool.name} {why} before confirming; it may or may not have been done. "
                    "Check its effect before calling it again.",
                    retryable=False,
                    attempts=attempt,
                )
            delay = self._backoff(attempt)
            late = time.monotonic() - started + delay > cfg.retry_budget
            tripped = breaker is not None and breaker.state == "open"
            if attempt > cfg.max_retries or late or tripped:
                return self._unavailable(tool, timed_out, attempt, failure)
            await asyncio.sleep(delay)

    def _backoff(self, attempt: int) -> float:
        base = min(self.config.backoff_max, self.config.backoff_base * 2 ** (attempt - 1))
        return base * random.uniform(0.5, 1.0) if base > 0 else 0.0

    @staticmethod
    def _unavailable(
        tool: Tool, timed_out: bool, attempts: int, failure: BaseException | None = None
    ) -> _Result:
        why = f"did not answer within {tool.timeout:g}s" if timed_out else "could not be reached"
        if isinstance(failure, ToolTimedOut) and str(failure):  # the tool's own words
            why = str(failure)
        return _fail(
            "timeout" if timed_out else "transient_error",
            f"{tool.name} {why} ({attempts} attempts); it is temporarily unavailable, "
            "try again later.",
            retryable=True,
            attempts=attempts,
        )


def _breaker_open(tool: Tool, breaker: CircuitBreaker, attempts: int) -> _Result:
    """The provider failed repeatedly and its breaker is open: answer now, without waiting."""
    wait = breaker.retry_in()
    when = f" in about {max(1, round(wait))}s" if wait > 0 else " shortly"
    return _fail(
        "transient_error",
        f"{tool.name} is temporarily unavailable: its service failed repeatedly and is being "
        f"given a rest. It can be tried again{when}; tell the user instead of waiting.",
        retryable=True,
        attempts=attempts,
    )


def _drop_nulls_for_defaults(args: dict[str, Any], tool: Tool) -> dict[str, Any]:
    """`"unit": null` for an optional parameter that does not accept null means "the default"
    (models in strict/structured modes send null for what they leave out), not an error."""
    if not any(v is None for v in args.values()):
        return args
    props = tool.parameters.get("properties", {})
    fields = tool.args_model.model_fields
    out = dict(args)
    for key, value in args.items():
        field = fields.get(key)
        if value is None and field is not None and not field.is_required():
            if not _accepts_null(props.get(key, {})):
                del out[key]
    return out


def _accepts_null(schema: dict[str, Any]) -> bool:
    if schema.get("type") == "null" or "null" in (schema.get("type") or []):
        return True
    return any(isinstance(s, dict) and _accepts_null(s) for s in schema.get("anyOf", []))


def _log_fields(record: ToolCallRecord, ctx: ToolContext) -> dict[str, Any]:
    return {
        "call_id": record.call_id,
        "tool_call_id": record.tool_call_id[:64],
        "tool": record.name[:64],
        "session": ctx.session_id,
        "turn": ctx.turn_id,
        "outcome": record.outcome,
        "duration_ms": round(record.duration_ms, 2),
        "result_size": record.result_size,
        "attempts": record.attempts,
        "trimmed": record.trimmed,
        "replayed": record.replayed,
    }
