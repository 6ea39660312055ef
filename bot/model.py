"""The model client: one narrow door to any OpenAI-compatible Chat Completions endpoint.

Everything model-related that the rest of the bot must not care about lives here: the official
`openai` SDK (its own retries with exponential backoff + jitter and `Retry-After` handling, so we
do not hand-roll a worse one), streaming and re-assembly of streamed tool calls, mapping every
failure onto one small `ModelError` with a friendly sentence for the end user, and one structured
log line per request that carries figures only (never message text, never the key).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
import openai

from tools.types import ToolCallRequest

__all__ = [
    "DEFAULT_BASE_URL",
    "ModelClient",
    "ModelError",
    "ModelErrorKind",
    "ModelResponse",
    "Usage",
]

log = logging.getLogger("bot.model")

DEFAULT_BASE_URL = "https://api.openai.com/v1"

ModelErrorKind = Literal[
    "rate_limited", "unavailable", "timeout", "connection", "auth", "bad_request", "bad_response"
]

_USER_MESSAGES: dict[str, str] = {
    "rate_limited": "I'm getting too many requests right now — please try again in a minute.",
    "unavailable": "The AI service is having trouble right now — please try again shortly.",
    "timeout": "The AI service took too long to answer — please try again.",
    "connection": "I couldn't reach the AI service just now — please try again in a moment.",
    "auth": "I can't access the AI service right now — please ask an admin to check my setup.",
    "bad_request": "I couldn't process that request — try rephrasing or shortening it.",
    "bad_response": "I got a garbled answer from the AI service — please try again.",
}

# Anything that looks like an OpenAI-style secret, in case a server echoes a key we don't know.
_KEY_PATTERN = re.compile(r"\b(sk|rk|pk)-[A-Za-z0-9_\-*.]{6,}")
_MAX_DETAIL = 500


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the endpoint reported them (never estimated here)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_prompt_tokens: int = 0  # of prompt_tokens, served from the provider's prompt cache


@dataclass(slots=True)
class ModelResponse:
    """One finished model answer, the same shape whether it was streamed or not.

    `tool_calls` keep the raw argument text, even when it is not valid JSON: the tool executor
    owns validation and feeds errors back to the model.
    """

    content: str
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    model: str = ""
    duration_ms: float = 0.0


class ModelError(Exception):
    """A model request that failed for good (after the SDK's retries).

    `kind` drives behaviour and metrics, `detail` is for logs (the key is scrubbed out of it) and
    `user_message` is the only thing an end user should ever see.
    """

    def __init__(self, kind: ModelErrorKind, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind: ModelErrorKind = kind
        self.detail = detail

    @property
    def user_message(self) -> str:
        """A short, friendly sentence for the person chatting (no codes, no internals)."""
        return _USER_MESSAGES[self.kind]

    def __repr__(self) -> str:
        return f"ModelError(kind={self.kind!r}, detail={self.detail!r})"


class ModelClient:
    """Chat Completions over the official `openai` SDK, for OpenAI or any compatible server.

    Retries (429, 408, 409, 5xx, timeouts, connection errors) are the SDK's: exponential backoff
    from 0.5 s up to 8 s with up to 25 % jitter, and a server's `retry-after-ms` / `Retry-After`
    (up to 120 s) wins over the backoff. The SDK offers no knob to shorten its backoff; a server
    that wants faster retries says so with those headers.
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        model: str,
        timeout: float = 60.0,
        max_retries: int = 3,
    ) -> None:
        self.model = model
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self._api_key = api_key
        # Local servers (Ollama, vLLM) often need no key, but the SDK refuses an empty one; a
        # placeholder lets those work and lets OpenAI itself answer 401 -> a clear "auth" error.
        self._client = openai.AsyncOpenAI(
            api_key=api_key or "no-key-configured",
            base_url=self.base_url,
            timeout=openai.Timeout(timeout, connect=min(timeout, 10.0)),
            max_retries=max_retries,
            http_client=_aiohttp_client(),
        )
        # OpenAI's own endpoint wants `max_completion_tokens` (newer models reject `max_tokens`);
        # compatible servers broadly understand only the older `max_tokens`.
        self._is_openai = urlsplit(self.base_url).hostname == "api.openai.com"
        self._stream_usage = True  # flipped off if a server rejects `stream_options`

    @property
    def endpoint(self) -> str:
        """Scheme and host of the endpoint, for log lines and `bot doctor` (no path, no key)."""
        parts = urlsplit(self.base_url)
        host = parts.hostname or ""
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}"  # never user:password@

    async def close(self) -> None:
        """Release pooled connections."""
        await self._client.close()

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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
        """Ask the model once. Streams text to `on_delta` when given; raises only `ModelError`.
        `model` names another model than the client's own (a place's `model` setting).

        Exceptions raised by `on_delta` itself (the caller's sink) propagate unchanged.
        """
        params: dict[str, Any] = {"model": model or self.model, "messages": messages}
        if tools:
            params["tools"] = tools
            if tool_choice is not None:
                params["tool_choice"] = tool_choice
        if response_format is not None:
            params["response_format"] = response_format
        if max_tokens is not None:
            params["max_completion_tokens" if self._is_openai else "max_tokens"] = max_tokens
        if temperature is not None:
            params["temperature"] = temperature

        streamed = on_delta is not None
        started = time.perf_counter()
        outcome = "error"
        response: ModelResponse | None = None
        try:
            if on_delta is not None:
                response = await self._streamed(params, on_delta)
            else:
                response = await self._plain(params)
            response.duration_ms = round((time.perf_counter() - started) * 1000, 1)
            outcome = "ok"
        except ModelError as err:
            outcome = err.kind
            raise
        except BaseException as exc:  # cancellation or the caller's on_delta failing
            outcome = "cancelled" if isinstance(exc, asyncio.CancelledError) else "caller_error"
            raise
        finally:
            self._log_call(started, streamed, outcome, response)
        return response

    async def ping(self) -> tuple[bool, str]:
        """Reach the endpoint for `bot doctor`; a one-line verdict, never an exception.

        Tries `GET /models` first (cheap, no tokens); servers without it get a 1-token completion.
        """
        quick = self._client.with_options(max_retries=min(self.max_retries, 1))
        try:
            page = await quick.models.list()
            ids = [str(getattr(m, "id", "")) for m in (getattr(page, "data", None) or [])]
            if ids and self.model not in ids:
                note = f"model {self.model!r} not in its list of {len(ids)}"
            else:
                note = f"model {self.model!r} available" if ids else "no models listed"
            return True, f"reached {self.endpoint} ({note})"
        except openai.APIStatusError as exc:
            if exc.status_code in (401, 403):
                return False, f"{self.endpoint} refused the API key ({self._describe(exc)})"
            if exc.status_code not in (404, 405, 501):
                return False, f"{self.endpoint}: {self._describe(exc)}"
        except Exception as exc:
            return False, f"{self.endpoint}: {self._describe(exc)}"
        # /models is not offered: prove the endpoint with the smallest real completion.
        try:
            await self.complete([{"role": "user", "content": "ping"}], max_tokens=1)
        except ModelError as err:
            return False, f"{self.endpoint}: {err.kind} ({err.detail})"
        except Exception as exc:  # pragma: no cover - complete() only raises ModelError
            return False, f"{self.endpoint}: {self._describe(exc)}"
        return True, f"reached {self.endpoint} (chat completions answer; no /models endpoint)"

    # -- requests -------------------------------------------------------------------------

    async def _create(self, params: dict[str, Any], *, stream: bool) -> Any:
        """POST /chat/completions through the SDK's generic request method.

        `chat.completions.create` first walks the whole request through the SDK's TypedDict
        transformer (aliases, dates, files), which measured ~3 ms of CPU per request here, 40 % of
        a turn, growing with the history sent. Our bodies are plain JSON already, so we hand them
        to `client.post` (the SDK's documented way to make custom requests): the same transport,
        auth, retries with backoff and Retry-After, error types and SSE parsing. Answers come
        back as raw JSON (`cast_to=object`), read leniently by `_get`.
        """
        body = {**params, "stream": True} if stream else params
        return await self._client.post(
            "/chat/completions",
            body=body,
            cast_to=object,  # raw JSON: building SDK models per chunk cost ~2 ms per turn too
            stream=stream,
            stream_cls=openai.AsyncStream[object],
        )

    async def _plain(self, params: dict[str, Any]) -> ModelResponse:
        try:
            raw: Any = await self._create(params, stream=False)
        except Exception as exc:
            raise self._to_error(exc) from None
        try:
            return self._parse_completion(raw)
        except ModelError:
            raise
        except Exception as exc:  # a body of the wrong shape (choices as an object, ...)
            raise ModelError(
                "bad_response", f"unusable completion ({type(exc).__name__})"
            ) from None

    async def _streamed(
        self, params: dict[str, Any], on_delta: Callable[[str], Awaitable[None]]
    ) -> ModelResponse:
        try:
            stream = await self._open_stream(params)
        except Exception as exc:
            raise self._to_error(exc) from None
        acc = _StreamAccumulator()
        async with stream:
            chunks = stream.__aiter__()
            while True:
                # Only the SDK's side is mapped to ModelError; on_delta's own failures (the
                # caller's sink) propagate unchanged.
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    raise self._to_error(exc) from None
                try:
                    text = acc.add(chunk)
                except Exception as exc:
                    raise self._to_error(exc) from None
                if text:
                    await on_delta(text)
        if acc.chunks == 0:  # e.g. a server that ignored stream=True and sent plain JSON
            raise ModelError("bad_response", "the stream ended without a single chunk")
        try:
            return acc.result(params["model"])
        except Exception as exc:
            raise ModelError("bad_response", f"unusable stream ({type(exc).__name__})") from None

    async def _open_stream(self, params: dict[str, Any]) -> Any:
        """Open the SSE stream, asking for usage, and retry once without if that is refused."""
        if self._stream_usage:
            try:
                with_usage = {**params, "stream_options": {"include_usage": True}}
                return await self._create(with_usage, stream=True)
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                if "stream_options" not in str(exc):
                    raise
                log.info("stream_options rejected by %s; streaming without usage", self.endpoint)
                self._stream_usage = False
        return await self._create(params, stream=True)

    def _parse_completion(self, raw: Any) -> ModelResponse:
        """Turn a non-streamed completion into a ModelResponse, or say the body is unusable."""
        choices = _get(raw, "choices", None)
        if isinstance(raw, str) or not choices:
            raise ModelError("bad_response", "completion had no choices (or was not JSON)")
        choice = choices[0]
        message = _get(choice, "message", None)
        if message is None:
            raise ModelError("bad_response", "completion choice had no message")
        content = _get(message, "content", None) or _get(message, "refusal", None) or ""
        calls: list[ToolCallRequest] = []
        for call in _get(message, "tool_calls", None) or []:
            function = _get(call, "function", None)
            if function is None:  # a non-function ("custom") tool call: not something we offer
                continue
            calls.append(
                ToolCallRequest(
                    id=_get(call, "id", None) or _new_call_id(),
                    name=_get(function, "name", None) or "",
                    arguments=_as_text(_get(function, "arguments", None)),
                )
            )
        return ModelResponse(
            content=content if isinstance(content, str) else str(content),
            tool_calls=calls,
            finish_reason=_get(choice, "finish_reason", None),
            usage=_usage(_get(raw, "usage", None)),
            model=_get(raw, "model", None) or self.model,
        )

    # -- errors, logs, usage --------------------------------------------------------------

    def _to_error(self, exc: BaseException) -> ModelError:
        """Map whatever survived the SDK's retries onto the seven kinds the bot acts on."""
        kind: ModelErrorKind
        if isinstance(exc, ModelError):
            return exc
        transport = _transport_kind(exc) if isinstance(exc, openai.APIConnectionError) else None
        if transport is not None:
            kind = transport
        elif isinstance(exc, openai.APITimeoutError):
            kind = "timeout"
        elif isinstance(exc, openai.APIConnectionError):
            kind = "connection"
        elif isinstance(exc, openai.APIResponseValidationError):
            kind = "bad_response"
        elif isinstance(exc, openai.APIStatusError):
            kind = self._kind_for_status(exc.status_code)
        elif isinstance(exc, openai.APIError):  # an error event inside a stream
            kind = "unavailable"
        elif isinstance(exc, ValueError | TypeError | AttributeError | KeyError):
            kind = "bad_response"  # broken JSON or a body of the wrong shape
        else:
            kind = "unavailable"
        return ModelError(kind, self._describe(exc))

    @staticmethod
    def _kind_for_status(status: int) -> ModelErrorKind:
        if status == 429:
            return "rate_limited"
        if status in (401, 403):
            return "auth"
        if status == 408:
            return "timeout"
        if status >= 500 or status == 409:
            return "unavailable"
        return "bad_request"

    def _describe(self, exc: BaseException) -> str:
        """A log-safe one-liner: exception type, status, server message; key scrubbed, capped."""
        status = getattr(exc, "status_code", None)
        message = str(getattr(exc, "message", None) or exc) or type(exc).__name__
        text = f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "") + f": {message}"
        return self._scrub(" ".join(text.split()))[:_MAX_DETAIL]

    def _scrub(self, text: str) -> str:
        if self._api_key:
            text = text.replace(self._api_key, "[redacted]")
        return _KEY_PATTERN.sub("[redacted]", text)

    def _log_call(
        self, started: float, streamed: bool, outcome: str, response: ModelResponse | None
    ) -> None:
        usage = response.usage if response is not None else None
        fields = {
            "model": self.model,
            "duration_ms": round((time.perf_counter() - started) * 1000, 1),
            "prompt_tokens": usage.prompt_tokens if usage else None,
            "completion_tokens": usage.completion_tokens if usage else None,
            "streamed": streamed,
            "tool_calls": len(response.tool_calls) if response is not None else 0,
            "outcome": outcome,
        }
        level = logging.INFO if outcome == "ok" else logging.WARNING
        log.log(level, "model_call", extra={"fields": fields})


class _StreamAccumulator:
    """Builds one ModelResponse out of streamed chunks.

    Tool calls arrive as fragments keyed by `index`; some compatible servers omit the index or
    reuse index 0 for every call, so a fragment bringing a *different* id starts a new call.
    """

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[dict[str, Any]] = []  # {"id", "name", "args": list[str]}
        self.by_index: dict[int, int] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.model: str | None = None
        self.chunks = 0

    def add(self, chunk: Any) -> str:
        """Take one chunk in; return its text delta (possibly empty)."""
        self.chunks += 1
        model = _get(chunk, "model", None)
        if self.model is None and model:
            self.model = model
        usage = _get(chunk, "usage", None)
        if usage is not None:
            self.usage = _usage(usage) or self.usage
        choices = _get(chunk, "choices", None) or []
        if not choices:
            return ""
        choice = choices[0]
        finish_reason = _get(choice, "finish_reason", None)
        if finish_reason:
            self.finish_reason = finish_reason
        delta = _get(choice, "delta", None)
        if delta is None:
            return ""
        for fragment in _get(delta, "tool_calls", None) or []:
            self._add_call_fragment(fragment)
        text = _get(delta, "content", None) or _get(delta, "refusal", None) or ""
        if not isinstance(text, str):
            return ""  # a server sending content parts here: not text we can stream
        if text:
            self.text.append(text)
        return text

    def _add_call_fragment(self, fragment: Any) -> None:
        index = _get(fragment, "index", None)
        call_id = _get(fragment, "id", None)
        function = _get(fragment, "function", None)
        slot: int | None = None
        if isinstance(index, int) and index in self.by_index:
            slot = self.by_index[index]
            known_id = self.calls[slot]["id"]
            if call_id and known_id and call_id != known_id:
                slot = None  # same index, new id: a server that reuses indexes
        elif index is None and self.calls and (not call_id or call_id == self.calls[-1]["id"]):
            slot = len(self.calls) - 1  # index-less continuation of the latest call
        if slot is None:
            self.calls.append({"id": call_id or "", "name": "", "args": []})
            slot = len(self.calls) - 1
            if isinstance(index, int):
                self.by_index[index] = slot
        call = self.calls[slot]
        if call_id and not call["id"]:
            call["id"] = call_id
        if function is not None:
            name = _get(function, "name", None)
            if name and name != call["name"]:  # OpenAI sends the name once; tolerate repeats
                call["name"] = call["name"] + name if call["name"] else name
            args = _get(function, "arguments", None)
            if args:
                call["args"].append(_as_text(args))

    def result(self, fallback_model: str) -> ModelResponse:
        return ModelResponse(
            content="".join(self.text),
            tool_calls=[
                ToolCallRequest(
                    id=c["id"] or _new_call_id(), name=c["name"], arguments="".join(c["args"])
                )
                for c in self.calls
            ],
            finish_reason=self.finish_reason,
            usage=self.usage,
            model=self.model or fallback_model,
        )


def _aiohttp_client() -> Any:
    """The SDK's own aiohttp transport (`openai[aiohttp]`), or None for its httpx default.

    Why: the default httpx transport probes every pooled connection's socket on each send and
    release; under 50 concurrent turns that was a third of the bot's CPU, and the aiohttp one
    measured 2.4 ms less per turn (notes in README, Benchmarks). Same SDK request path: auth,
    retries with backoff and Retry-After, error types and SSE parsing stay the SDK's.
    """
    try:
        return openai.DefaultAioHttpClient()
    except (AttributeError, RuntimeError):  # an SDK without it, or the extra not installed
        return None


def _transport_kind(exc: BaseException) -> ModelErrorKind | None:
    """The kind an aiohttp failure really is, read from the exception's causes.

    The SDK's aiohttp adapter maps every `aiohttp.ClientConnectionError` (refused, reset,
    server disconnected) to an httpx *timeout*, so `APITimeoutError` alone would call a
    refused connection a timeout. None: no aiohttp error in the chain (httpx transport)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, aiohttp.ServerTimeoutError | TimeoutError):
            return "timeout"  # no answer within the connect or read timeout
        if isinstance(cause, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError):
            return "connection"  # refused, reset, dropped, or a body cut short
        cause = cause.__cause__ or cause.__context__
    return None


def _usage(raw: Any) -> Usage | None:
    """Read a usage object leniently (compatible servers omit fields or send nulls)."""
    if raw is None:
        return None
    prompt = _get(raw, "prompt_tokens", None)
    completion = _get(raw, "completion_tokens", None)
    if not isinstance(prompt, int) and not isinstance(completion, int):
        return None
    p = prompt if isinstance(prompt, int) else 0
    c = completion if isinstance(completion, int) else 0
    total = _get(raw, "total_tokens", None)
    cached = _get(_get(raw, "prompt_tokens_details", None), "cached_tokens", None)
    cached = cached if isinstance(cached, int) and 0 <= cached <= p else 0
    return Usage(p, c, total if isinstance(total, int) else p + c, cached)


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """A field of a raw JSON object (dict) or of an SDK model, leniently."""
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _as_text(value: Any) -> str:
    """Arguments are normally a JSON string; some servers send an object. Keep it raw text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _new_call_id() -> str:
    """An id for a tool call the server left unnamed, so the tool message can point at it."""
    return f"call_{uuid.uuid4().hex[:24]}"
