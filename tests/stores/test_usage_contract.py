"""The usage store (`bot.stores.usage`) on every backend: increments add, rows stay apart by
their key, queries filter by day, team and person, bounds hold, and forget moves a person's
rows to FORGOTTEN without changing the team's totals."""

from __future__ import annotations

import asyncio

import pytest

from bot.stores.protocols import Store
from bot.stores.usage import FORGOTTEN, MAX_FIELD_CHARS, UsageRow, UsageStore, usage_of

ADA, BOB = "slack:T1:UADA", "slack:T1:UBOB"


def row(day: str = "2026-12-05", person: str = ADA, **counts: int) -> UsageRow:
    base = {"requests": 1, "prompt": 100, "cached": 20, "completion": 10, "cost_micros": 27}
    base.update(counts)
    return UsageRow(day, "slack:T1", "C1", person, "gpt-x", "chat", "slack:T1:public", **base)


@pytest.fixture
def usage(store: Store) -> UsageStore:
    kept = usage_of(store)
    assert kept is not None
    return kept


async def test_increments_add_up_per_key(usage: UsageStore) -> None:
    await usage.add_usage([row(), row()])
    await usage.add_usage([row(estimated=1), row(person=BOB)])
    rows = {r.person: r for r in await usage.usage(since="2026-12-01", team="slack:T1")}
    assert set(rows) == {ADA, BOB}
    ada = rows[ADA]
    assert (ada.requests, ada.prompt, ada.cached, ada.completion) == (3, 300, 60, 30)
    assert (ada.cost_micros, ada.estimated, ada.audience) == (81, 1, "slack:T1:public")


async def test_concurrent_batches_lose_no_count(usage: UsageStore) -> None:
    await asyncio.gather(*(usage.add_usage([row(), row(person=BOB)]) for _ in range(20)))
    rows = await usage.usage(since="2026-12-05")
    assert sum(r.requests for r in rows) == 40
    assert sum(r.prompt for r in rows) == 4000


async def test_filters_by_day_team_and_person(usage: UsageStore) -> None:
    other_team = UsageRow("2026-12-05", "slack:T2", "C9", "slack:T2:U1", "gpt-x", "chat")
    await usage.add_usage([row("2026-11-30"), row("2026-12-05"), row(person=BOB), other_team])
    assert len(await usage.usage(since="2026-12-01")) == 3  # T1 ada and bob today, T2
    assert {r.day for r in await usage.usage(since="2026-11-01", person=ADA)} == {
        "2026-11-30",
        "2026-12-05",
    }
    assert [r.team for r in await usage.usage(since="2026-12-01", team="slack:T2")] == ["slack:T2"]


async def test_long_names_are_cut_to_the_bound(usage: UsageStore) -> None:
    await usage.add_usage([row(person="p" * 100_000)])
    (kept,) = await usage.usage(since="2026-12-01")
    assert len(kept.person) == MAX_FIELD_CHARS


async def test_forget_moves_rows_and_keeps_totals(usage: UsageStore) -> None:
    await usage.add_usage([row(), row(person=BOB), row("2026-12-04")])
    before = await usage.usage(since="2026-12-01", team="slack:T1")
    assert await usage.forget_person(ADA) == 2
    after = await usage.usage(since="2026-12-01", team="slack:T1")
    assert ADA not in {r.person for r in after}
    assert {r.person for r in after} == {BOB, FORGOTTEN}
    assert sum(r.prompt for r in after) == sum(r.prompt for r in before)
    assert sum(r.cost_micros for r in after) == sum(r.cost_micros for r in before)
    # A second person forgotten merges into the same FORGOTTEN row of that key.
    assert await usage.forget_person(BOB) == 1
    today = [r for r in await usage.usage(since="2026-12-05") if r.person == FORGOTTEN]
    assert len(today) == 1 and today[0].requests == 2
    assert await usage.forget_person(ADA) == 0
