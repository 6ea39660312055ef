"""A circuit breaker per tool provider, so a dead upstream answers "unavailable" at once.

Each provider (the weather pack; one orders or MCP install) has a breaker: after `threshold`
consecutive transient failures (timeouts, connection errors, 5xx/429) it opens, and calls to that
provider's tools fail immediately for `cooldown` seconds instead of waiting on timeouts. Then it
half-opens: one probe call goes through while the others still fail fast; a success closes it,
a failure opens it again for another cool-down.

Why not a library: PyPI's asyncio breakers were checked. `purgatory` (3.x, maintained) lets every
concurrent call through while half-open and reads the wall clock (no injectable clock, so tests
would have to sleep through the cool-down); `aiobreaker` is unmaintained; `pybreaker` reaches
asyncio only through Tornado; `circuitbreaker` is a decorator with a process-global registry and
no single-probe half-open either. The state machine below is ~100 lines, has no I/O, and runs in
the executor's event loop without locks (every transition is synchronous).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]
StateListener = Callable[[str, BreakerState, BreakerState], None]
"""Called as `(provider, old state, new state)` on every transition (metrics, audit)."""


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    threshold: int = 5  # consecutive transient failures that open the breaker
    cooldown: float = 30.0  # seconds open before one probe is let through


class CircuitBreaker:
    """The breaker of one provider. `allow()` before a call; then `success()` or `failure()`."""

    __slots__ = (
        "_clock",
        "_listener",
        "_probing",
        "config",
        "failures",
        "opened_at",
        "opens",
        "provider",
        "state",
    )

    def __init__(
        self,
        provider: str,
        config: BreakerConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        listener: StateListener | None = None,
    ) -> None:
        self.provider = provider
        self.config = config
        self.state: BreakerState = "closed"
        self.failures = 0
        self.opened_at = 0.0
        self.opens = 0  # how many times it opened (for metrics)
        self._probing = False
        self._clock = clock
        self._listener = listener

    def allow(self) -> bool:
        """May a call go to the provider now? Open: no, until the cool-down has passed; then
        exactly one probe (half-open) until it reports back."""
        if self.state == "closed":
            return True
        if self.state == "open":
            if self._clock() - self.opened_at < self.config.cooldown:
                return False
            self._set("half_open")
        if self._probing:
            return False
        self._probing = True
        return True

    def retry_in(self) -> float:
        """Seconds until a probe may go through (0 when closed or half-open)."""
        if self.state != "open":
            return 0.0
        return max(0.0, self.config.cooldown - (self._clock() - self.opened_at))

    def success(self) -> None:
        """The provider answered (a business error such as "not found" is an answer too)."""
        self.failures = 0
        self._probing = False
        if self.state != "closed":
            self._set("closed")

    def failure(self) -> None:
        """A transient failure: timeout, connection trouble, 5xx/429."""
        self._probing = False
        self.failures += 1
        if self.state == "half_open" or (
            self.state == "closed" and self.failures >= self.config.threshold
        ):
            self.opened_at = self._clock()
            self.opens += 1
            self._set("open")

    def release(self) -> None:
        """The call ended without saying anything about the provider (a bug in the tool, an
        argument error): a half-open probe slot is given back."""
        self._probing = False

    def _set(self, new: BreakerState) -> None:
        old, self.state = self.state, new
        if self._listener is not None and old != new:
            self._listener(self.provider, old, new)


class BreakerBoard:
    """The breakers of every provider, created on first use; what /tools and /metrics read."""

    def __init__(
        self,
        config: BreakerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_providers: int = 10_000,
    ) -> None:
        self.config = config or BreakerConfig()
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}
        self._listeners: list[StateListener] = []
        self._max = max_providers

    def add_listener(self, listener: StateListener) -> None:
        self._listeners.append(listener)

    def get(self, provider: str) -> CircuitBreaker:
        brk = self._breakers.get(provider)
        if brk is None:
            if len(self._breakers) >= self._max:
                self._forget_closed()
            brk = CircuitBreaker(provider, self.config, clock=self._clock, listener=self._notify)
            self._breakers[provider] = brk
        return brk

    def state(self, provider: str) -> BreakerState:
        brk = self._breakers.get(provider)
        return "closed" if brk is None else brk.state

    def snapshot(self) -> dict[str, CircuitBreaker]:
        return dict(self._breakers)

    def forget(self, provider: str) -> None:
        """Drop a removed install's breaker."""
        self._breakers.pop(provider, None)

    def _forget_closed(self) -> None:
        for key in [k for k, b in self._breakers.items() if b.state == "closed"]:
            del self._breakers[key]

    def _notify(self, provider: str, old: BreakerState, new: BreakerState) -> None:
        for listener in self._listeners:
            try:
                listener(provider, old, new)
            except Exception:  # a listener must never break a tool call
                continue
