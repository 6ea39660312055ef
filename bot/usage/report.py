"""Usage as people read it: `/usage` (your own; admins also the team's) and `bot usage`.

Sums over the stored day rows plus what the meter has not flushed yet, so a request made a
moment ago is counted. Costs are shown to the cent; a model without a price is shown in
tokens with "no price" (its cost is unknown, not zero).
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime

from bot.stores.feedback import FeedbackTotals, Tally
from bot.stores.usage import FORGOTTEN, UsageRow, UsageStore
from bot.usage.budgets import MICROS, period_start

TOP = 10  # lines per breakdown in chat answers; the rest are summed as "others"


@dataclass
class Totals:
    requests: int = 0
    prompt: int = 0
    cached: int = 0
    completion: int = 0
    cost_micros: int = 0
    unpriced: int = 0
    estimated: int = 0

    def add(self, r: UsageRow) -> None:
        self.requests += r.requests
        self.prompt += r.prompt
        self.cached += r.cached
        self.completion += r.completion
        self.cost_micros += r.cost_micros
        self.unpriced += r.unpriced
        self.estimated += r.estimated

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion

    def shown(self) -> str:
        cost = f"${self.cost_micros / MICROS:,.2f}"
        if self.unpriced and not self.cost_micros:
            cost = "no price"
        elif self.unpriced:
            cost += " + unpriced requests"
        est = f", {self.estimated} estimated" if self.estimated else ""
        return (
            f"{self.tokens:,} tokens ({self.prompt:,} in, {self.cached:,} of them cached, "
            f"{self.completion:,} out; {self.requests:,} request{'' if self.requests == 1 else 's'}"
            f"{est}), {cost}"
        )


def total(rows: Iterable[UsageRow]) -> Totals:
    t = Totals()
    for r in rows:
        t.add(r)
    return t


def by(rows: Iterable[UsageRow], key: Callable[[UsageRow], str]) -> list[tuple[str, Totals]]:
    groups: dict[str, Totals] = defaultdict(Totals)
    for r in rows:
        groups[key(r)].add(r)
    return sorted(groups.items(), key=lambda kv: (-kv[1].cost_micros, -kv[1].tokens, kv[0]))


async def usage_rows(
    store: UsageStore | None,
    pending: Callable[[], Sequence[UsageRow]],
    *,
    since: date,
    team: str | None = None,
    person: str | None = None,
) -> list[UsageRow]:
    """Stored rows and not yet flushed ones, filtered the same way."""
    rows = (
        list(await store.usage(since=since.isoformat(), team=team, person=person)) if store else []
    )
    for r in pending():
        if r.day < since.isoformat() or (team is not None and r.team != team):
            continue
        if person is not None and r.person != person:
            continue
        rows.append(r)
    return rows


def personal(rows: Sequence[UsageRow], now: datetime) -> str:
    lines = ["Your usage here:"]
    for period in ("day", "week", "month"):
        start = period_start(period, now).isoformat()
        label = {"day": "Today", "week": "This week", "month": "This month"}[period]
        lines.append(f"• {label}: {total(r for r in rows if r.day >= start).shown()}")
    return "\n".join(lines)


def _who(person: str) -> str:
    if not person:
        return "background work (summaries, consolidation)"
    if person == FORGOTTEN:
        return FORGOTTEN
    return f"<@{person.rsplit(':', 1)[-1]}>"


def _where(place: str) -> str:
    return f"<#{place}>" if place else "no place (background work)"


def team_report(rows: Sequence[UsageRow], now: datetime) -> str:
    """An admin's view of the month: totals, then by place, person, model and kind."""
    start = period_start("month", now).isoformat()
    month = [r for r in rows if r.day >= start]
    lines = [f"The team this month: {total(month).shown()}"]
    for title, key in (
        ("By place", lambda r: _where(r.place)),
        ("By person", lambda r: _who(r.person)),
        ("By model", lambda r: r.model or "?"),
        ("By kind", lambda r: r.kind),
    ):
        groups = by(month, key)
        if not groups:
            continue
        lines.append(f"{title}:")
        lines += [f"• {name}: {t.shown()}" for name, t in groups[:TOP]]
        if len(groups) > TOP:
            rest = Totals()
            for _, t in groups[TOP:]:
                for field in vars(rest):
                    setattr(rest, field, getattr(rest, field) + getattr(t, field))
            lines.append(f"• {len(groups) - TOP} others: {rest.shown()}")
    return "\n".join(lines)


def feedback_lines(
    totals: FeedbackTotals,
    *,
    people: bool,
    where: Callable[[str], str],
    title: str = "Feedback on replies",
) -> str:
    """Votes on the bot's replies: the total, then by place, model and (admins) person."""

    def shown(t: Tally) -> str:
        return f"{t.up:,} up, {t.down:,} down"

    lines = [f"{title}: {shown(totals.total)}"]
    groups: list[tuple[str, dict[str, Tally], Callable[[str], str]]] = [
        ("By place", totals.by_place, where),
        ("By model", totals.by_model, lambda m: m or "?"),
    ]
    if people:
        groups.append(("By person", totals.by_person, _who))
    for title, tallies, name in groups:
        if not tallies:
            continue
        ranked = sorted(tallies.items(), key=lambda kv: (-(kv[1].up + kv[1].down), kv[0]))
        lines.append(f"{title}:")
        lines += [f"• {name(key)}: {shown(t)}" for key, t in ranked[:TOP]]
        if len(ranked) > TOP:
            lines.append(f"• {len(ranked) - TOP} others")
    return "\n".join(lines)


CSV_FIELDS = (
    "day", "team", "place", "person", "model", "kind", "requests", "prompt_tokens",
    "cached_prompt_tokens", "completion_tokens", "cost_usd", "unpriced_requests",
    "estimated_requests",
)  # fmt: skip


def as_csv(rows: Sequence[UsageRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for r in sorted(rows, key=lambda r: r.key):
        writer.writerow(
            [
                r.day,
                r.team,
                r.place,
                r.person,
                r.model,
                r.kind,
                r.requests,
                r.prompt,
                r.cached,
                r.completion,
                f"{r.cost_micros / MICROS:.6f}",
                r.unpriced,
                r.estimated,
            ]
        )
    return out.getvalue()


def operator_report(rows: Sequence[UsageRow]) -> str:
    """`bot usage`: totals, then per team, place, person and model."""
    lines = [f"Total: {total(rows).shown()}"]
    for title, key in (
        ("team", lambda r: r.team or "-"),
        ("place", lambda r: f"{r.team} {r.place or '-'}"),
        ("person", lambda r: r.person or "-"),
        ("model", lambda r: r.model or "?"),
        ("kind", lambda r: r.kind),
    ):
        lines.append(f"By {title}:")
        lines += [f"  {name}: {t.shown()}" for name, t in by(rows, key)]
    return "\n".join(lines)


def utcnow() -> datetime:
    return datetime.now(UTC)
