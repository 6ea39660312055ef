"""Whom a model request is for: set around a turn (the person, the place) or a background job
(the team only), read by the meter when the request returns.

A context variable, so the model client stays ignorant of turns and teams and every request
made inside a turn (tool rounds, the fact reconciler) is billed to it without being passed
along. Background work opens its own bill (`team_bill`): a summary scheduled from inside a turn
must not be billed to that turn's person.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class Bill:
    team: str  # TeamKey.id; "" when nobody in particular (a health check)
    place: str = ""  # the channel; "" for background work
    person: str = ""  # PersonKey.id; "" for background work
    audience: str = ""
    tokens: int = 0  # spent under this bill so far (prompt + completion)
    micros: int = 0  # its priced cost so far, micro-dollars
    requests: int = 0

    @property
    def background(self) -> bool:
        return not self.person


_CURRENT: ContextVar[Bill | None] = ContextVar("bot_usage_bill", default=None)


def current_bill() -> Bill | None:
    return _CURRENT.get()


@contextmanager
def billed_to(bill: Bill) -> Iterator[Bill]:
    token = _CURRENT.set(bill)
    try:
        yield bill
    finally:
        _CURRENT.reset(token)


def team_bill(team: str) -> Bill:
    return Bill(team=team)
