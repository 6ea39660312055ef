"""Budgets as `/config` values: `AMOUNT/PERIOD`, AMOUNT tokens (`200k`, `1.5m`, `5000`) or
dollars (`$5`, `$0.50`), PERIOD `day`, `week` or `month` in UTC.

Money is counted in micro-dollars (integers), so counters add exactly across replicas and a cost
is never a float that drifts. A week starts on Monday (ISO), a month on its first day.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal

Unit = Literal["tokens", "usd"]
Period = Literal["day", "week", "month"]
PERIODS: tuple[Period, ...] = ("day", "week", "month")
MICROS = 1_000_000  # micro-dollars per dollar
MAX_TOKENS = 10**12
MAX_DOLLARS = 10**7

_AMOUNT = re.compile(r"^(\$)?(\d{1,13}(?:\.\d{1,6})?)([km])?$")


@dataclass(frozen=True, slots=True)
class Budget:
    amount: int  # tokens, or micro-dollars
    unit: Unit
    period: Period

    def shown(self) -> str:
        return f"{format_amount(self.amount, self.unit)}/{self.period}"


def parse_budget(text: str) -> Budget:
    """`$5/month` -> Budget(5_000_000, "usd", "month"). ValueError says what is allowed."""
    raw = text.strip().replace(" ", "").casefold()
    amount_text, _, period = raw.partition("/")
    if period not in PERIODS:
        raise ValueError("a budget is AMOUNT/PERIOD with PERIOD day, week or month")
    match = _AMOUNT.match(amount_text)
    if match is None:
        raise ValueError("AMOUNT is tokens (200k, 1.5m, 5000) or dollars ($5, $0.50)")
    dollar, number, scale = match.groups()
    if dollar and scale:
        raise ValueError("a dollar amount takes no k or m ($5, not $5k)")
    value = float(number) * {"k": 1_000, "m": 1_000_000, None: 1}[scale]
    if dollar:
        if not 0 < value <= MAX_DOLLARS:
            raise ValueError(f"a dollar budget is more than $0 and at most ${MAX_DOLLARS:,}")
        return Budget(round(value * MICROS), "usd", period)  # type: ignore[arg-type]
    if not 1 <= value <= MAX_TOKENS:
        raise ValueError("a token budget is at least 1 token")
    return Budget(int(value), "tokens", period)  # type: ignore[arg-type]


def format_amount(amount: int, unit: Unit) -> str:
    if unit == "usd":
        if amount % 10_000 == 0:  # whole cents
            return f"${amount / MICROS:,.2f}"
        return "$" + f"{amount / MICROS:,.6f}".rstrip("0")
    return f"{amount:,} tokens"


def period_start(period: Period, now: datetime) -> date:
    day = now.astimezone(UTC).date()
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def period_end(period: Period, now: datetime) -> datetime:
    """When the period that holds `now` ends (the budget resets), UTC midnight."""
    start = period_start(period, now)
    if period == "day":
        end = start + timedelta(days=1)
    elif period == "week":
        end = start + timedelta(days=7)
    else:
        end = (start.replace(day=28) + timedelta(days=4)).replace(day=1)
    return datetime(end.year, end.month, end.day, tzinfo=UTC)


def when_it_resets(period: Period, now: datetime) -> str:
    """'at midnight UTC' / 'on Monday 7 December (UTC)' / 'on 1 January (UTC)'."""
    end = period_end(period, now)
    if period == "day":
        return "at midnight UTC"
    if period == "week":
        return f"on Monday {end.day} {end:%B} (UTC)"
    return f"on {end.day} {end:%B} (UTC)"
