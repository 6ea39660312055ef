"""Sessions to MCP servers, pooled per install, with the server's tool list cached.

One `McpConnection` per install (team + pack name) holds one `mcp.Client` over streamable HTTP:
its HTTP connections are reused by every call of every turn, instead of a handshake per call.
The client lives in a task of its own (the SDK's anyio task groups must be entered and left by
the same task); calls from turns go through it concurrently.

The tool list is cached and refreshed when the server says it changed (the 2025-era
`notifications/tools/list_changed`, or a 2026-era `subscriptions/listen` stream) or after a TTL.
A change notice re-lists in the background, debounced (`RELIST_DEBOUNCE`: a burst of notices
costs one listing) and bounded (at most one listing per `RELIST_MIN_INTERVAL` however often the
server says it changed; a turn that finds the list stale waits for that re-listing instead of
listing again itself). Listings are single-flight: concurrent turns share one. The TTL is the
server's own freshness hint when it gives a shorter one than `ttl` (2026-07-28 `ttlMs` on
`tools/list`, at least `MIN_LIST_TTL`: 0, the SDK's default, "immediately stale", re-lists on
each turn but at most once a second); a server cannot make the bot keep a list longer. Its
`cacheScope` is recorded (`cache_scope`): one connection holds one authorization context, so a
listing is never shared across contexts anyway.
A server that cannot be reached is marked down and not retried for `retry_after` seconds, so a
dead server costs a turn nothing; the next attempt after that reconnects. A server that keeps
failing waits twice as long each time (up to `MAX_RETRY_AFTER`). A connect or listing that is
cut short by the caller's own deadline (the toolbox gives a turn 8 s per install) counts as a
failure too: before, a hung server was cancelled before it could be marked down, so every turn
waited the full 8 s again.

Everything the server sends goes through `tools.mcp.inbound` first: capped in bytes, trimmed
(tools, parts, texts), parsed off the event loop.

A call is cut after `call_timeout` seconds without an answer or a progress notification (a
server gone silent), and after `call_cap` seconds in all (a server that reports progress for
ever): progress only ever extends the idle deadline, never past the cap.

The bearer token goes in one header of this install's HTTP client and nowhere else: never in a
log line, an error message or anything the model sees. Requests go through the operator's host
policy (`tools.netguard`), redirects included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Literal

import anyio
import httpx2
import mcp_types as types

from tools.errors import ToolBusinessError, ToolTimedOut, ToolTransientError
from tools.mcp.inbound import MAX_MESSAGE_BYTES, TOO_LARGE, BoundedTransport
from tools.netguard import ANY_HOST, BlockedHost, HostPolicy, event_hooks

if TYPE_CHECKING:
    from mcp import Client

# The `mcp` SDK itself is imported on first use: it pulls in OpenTelemetry and its server side,
# which a bot with no MCP install never needs (and `bot` imports this module at start).

log = logging.getLogger("tools.mcp")
# The SDK's HTTP client logs every request line at INFO; the bot logs its own, without URLs.
logging.getLogger("httpx2").setLevel(logging.WARNING)

MAX_TOOLS = 128
MAX_PAGES = 10
MAX_RETRY_AFTER = 300.0
RELIST_DEBOUNCE = 0.2  # seconds a change notice waits for more before the re-listing
RELIST_MIN_INTERVAL = 1.0  # seconds between two listings caused by change notices
MIN_LIST_TTL = 1.0  # a server's ttlMs hint below this (0: "always stale") counts as this
Health = Literal["new", "ok", "down"]
_background: set[asyncio.Task[None]] = set()


class CallIdle(ToolTimedOut):
    """A call's server went quiet for the idle timeout (no answer, no progress); the message
    says so and is safe to show."""


class ServerDown(Exception):
    """The server cannot be reached or refused the session; the message is safe to show."""


def describe_failure(exc: BaseException) -> str:
    """A short reason, without URLs, headers or tokens."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, BlockedHost):
        return str(exc)
    if isinstance(exc, httpx2.HTTPStatusError):
        code = exc.response.status_code
        if code in (401, 403):
            return f"the server refused the bot's credentials (HTTP {code})"
        return f"the server answered HTTP {code}"
    if isinstance(exc, httpx2.TimeoutException | TimeoutError):
        return "the server did not answer in time"
    if isinstance(exc, httpx2.TransportError | OSError):
        return "the server could not be reached"
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, MCPError):
        if exc.error.code == types.CONNECTION_CLOSED:
            return "the server could not be reached"
        if exc.error.code == types.REQUEST_TIMEOUT:
            return "the server did not answer in time"
        if exc.error.code == TOO_LARGE:
            return exc.error.message[:200]
        return f"the server refused the session ({exc.error.message[:120]})"
    return f"the session failed ({type(exc).__name__})"


class McpConnection:
    """One install's session to its server, and its cached tool list."""

    def __init__(
        self,
        key: str,
        url: str,
        token: str | None,
        *,
        policy: HostPolicy = ANY_HOST,
        ttl: float = 300.0,
        connect_timeout: float = 5.0,
        retry_after: float = 10.0,
        call_timeout: float = 20.0,
        call_cap: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        auth: httpx2.Auth | None = None,
    ) -> None:
        self.key = key
        self.auth = auth  # a person's OAuth (`auth=user` packs): tokens never in `headers`
        self.call_timeout = call_timeout  # idle: seconds without an answer or progress
        self.call_cap = call_cap  # absolute: seconds a call may take, progress or not
        self.url = url
        self._token = token
        self._policy = policy
        self.ttl = ttl
        self.connect_timeout = connect_timeout
        self.retry_after = retry_after
        self._clock = clock
        self.health: Health = "new"
        self.detail = ""
        self.checked_at = 0.0
        self.version = 0  # bumped when the tool list changes
        self._tools: list[types.Tool] | None = None
        self._listed_at = 0.0
        self._list_ttl = ttl  # the server's hint when it gives one
        self.cache_scope: str | None = None  # the server's cacheScope for its listing
        self._stale = False
        self._listing = asyncio.Lock()
        self._relist: asyncio.Task[None] | None = None
        self._behind: asyncio.Task[None] | None = None  # a re-listing after the TTL ran out
        self.relists = 0  # listings caused by change notices (bounded by RELIST_MIN_INTERVAL)
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self.adapted: Any = None  # the pack's cache of Tool objects built from this listing
        self._refused: int | None = None  # the last 401/403 the server answered
        self.failures = 0  # consecutive failed connects/listings (the retry wait doubles)

    @property
    def fingerprint(self) -> tuple[str, str | None]:
        return (self.url, self._token)

    # connection ---------------------------------------------------------------------------

    async def client(self) -> Client:
        """The live client, connecting if needed; ServerDown when it cannot (nothing was sent)."""
        client = self._client
        if client is not None and self._task is not None and not self._task.done():
            return client
        async with self._lock:
            client = self._client
            if client is not None and self._task is not None and not self._task.done():
                return client
            if self.health == "down" and self._clock() - self.checked_at < self.backoff():
                raise ServerDown(self.detail)
            return await self._connect()

    def backoff(self) -> float:
        """Seconds a down server is left alone: `retry_after`, doubled per further failure."""
        if self.failures <= 1:
            return self.retry_after
        return float(min(MAX_RETRY_AFTER, self.retry_after * 2 ** min(self.failures - 1, 16)))

    async def _connect(self) -> Client:
        await self._shutdown()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run(ready, self._stop), name=f"mcp:{self.key}")
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout)
        except asyncio.CancelledError:
            # The caller's deadline (or shutdown) came first: a hung server is down all the
            # same, or the next turn would wait for it again.
            self._mark_down("the server did not answer in time")
            self._in_background(self._shutdown())
            raise
        except (TimeoutError, Exception) as exc:
            reason = describe_failure(exc) if not isinstance(exc, ServerDown) else str(exc)
            self._mark_down(reason)  # before the shutdown, which may itself be cut short
            await self._shutdown()
            raise ServerDown(reason) from None
        self._mark_up()
        return client

    async def _run(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        hooks = event_hooks(self._policy)
        hooks["response"].append(self._note_status)
        try:
            async with httpx2.AsyncClient(
                headers=headers,
                auth=self.auth,
                event_hooks=hooks,
                timeout=httpx2.Timeout(30.0, read=300.0),
                transport=BoundedTransport(httpx2.AsyncHTTPTransport(), self.key),
            ) as http:
                transport = streamable_http_client(
                    self.url, http_client=http, max_sse_event_size=MAX_MESSAGE_BYTES + 65_536
                )
                async with Client(
                    transport, mode="auto", message_handler=self._on_message, cache=None
                ) as client:
                    self._client = client
                    if not ready.done():
                        ready.set_result(client)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._listen, client)
                        await stop.wait()
                        tg.cancel_scope.cancel()
        except BaseException as exc:
            if not ready.done():
                why = describe_failure(exc)
                if self._refused is not None:
                    why = f"the server refused the bot's credentials (HTTP {self._refused})"
                ready.set_exception(ServerDown(why))
            elif not stop.is_set():
                self._mark_down(describe_failure(exc))
                log.warning(
                    "mcp_session_lost",
                    extra={"fields": {"install": self.key, "reason": describe_failure(exc)}},
                )
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._client = None

    async def _listen(self, client: Client) -> None:
        """2026-era servers announce list changes on a `subscriptions/listen` stream."""
        try:
            async with client.listen(tools_list_changed=True) as sub:
                async for _event in sub:
                    self._changed()
        except Exception:
            return  # not supported (2025-era: notifications arrive via _on_message) or lost

    async def _on_message(self, message: Any) -> None:
        method = getattr(message, "method", None) or getattr(
            getattr(message, "root", None), "method", None
        )
        if method == "notifications/tools/list_changed":
            self._changed()

    def _changed(self) -> None:
        """The server says its tools changed: mark the list stale and re-list soon, once for a
        burst of notices, never more often than `RELIST_MIN_INTERVAL`."""
        self._stale = True
        if self._relist is None or self._relist.done():
            self._relist = asyncio.get_running_loop().create_task(self._relist_later())

    async def _relist_later(self) -> None:
        wait = max(RELIST_DEBOUNCE, self._listed_at + RELIST_MIN_INTERVAL - self._clock())
        await asyncio.sleep(wait)
        if not self._stale:
            return
        self.relists += 1
        with contextlib.suppress(Exception):  # a failed listing marks the server down itself
            await self.tools()

    def _mark_down(self, reason: str) -> None:
        if self._refused is not None:
            reason = f"the server refused the bot's credentials (HTTP {self._refused})"
        if self.health != "down" or self.detail != reason or self.failures == 0:
            log.warning(
                "mcp_server_down", extra={"fields": {"install": self.key, "reason": reason}}
            )
        self.failures += 1
        self.health, self.detail, self.checked_at = "down", reason, self._clock()

    def mark_down(self, reason: str) -> None:
        """Mark the server down from outside (the toolbox's deadline passed)."""
        if self.health != "down" or self._clock() - self.checked_at >= self.backoff():
            self._mark_down(reason)

    def _in_background(self, aw: Coroutine[Any, Any, None]) -> None:
        """A clean-up the cancelled caller must not wait for (it may take seconds)."""
        task = asyncio.get_running_loop().create_task(aw)
        _background.add(task)
        task.add_done_callback(_background.discard)

    def mark_stale(self) -> None:
        """List the tools again on next use (a person's token is due for refresh: the listing
        refreshes it at the turn's start, not in the middle of a tool call)."""
        self._stale = True

    def _mark_up(self) -> None:
        self.health, self.detail, self.checked_at, self.failures = "ok", "", self._clock(), 0

    async def _note_status(self, response: Any) -> None:
        code = response.status_code
        self._refused = code if code in (401, 403) else None if code < 400 else self._refused

    async def _shutdown(self) -> None:
        task, stop = self._task, self._stop
        self._task = self._stop = None
        self._client = None
        if task is None:
            return
        if stop is not None:
            stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 3.0)
        except (TimeoutError, Exception):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def close(self) -> None:
        for task in (self._relist, self._behind):
            if task is not None and task is not asyncio.current_task():
                task.cancel()  # a closed connection does not reconnect to re-list
        self._relist = self._behind = None
        async with self._lock:
            await self._shutdown()

    # tools --------------------------------------------------------------------------------

    def _fresh(self) -> bool:
        fresh = self._clock() - self._listed_at < self._list_ttl
        return self._tools is not None and fresh and not self._stale and self.health != "down"

    async def tools(self) -> list[types.Tool]:
        """The server's tools: cached; refreshed after the TTL, or when it said they changed.

        When only the TTL ran out (no change notice, the server up), the turn gets the list it
        has and the re-listing runs behind it (stale-while-revalidate): a server that keeps the
        SDK's default `ttlMs: 0` would otherwise cost every turn a listing round trip. After a
        change notice, or with no list at all, the turn waits for the listing."""
        if self._fresh() and self._tools is not None:
            return self._tools
        if self._tools is not None and not self._stale and self.health != "down":
            if self._behind is None or self._behind.done():
                self._behind = asyncio.get_running_loop().create_task(self._relist_behind())
            return self._tools
        relist = self._relist
        due = relist is not None and not relist.done() and relist is not asyncio.current_task()
        if self._stale and due and relist is not None and self._tools is not None:
            # A re-listing is due (a change notice): wait for it rather than list again.
            with contextlib.suppress(Exception):
                await asyncio.shield(relist)
            if self._fresh():
                return self._tools
        async with self._listing:  # single-flight: a turn that waited here finds it fresh
            if self._fresh() and self._tools is not None:
                return self._tools
            return await self._list_now()

    async def _relist_behind(self) -> None:
        async with self._listing:
            if self._fresh():
                return
            with contextlib.suppress(Exception):  # a failed listing marks the server down
                await self._list_now()

    async def relisted(self) -> None:
        """Until a re-listing running behind the turns is done (tests, shutdown)."""
        behind = self._behind
        if behind is not None and behind is not asyncio.current_task():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(behind)

    async def _list_now(self) -> list[types.Tool]:
        client = await self.client()
        self._stale = False
        try:
            listing, ttl_ms, scope = await asyncio.wait_for(
                self._list(client), self.connect_timeout
            )
        except asyncio.CancelledError:
            self._mark_down("the server did not list its tools in time")
            self._in_background(self.close())
            raise
        except Exception as exc:
            self._mark_down(describe_failure(exc))
            await self.close()
            raise ServerDown(self.detail) from None
        if listing != self._tools:
            self.version += 1
        self._tools, self._listed_at = listing, self._clock()
        # The server may ask for fresher listings than the bot's TTL, never for staler ones.
        hinted = self.ttl if ttl_ms is None else max(MIN_LIST_TTL, ttl_ms / 1000)
        self._list_ttl = min(self.ttl, hinted)
        self.cache_scope = scope
        self._mark_up()
        return listing

    async def _list(self, client: Client) -> tuple[list[types.Tool], int | None, str | None]:
        """All pages (bounded), with the server's freshness hint: the shortest `ttlMs` of its
        pages, and its `cacheScope` ("private" if any page says so)."""
        out: list[types.Tool] = []
        ttls: list[int] = []
        scopes: set[str] = set()
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            out.extend(page.tools)
            if "ttl_ms" in page.model_fields_set:  # on the wire (2026-07-28), not a default
                ttls.append(page.ttl_ms)
            if "cache_scope" in page.model_fields_set:
                scopes.add(page.cache_scope)
            cursor = page.next_cursor
            if cursor is None or len(out) >= MAX_TOOLS:
                break
        scope = "private" if "private" in scopes else next(iter(scopes), None)
        return out[:MAX_TOOLS], min(ttls) if ttls else None, scope

    async def _call_with_progress(
        self, client: Client, name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """The call, cut after `call_timeout` seconds without an answer or a progress
        notification, and after `call_cap` seconds in all however much progress it reports."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        cap_at = started + max(self.call_cap, self.call_timeout)
        timer = asyncio.timeout_at(min(started + self.call_timeout, cap_at))
        progressed = 0

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            nonlocal progressed
            progressed += 1
            if not timer.expired():
                timer.reschedule(min(loop.time() + self.call_timeout, cap_at))

        try:
            async with timer:
                return await client.call_tool(name, arguments, progress_callback=on_progress)
        except TimeoutError:
            if not timer.expired():
                raise
            if loop.time() >= cap_at - 0.001:
                log.warning(
                    "mcp_call_cut_at_cap",
                    extra={"fields": {"install": self.key, "progress": progressed}},
                )
                raise ToolBusinessError(
                    f"The tool was still working after {self.call_cap:g} s (the most a call may "
                    "take) and was stopped; it may or may not have finished its work."
                ) from None
            raise CallIdle(f"sent no answer and no progress for {self.call_timeout:g} s") from None

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call one tool. Raises ToolTransientError when nothing was sent (safe to retry),
        ConnectionError/TimeoutError when the outcome is unknown, ToolBusinessError when the
        server refused the request itself."""
        from mcp.shared.exceptions import MCPError

        try:
            client = await self.client()
        except ServerDown as exc:
            raise ToolTransientError(str(exc)) from None
        try:
            return await self._call_with_progress(client, name, arguments)
        except ToolTimedOut:
            raise  # an OSError too (TimeoutError): not a lost connection
        except MCPError as exc:
            if exc.error.code in (types.INVALID_PARAMS, types.METHOD_NOT_FOUND):
                raise ToolBusinessError(
                    f"The server refused the call: {exc.error.message[:500]}"
                ) from None
            if exc.error.code == types.INVALID_REQUEST:
                raise ToolBusinessError("The server refused the request as invalid.") from None
            if exc.error.code == TOO_LARGE:
                raise ToolBusinessError(
                    f"The tool's answer was too large to read ({exc.error.message[:200]})."
                ) from None
            self._mark_down(describe_failure(exc))
            raise ConnectionError(describe_failure(exc)) from None
        except httpx2.HTTPStatusError as exc:
            if exc.response.status_code in (401, 403):
                raise ToolBusinessError(
                    f"The tool server refused the bot's credentials (HTTP "
                    f"{exc.response.status_code}). Tell the user an admin needs to reinstall "
                    "this pack with a valid token."
                ) from None
            raise ConnectionError(describe_failure(exc)) from None
        except (httpx2.TransportError, OSError, anyio.ClosedResourceError) as exc:
            self._mark_down(describe_failure(exc))
            await self.close()
            raise ConnectionError(describe_failure(exc)) from None


class McpPool:
    """Connections by install; one per install, replaced when its URL or token changes."""

    def __init__(
        self,
        policy: HostPolicy = ANY_HOST,
        *,
        ttl: float = 300.0,
        connect_timeout: float = 5.0,
        retry_after: float = 10.0,
        call_timeout: float = 20.0,
        call_cap: float = 120.0,
    ) -> None:
        self.policy = policy
        self.call_timeout = call_timeout
        self.call_cap = call_cap
        self.ttl = ttl
        self.connect_timeout = connect_timeout
        self.retry_after = retry_after
        self._conns: dict[str, McpConnection] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def connection(
        self, key: str, url: str, token: str | None, *, auth: httpx2.Auth | None = None
    ) -> McpConnection:
        """The install's session; with `auth`, a person's own (`key` names the person), kept
        until `forget` (their sign-in changed) or its URL changes."""
        conn = self._conns.get(key)
        if conn is not None and conn.fingerprint == (url, token):
            return conn
        if conn is not None:  # reinstalled with another URL or token: the old session goes
            task = asyncio.get_running_loop().create_task(conn.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        conn = McpConnection(
            key,
            url,
            token,
            policy=self.policy,
            ttl=self.ttl,
            connect_timeout=self.connect_timeout,
            retry_after=self.retry_after,
            call_timeout=self.call_timeout,
            call_cap=self.call_cap,
            auth=auth,
        )
        self._conns[key] = conn
        return conn

    def get(self, key: str) -> McpConnection | None:
        return self._conns.get(key)

    def keys(self) -> list[str]:
        return list(self._conns)

    async def forget(self, key: str) -> None:
        conn = self._conns.pop(key, None)
        if conn is not None:
            await conn.close()

    async def aclose(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
