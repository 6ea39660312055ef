"""Metered usage kept per day: what both backends implement.

One row per (day, team, place, person, model, kind) holds counts that only ever grow (requests,
prompt, cached prompt and completion tokens, cost in micro-dollars, requests whose counts were
estimated), so a batch of requests is one increment per row and a report is a sum.

Privacy: a row names the person whose turn it was and the audience of the place (as every
record derived from someone's words does). `/memory forget all` moves the person's rows to
`FORGOTTEN`: the team's totals (its bill) stay right, nothing says whose they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

FORGOTTEN = "(forgotten)"
KEPT_DAYS = 400  # rows older than this are dropped (a year of monthly reports and then some)
MAX_FIELD_CHARS = 200  # ids and model names are short; a longer one is cut


@dataclass(frozen=True, slots=True)
class UsageRow:
    day: str  # YYYY-MM-DD, UTC
    team: str  # TeamKey.id
    place: str  # the channel; "" for background work (summaries, consolidation)
    person: str  # PersonKey.id; "" for background work; FORGOTTEN after forget
    model: str
    kind: str  # "chat", "summary", "memory", "extract", "embedding", ...
    audience: str = ""  # the place's audience id (bot.audience)
    requests: int = 0
    prompt: int = 0
    cached: int = 0
    completion: int = 0
    cost_micros: int = 0
    unpriced: int = 0  # requests of a model without a price (their cost is not in cost_micros)
    estimated: int = 0  # requests whose token counts were estimated (the server sent none)

    @property
    def key(self) -> tuple[str, str, str, str, str, str]:
        return (self.day, self.team, self.place, self.person, self.model, self.kind)

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion

    def plus(self, other: UsageRow) -> UsageRow:
        return replace(
            self,
            audience=other.audience or self.audience,
            requests=self.requests + other.requests,
            prompt=self.prompt + other.prompt,
            cached=self.cached + other.cached,
            completion=self.completion + other.completion,
            cost_micros=self.cost_micros + other.cost_micros,
            unpriced=self.unpriced + other.unpriced,
            estimated=self.estimated + other.estimated,
        )


def bounded(row: UsageRow) -> UsageRow:
    """The store's own bounds on what a row may name."""
    cut = MAX_FIELD_CHARS
    return replace(
        row,
        team=row.team[:cut],
        place=row.place[:cut],
        person=row.person[:cut],
        model=row.model[:cut],
        kind=row.kind[:cut],
        audience=row.audience[:cut],
    )


class UsageStore(Protocol):
    async def add_usage(self, rows: Sequence[UsageRow]) -> None:
        """Add each row's counts to the stored row with its key (created when missing), all in
        one transaction where the backend has them."""

    async def usage(
        self, *, since: str, team: str | None = None, person: str | None = None
    ) -> list[UsageRow]:
        """Rows from day `since` (YYYY-MM-DD) on, of one team and/or person, or all."""

    async def forget_person(self, person: str) -> int:
        """Move this person's rows to FORGOTTEN (merged with rows already there); returns how
        many rows were moved."""


def usage_of(store: object) -> UsageStore | None:
    """The usage store on the same connection as a durable store, or None."""
    from bot.stores.mongo import MongoStore
    from bot.stores.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        from bot.stores.usage_sqlite import SqliteUsage

        return SqliteUsage(store.worker)
    if isinstance(store, MongoStore):
        from bot.stores.usage_mongo import MongoUsage

        return MongoUsage(store.db)
    return None


class PendingRows(Protocol):
    def forget(self, person: str, *, as_: str) -> int: ...


class UsagePeople:
    """An erasure tier (`bot.memory.erasure`): `/memory forget all` takes the person's id out of
    the usage rows, the stored ones and those the meter has not flushed yet. Not a memory, so
    it counts none."""

    def __init__(self, store: UsageStore, pending: PendingRows | None = None) -> None:
        self.store = store
        self.pending = pending

    async def erase_person(self, person: object) -> int:
        person_id = str(getattr(person, "id", person))
        if self.pending is not None:
            self.pending.forget(person_id, as_=FORGOTTEN)
        await self.store.forget_person(person_id)
        return 0

    async def compact(self) -> None:
        """The main store's compaction covers it (same file / database)."""
