"""`FakeOpenAI`: a local HTTP server that speaks the OpenAI Chat Completions API.

Why: tests must drive the real `openai` client (its retries, SSE parsing, error mapping) without
the internet, and end-to-end runs (`bot chat` in a subprocess) need a model that behaves sensibly.

Use it from async tests::

    async with FakeOpenAI() as fake:
        fake.push(status(429, retry_after=1), text("hello"))
        fake.push(tool_calls([("remember", '{"fact": "likes tea"}')]))
        client = ModelClient(api_key="k", base_url=fake.base_url, model="m")

or from sync / subprocess tests (its own event loop in a background thread)::

    fake = FakeOpenAI().start_in_thread()
    env["OPENAI_BASE_URL"] = fake.base_url
    ...
    fake.stop()

or by hand: ``python -m testkit.fakes.openai_server --port 8900``.

Each chat request consumes the next scripted step (`push`); with an empty script the "brain"
answers (`default_brain`, replaceable via `brain=`). Every chat request body is recorded in
`fake.requests` (parsed JSON), its headers in `fake.request_headers`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import re
import socket
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from testkit.fakes import memory_brain
from testkit.fakes.openai_rules import (
    CONVERSATION_RULES,
    Rejection,
    Rule,
    first_rejection,
    image_parts_need_vision,
)

__all__ = [
    "Brain",
    "FakeOpenAI",
    "Step",
    "default_brain",
    "disconnect",
    "hang",
    "malformed_json_body",
    "reset",
    "status",
    "text",
    "tool_calls",
]


# --------------------------------------------------------------------------------------------
# Script steps


@dataclass(frozen=True)
class Reply:
    """An assistant answer: text and/or function tool calls (raw argument strings)."""

    content: str = ""
    calls: tuple[tuple[str, str], ...] = ()
    finish_reason: str | None = None  # default: "tool_calls" when there are calls, else "stop"
    usage: dict[str, Any] | None = None  # default: estimated (characters // 4)
    stall: float = 0.0  # when streaming: seconds of silence after the first chunk
    stall_after: int = 0  # ... or after this many more chunks (1: once the first text is out)


@dataclass(frozen=True)
class Status:
    """An HTTP error answer (429, 500, 401, ...), optionally with retry headers."""

    code: int
    retry_after: float | None = None
    retry_after_ms: int | None = None
    message: str | None = None
    body: Any = None  # a full JSON body instead of the standard error envelope


@dataclass(frozen=True)
class Hang:
    """Say nothing for `seconds`, then answer from the brain (if the client still waits)."""

    seconds: float


@dataclass(frozen=True)
class Malformed:
    """A 200 whose body is not valid JSON (or, when streaming, an SSE chunk that is not)."""


@dataclass(frozen=True)
class Disconnect:
    """Drop the connection without answering (`reset`: with a TCP RST instead of a FIN)."""

    reset: bool = False


Step = Reply | Status | Hang | Malformed | Disconnect
Brain = Callable[[dict[str, Any]], "Step | Awaitable[Step]"]


def text(
    content: str,
    *,
    usage: dict[str, Any] | None = None,
    finish_reason: str = "stop",
    stall: float = 0.0,
    stall_after: int = 0,
) -> Reply:
    """A plain text reply; `stall` makes a stream go silent after its first chunk (the role),
    or `stall_after` chunks later (1: after the first piece of text, which the client shows)."""
    return Reply(
        content=content,
        finish_reason=finish_reason,
        usage=usage,
        stall=stall,
        stall_after=stall_after,
    )


def tool_calls(
    calls: Sequence[tuple[str, str | dict[str, Any]]],
    *,
    content: str = "",
    usage: dict[str, Any] | None = None,
) -> Reply:
    """A reply calling function tools: [(name, arguments)]. Strings are sent verbatim, so
    malformed argument JSON is just `tool_calls([("remember", '{"fact": ')])`."""
    raw = tuple(
        (name, args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
        for name, args in calls
    )
    return Reply(content=content, calls=raw, usage=usage)


def status(
    code: int,
    *,
    retry_after: float | None = None,
    retry_after_ms: int | None = None,
    message: str | None = None,
    body: Any = None,
) -> Status:
    """An HTTP error. Note the SDK ignores `Retry-After: 0` (uses its own backoff instead);
    `retry_after_ms` gives sub-second retries for fast tests."""
    return Status(code, retry_after, retry_after_ms, message, body)


def hang(seconds: float) -> Hang:
    """No answer for `seconds` (longer than the client's timeout to provoke one)."""
    return Hang(seconds)


def malformed_json_body() -> Malformed:
    """A 200 OK with a broken JSON body."""
    return Malformed()


def disconnect() -> Disconnect:
    """Close the connection with no response."""
    return Disconnect()


def reset() -> Disconnect:
    """Reset the connection (RST, as a crashed server or a middlebox does) with no response."""
    return Disconnect(reset=True)


# --------------------------------------------------------------------------------------------
# The default brain


_REMEMBER = re.compile(r"\bremember\b|记住", re.IGNORECASE)
_LEAD = re.compile(r"^(?:\s|[:：,，、;；\-—]|that\b|this\b|please\b|:)+", re.IGNORECASE)
_TRAIL = re.compile(r"[\s.。!！?？,，;；:：]+$")


def message_text(message: dict[str, Any]) -> str:
    """The text of a message whose content is a string or a list of content parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def remembered_fact(user_text: str) -> str | None:
    """The fact in 'please remember that I like tea.' / '记住我对花生过敏。' ('I like tea')."""
    match = _REMEMBER.search(user_text)
    if match is None:
        return None
    fact = _TRAIL.sub("", _LEAD.sub("", user_text[match.end() :]))
    return fact or None


def _summary_value(schema: dict[str, Any], summary: str, name: str) -> Any:
    """A value fitting a (simple) JSON-schema node: lists empty, `summary`-ish strings filled."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "array":
        return []
    if kind == "object":
        props = schema.get("properties") or {}
        return {key: _summary_value(sub, summary, key) for key, sub in props.items()}
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return summary if name in ("summary", "text", "content", "") or "summar" in name else ""


def default_brain(request: dict[str, Any]) -> Step:
    """Deterministic rules so unscripted end-to-end runs make sense:

    1. structured output asked (`response_format` json_schema / json_object): a JSON object
       whose `summary` is the conversation's user/assistant text joined and cut to 200 chars,
       list fields empty (a json_schema's properties are all filled: strings "", numbers 0...);
    2. the last message is a tool result: a short confirmation ("Got it — I'll remember that."
       after `remember`, otherwise "Here's what I found: <tool output, 200 chars>");
    3. tools include `remember` (and tool_choice is not "none") and the last message is the
       user's saying "remember"/"记住": call `remember` with `fact` = the text after the
       keyword, trimmed of 'that', punctuation;
    4. otherwise "ok: <first 60 chars of the last user message>".
    """
    messages: list[dict[str, Any]] = request.get("messages") or []
    remembered = memory_brain.answer(request)  # fact reconciliation / extraction
    if remembered is not None:
        return text(remembered)
    fmt = request.get("response_format") or {}
    if fmt.get("type") in ("json_schema", "json_object"):
        said = " ".join(message_text(m) for m in messages if m.get("role") in ("user", "assistant"))
        summary = " ".join(said.split())[:200]
        schema = (fmt.get("json_schema") or {}).get("schema") or {}
        if fmt.get("type") == "json_schema" and schema.get("properties"):
            obj = _summary_value({**schema, "type": "object"}, summary, "")
        else:
            obj = {"summary": summary}
        return text(json.dumps(obj, ensure_ascii=False))

    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        names = _tool_names_of_results(messages)
        if names and all(n == "remember" for n in names):
            return text("Got it — I'll remember that.")
        return text("Here's what I found: " + message_text(last)[:200])

    user_text = next((message_text(m) for m in reversed(messages) if m.get("role") == "user"), "")
    offered = {(t.get("function") or {}).get("name") for t in request.get("tools") or [] if t}
    if request.get("tool_choice") == "none":
        offered = set()
    if last.get("role") == "user" and "remember" in offered:
        fact = remembered_fact(user_text)
        if fact:
            args: dict[str, Any] = {"fact": fact}
            topic = memory_brain.topic_of(fact)
            if topic and "topic" in _parameters(request, "remember"):
                args["topic"] = topic
            return tool_calls([("remember", args)])
    return text(f"ok: {user_text[:60]}")


def _parameters(request: dict[str, Any], tool: str) -> set[str]:
    for t in request.get("tools") or []:
        fn = (t or {}).get("function") or {}
        if fn.get("name") == tool:
            return set(((fn.get("parameters") or {}).get("properties") or {}).keys())
    return set()


def _tool_names_of_results(messages: list[dict[str, Any]]) -> list[str]:
    """Names of the tools whose results end the conversation (via the assistant's tool_calls)."""
    ids: list[str] = []
    for m in reversed(messages):
        if m.get("role") != "tool":
            break
        ids.append(str(m.get("tool_call_id", "")))
    names: dict[str, str] = {}
    for m in messages:
        for call in m.get("tool_calls") or []:
            names[str(call.get("id"))] = str((call.get("function") or {}).get("name", ""))
    return [names.get(i, "") for i in ids]


# --------------------------------------------------------------------------------------------
# The server


EMBEDDING_DIM = 64


def bag_of_words(text: str) -> list[float]:
    """A deterministic vector for the fake `/embeddings`: word counts hashed into buckets."""
    import hashlib

    vector = [0.0] * EMBEDDING_DIM
    for word in text.lower().split():
        word = word.strip(".,!?;:'\"()")
        if word:
            digest = hashlib.sha256(word.encode()).digest()
            vector[digest[0] % EMBEDDING_DIM] += 1.0
    return vector


def estimate_tokens(value: Any) -> int:
    """Rough token count (characters // 4, at least 1), enough for usage figures in tests."""
    as_text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return max(1, len(as_text) // 4)


@dataclass
class FakeOpenAI:
    """A scriptable OpenAI-compatible server (see the module docstring).

    `api_key`: when set, requests must carry `Authorization: Bearer <api_key>`, else 401 (whose
    message echoes the key that was sent, as real servers partly do, to test redaction).
    `latency`: seconds added before every chat answer; `chunk_delay`: between SSE chunks.
    `models_endpoint=False` makes GET /models 404 (servers without it).
    `stream_options="honour" | "ignore" | "reject"`: how `stream_options.include_usage` is met.
    `rules`: what the real API refuses with 400 (`testkit.fakes.openai_rules`: unknown roles, tool
    messages nobody asked for, tool calls left unanswered); `text_only_models`: models that, like
    OpenAI's text-only ones, also refuse `image_url` parts. Refusals are kept in `rejections`.
    """

    brain: Brain = default_brain
    api_key: str | None = None
    latency: float = 0.0
    chunk_delay: float = 0.0
    chunk_size: int = 8
    models: tuple[str, ...] = ("gpt-4o-mini", "fake-model")
    models_endpoint: bool = True
    stream_options: str = "honour"
    text_only_models: tuple[str, ...] = ("gpt-3.5-turbo", "text-only-model")
    host: str = "127.0.0.1"
    port: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)  # time.monotonic() of each request
    request_headers: list[dict[str, str]] = field(default_factory=list)
    script: deque[Step] = field(default_factory=deque)
    embedding_requests: list[dict[str, Any]] = field(default_factory=list)
    embeddings_down: bool = False  # /embeddings answers 500
    embeddings_usage: bool = True  # False: /embeddings answers without `usage`
    rules: tuple[Rule, ...] = CONVERSATION_RULES
    rejections: list[Rejection] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._counter = 0
        self.usage_sent: list[tuple[str, dict[str, Any]]] = []  # each usage object sent

    # -- script ---------------------------------------------------------------------------

    def push(self, *steps: Step) -> FakeOpenAI:
        """Queue steps; each chat request consumes one (thread-safe)."""
        self.script.extend(steps)
        return self

    def reset(self) -> None:
        """Forget recorded requests and pending steps."""
        self.requests.clear()
        self.arrivals.clear()
        self.request_headers.clear()
        self.rejections.clear()
        self.script.clear()
        self.usage_sent.clear()

    @property
    def base_url(self) -> str:
        """The value for `base_url` / OPENAI_BASE_URL, e.g. http://127.0.0.1:41234/v1."""
        if not self.port:
            raise RuntimeError("FakeOpenAI is not running")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def last_request(self) -> dict[str, Any]:
        return self.requests[-1]

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> FakeOpenAI:
        app = web.Application()
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/chat/completions", self._chat)
            app.router.add_get(f"{prefix}/models", self._models)
            app.router.add_post(f"{prefix}/embeddings", self._embeddings)
        app.router.add_get("/_fake/chats", self._dump_chats)
        # handler_cancellation: a client that gives up (timeout) cancels a hanging handler.
        self._runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1])
        self._stopping = asyncio.Event()
        return self

    async def close(self) -> None:
        if self._stopping is not None:
            self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeOpenAI:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def start_in_thread(self) -> FakeOpenAI:
        """Run in a background thread with its own loop (for sync and subprocess tests)."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # surfaced to the caller below
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.close())
            loop.close()

        self._thread = threading.Thread(target=run, name="FakeOpenAI", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        """Stop a server started with `start_in_thread`."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None
            self._loop = None

    def __enter__(self) -> FakeOpenAI:
        return self.start_in_thread()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- handlers -------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> web.Response | None:
        if self.api_key is None:
            return None
        given = request.headers.get("Authorization", "")
        if given == f"Bearer {self.api_key}":
            return None
        sent = given.removeprefix("Bearer ")
        return self._error(
            Status(401, message=f"Incorrect API key provided: {sent}."), "invalid_api_key"
        )

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        """`/embeddings`: deterministic bag-of-words vectors (words hashed into
        EMBEDDING_DIM buckets), so texts sharing words are close. Rejects what OpenAI rejects:
        no model, an input that is not a string or a list of non-empty strings."""
        denied = self._authorized(request)
        if denied is not None:
            return denied
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError:
            return self._error(Status(400, message="We could not parse the JSON body."), None)
        self.embedding_requests.append(body)
        if self.embeddings_down:
            return self._error(Status(500, message="The server had an error."), None)
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if (
            not isinstance(body.get("model"), str)
            or not isinstance(texts, list)
            or not texts
            or not all(isinstance(t, str) and t for t in texts)
        ):
            return self._error(Status(400, message="'$.input' is invalid."), None)
        data = [
            {"object": "embedding", "index": i, "embedding": bag_of_words(t)}
            for i, t in enumerate(texts)
        ]
        reply: dict[str, Any] = {"object": "list", "data": data, "model": body["model"]}
        if self.embeddings_usage:
            tokens = sum(estimate_tokens(t) for t in texts)
            reply["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
            self.usage_sent.append((str(body["model"]), reply["usage"]))
        return web.json_response(reply)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        denied = self._authorized(request)
        if denied is not None:
            return denied
        if not self.models_endpoint:
            return self._error(Status(404, message="Not found"), "not_found")
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _dump_chats(self, request: web.Request) -> web.Response:
        """When each chat request arrived and its last user message (for benchmarks running the
        fake in another process; CLOCK_MONOTONIC compares across processes on Linux)."""
        since = int(request.query.get("since", "0"))
        rows = []
        for at, body in zip(self.arrivals[since:], self.requests[since:], strict=True):
            messages = body.get("messages") if isinstance(body, dict) else None
            said = [
                m.get("content")
                for m in (messages if isinstance(messages, list) else [])
                if isinstance(m, dict) and m.get("role") == "user"
            ]
            last = said[-1] if said and isinstance(said[-1], str) else ""
            rows.append({"at": at, "user": last[:200]})
        return web.json_response(rows)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: dict[str, Any] = json.loads(raw or b"{}")
        except ValueError:
            return self._error(Status(400, message="We could not parse the JSON body."), None)
        self.requests.append(body)
        self.arrivals.append(time.monotonic())
        self.request_headers.append(dict(request.headers))
        denied = self._authorized(request)
        if denied is not None:
            return denied
        if body.get("stream_options") is not None and self.stream_options == "reject":
            return self._error(
                Status(400, message="Unrecognized request argument supplied: stream_options"),
                None,
            )
        rules = (*self.rules, image_parts_need_vision(self.text_only_models))
        rejection = first_rejection(body, rules)
        if rejection is not None:
            self.rejections.append(rejection)
            return web.json_response(rejection.body(), status=400)
        if self.latency:
            await asyncio.sleep(self.latency)

        step: Step
        try:
            step = self.script.popleft()
        except IndexError:
            step = await self._think(body)

        if isinstance(step, Hang):
            await self._sleep(step.seconds)
            step = await self._think(body)
        if isinstance(step, Status):
            return self._error(step, None)
        if isinstance(step, Disconnect):
            transport = request.transport
            if transport is not None:
                sock = transport.get_extra_info("socket")
                if step.reset and sock is not None:  # linger 0: close() sends RST, not FIN
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                transport.abort()
            return web.Response(status=500)
        if isinstance(step, Malformed):
            if body.get("stream"):
                return await self._stream_raw(request, ['{"id": "chatcmpl-broken", "choices": [{'])
            return web.Response(
                body=b'{"id": "chatcmpl-broken", "choices": [{"message": ',
                content_type="application/json",
            )
        assert isinstance(step, Reply)
        if body.get("stream"):
            return await self._stream_reply(request, body, step)
        return web.json_response(self._completion(body, step))

    async def _think(self, body: dict[str, Any]) -> Step:
        result = self.brain(body)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake early when the server is shutting down."""
        assert self._stopping is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    # -- bodies ---------------------------------------------------------------------------

    def _error(self, step: Status, code: str | None) -> web.Response:
        headers: dict[str, str] = {}
        if step.retry_after is not None:
            headers["Retry-After"] = f"{step.retry_after:g}"
        if step.retry_after_ms is not None:
            headers["retry-after-ms"] = str(step.retry_after_ms)
        kinds = {400: "invalid_request_error", 401: "invalid_request_error", 429: "requests"}
        body = step.body
        if body is None:
            body = {
                "error": {
                    "message": step.message or f"Fake error {step.code}",
                    "type": kinds.get(step.code, "server_error"),
                    "param": None,
                    "code": code,
                }
            }
        return web.json_response(body, status=step.code, headers=headers)

    def _next_id(self) -> str:
        self._counter += 1
        return f"chatcmpl-fake-{self._counter}"

    def _usage(self, body: dict[str, Any], step: Reply) -> dict[str, Any]:
        """The usage sent with a reply, logged in `usage_sent` (model, usage) as sent."""
        usage = self._make_usage(body, step)
        self.usage_sent.append((str(body.get("model", "")), usage))
        return usage

    def _make_usage(self, body: dict[str, Any], step: Reply) -> dict[str, Any]:
        if step.usage is not None:
            return dict(step.usage)
        prompt = estimate_tokens(body.get("messages") or []) + (
            estimate_tokens(body["tools"]) if body.get("tools") else 0
        )
        completion = estimate_tokens(step.content + "".join(n + a for n, a in step.calls))
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    @staticmethod
    def _finish(step: Reply) -> str:
        return step.finish_reason or ("tool_calls" if step.calls else "stop")

    def _completion(self, body: dict[str, Any], step: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": step.content or None}
        if step.calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {"name": name, "arguments": args},
                }
                for name, args in step.calls
            ]
        else:
            message["content"] = step.content
        return {
            "id": self._next_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": self._finish(step),
                    "logprobs": None,
                }
            ],
            "usage": self._usage(body, step),
        }

    def _chunks(self, body: dict[str, Any], step: Reply) -> Iterator[dict[str, Any]]:
        """The SSE chunk sequence OpenAI sends: role, text pieces, tool-call deltas by index,
        a finish chunk, then (when asked) a usage chunk with no choices."""
        base = {
            "id": self._next_id(),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
        }
        opts = body.get("stream_options") or {}
        with_usage = bool(opts.get("include_usage")) and self.stream_options == "honour"
        extra: dict[str, Any] = {"usage": None} if with_usage else {}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return {**base, "choices": [choice], **extra}

        size = max(1, self.chunk_size)
        yield chunk({"role": "assistant", "content": ""})
        for i in range(0, len(step.content), size):
            yield chunk({"content": step.content[i : i + size]})
        for index, (name, args) in enumerate(step.calls):
            head = {
                "index": index,
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            yield chunk({"tool_calls": [head]})
            for i in range(0, len(args), size):
                piece = {"index": index, "function": {"arguments": args[i : i + size]}}
                yield chunk({"tool_calls": [piece]})
        yield chunk({}, self._finish(step))
        if with_usage:
            yield {**base, "choices": [], "usage": self._usage(body, step)}

    async def _stream_reply(
        self, request: web.Request, body: dict[str, Any], step: Reply
    ) -> web.StreamResponse:
        return await self._stream_raw(
            request,
            [json.dumps(c, ensure_ascii=False) for c in self._chunks(body, step)],
            stall=step.stall,
            stall_at=step.stall_after,
        )

    async def _stream_raw(
        self, request: web.Request, payloads: list[str], *, stall: float = 0.0, stall_at: int = 0
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for n, payload in enumerate([*payloads, "[DONE]"]):
            await response.write(f"data: {payload}\n\n".encode())
            if stall and n == stall_at:
                await self._sleep(stall)
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
        await response.write_eof()
        return response


def main(argv: list[str] | None = None) -> None:
    """Serve the fake by hand, e.g. for `OPENAI_BASE_URL=http://127.0.0.1:8900/v1 bot chat`."""
    parser = argparse.ArgumentParser(description="A fake OpenAI Chat Completions server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8900)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per chat request")
    parser.add_argument("--api-key", default=None, help="require this bearer key")
    args = parser.parse_args(argv)

    async def serve() -> None:
        fake = FakeOpenAI(
            host=args.host, port=args.port, latency=args.latency, api_key=args.api_key
        )
        async with fake:
            print(f"FakeOpenAI listening: OPENAI_BASE_URL={fake.base_url}", flush=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
